#!/usr/bin/env python3
"""Writes the seed corpus of the fuzzer (Tests/Fuzz/corpus/<target>/), one file per
input named by its SHA-1, as libFuzzer names what it finds. Seeds: every JSON example
in docs/protocol.md, the invalid-frame fixtures of the contract tests, and each
example with its numbers and strings set at and past their boundaries. Inputs the
fuzzer found (crashes fixed since) are kept beside these; re-running adds, never removes.
"""
import hashlib
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "Tests" / "Fuzz" / "corpus"

# Numbers at and past every integer boundary, written as JSON text.
NUMBERS = [
    "0", "-0", "1", "-1", "0.0", "-0.0", "1.0", "1.5", "1e0", "1E2", "1e-2", "10e-1",
    "999999999999999999", "1000000000000000000", "9007199254740991", "9007199254740992",
    "2147483647", "2147483648", "-2147483649", "4294967296",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
    "18446744073709551615", "18446744073709551616", "123456789012345678901234567890",
    "-123456789012345678901234567890", "1e400", "-1e400", "1e-400", "0.5e-400",
    "1.0000000000000000000000000001", "1" + "0" * 400, "0" * 30, "00", "01",
]

# Strings at and past their length limits (lengths from docs/protocol.md).
def strings():
    out = ["", "x", "a" * 31, "a" * 32, "a" * 43, "a" * 128, "a" * 129, "a" * 256, "a" * 257,
           "\u00e9", "\U0001F600", "\\u0000", "WSP-AAAA-BBBB-CCCC", "WSP-AAAA-BBBB-CCC", "grp-" + "0" * 36]
    return out


def examples():
    text = (ROOT / "docs" / "protocol.md").read_text()
    for block in re.findall(r"```json\n(.*?)```", text, re.S):
        try:
            yield json.loads(block)
        except ValueError:
            continue


def fixtures():
    path = ROOT / "Tests" / "ContractTests" / "Fixtures" / "invalid-frames.json"
    for item in json.loads(path.read_text()):
        yield item["frame"]


def with_numbers(frame):
    """The frame's text with each integer field in turn replaced by each boundary number."""
    compact = json.dumps(frame, separators=(",", ":"), ensure_ascii=False)
    for match in re.finditer(r'("[A-Za-z]+":)(-?\d+)(?=[,}])', compact):
        for number in NUMBERS:
            yield compact[: match.start(2)] + number + compact[match.end(2):]


def with_strings(frame):
    payload = frame.get("payload") if isinstance(frame, dict) else None
    if not isinstance(payload, dict):
        return
    for key, value in payload.items():
        if isinstance(value, str):
            for replacement in strings():
                changed = json.loads(json.dumps(frame))
                changed["payload"][key] = replacement
                yield json.dumps(changed, separators=(",", ":"), ensure_ascii=False)


def frames():
    seen = []
    mutated = set()
    for frame in list(examples()) + list(fixtures()):
        seen.append(json.dumps(frame, separators=(",", ":"), ensure_ascii=False))
        kind = frame.get("type") if isinstance(frame, dict) else None
        # Every integer of every frame type at its boundaries; strings only for the
        # busiest frames (one example of each type is enough).
        if isinstance(kind, str) and kind not in mutated:
            mutated.add(kind)
            seen.extend(with_numbers(frame))
            if kind in ("send_message", "delivery_receipt", "fetch_pending"):
                seen.extend(with_strings(frame))
    seen += ["", "{", "[]", "null", "{}", '{"type":"ping","payload":{}}', '{"type":"ping","payload":{"a":' + "[" * 600 + "]" * 600 + "}}"]
    return [s.encode() for s in seen]


def resp():
    items = [
        "+OK\r\n", "-ERR unknown\r\n", ":0\r\n", ":-1\r\n", ":9223372036854775807\r\n", ":9223372036854775808\r\n",
        ":-9223372036854775809\r\n", ":12x\r\n", "$5\r\nhello\r\n", "$0\r\n\r\n", "$-1\r\n", "$-2\r\n",
        "$9223372036854775807\r\n", "$2147483648\r\nab", "*0\r\n", "*-1\r\n", "*-2\r\n", "*2\r\n$1\r\na\r\n:1\r\n",
        "*1048576\r\n", "*1048577\r\n", "*2147483647\r\n", "*2147483648\r\n", "*4294967295\r\n", "*4294967296\r\n",
        "*9223372036854775807\r\n", "*1\r\n" * 12 + ":1\r\n", "?\r\n", "*2\r\n",
        # A stream read: [[stream, [[id, [field, value, ...]]]]]
        "*1\r\n*2\r\n$6\r\nrouter\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*4\r\n$2\r\ngw\r\n$1\r\ng\r\n$2\r\nts\r\n$20\r\n99999999999999999999\r\n",
    ]
    return [s.encode() for s in items]


def commands():
    frame = '{"type":"message_delivered","payload":{"messageId":"m","status":"read","timestamp":1}}'
    items = [
        "deliver\nconn\n\n\n" + frame, "deliver\nconn\n\n1767268800000\n" + frame, "deliver\nconn\n\n-9223372036854775808\n",
        "deliver\nconn\n\n9223372036854775808\n", "deliver\n\n\n\n", "revoke\nconn\nreplaced_by_new_device\n\n",
        "revoke\nconn\nunknown\n\n", "supersede\nconn\n\n\n", "receipt\nconn\nWSP-AAAA-BBBB-CCCC 1-0\n\n" + frame,
        "receipt\nconn\nWSP-AAAA-BBBB-CCCC\n\n", "receipt\nconn\na b c\n\n", "gw conn", "gw", "", "10/1s",
        "99999999999999999999/1h", "1/9999999999999999h", "1000000000/366d", "1000000001/1s", "5/0s", "-1/1s",
    ]
    return [s.encode() for s in items]


def settings():
    items = [
        "WHISPER_HTTP_PORT=8080\nWHISPER_REDIS_URL=redis://127.0.0.1:6379/0\n",
        "WHISPER_HTTP_PORT=99999999999999999999\nWHISPER_REDIS_URL=redis://:@:99999999999999999999/-1\n",
        "WHISPER_POSTGRES_URL=postgres://u:p@h:5432/d?sslmode=require\nWHISPER_LOG_LEVEL=trace\n",
        "WHISPER_POSTGRES_URL=postgres://u@h:-1/d\nWHISPER_SHUTDOWN_GRACE_SECONDS=-9223372036854775809\n",
        "GATEWAY_RATE_LIMIT_SEND_PER_SENDER=99999999999999999999/1h\nX_Y=9223372036854775807/9223372036854775807h\n",
        "A_B=1/1s\nA_B=0/1s\nC_D=1e400\nE_F=nan\nG_H=-inf\nI_J=yes\nK_L=a,,b, ,c\n",
    ]
    return [s.encode() for s in items]


def main():
    for name, inputs in (("frames", frames()), ("resp", resp()), ("commands", commands()), ("settings", settings())):
        folder = CORPUS / name
        folder.mkdir(parents=True, exist_ok=True)
        for data in inputs:
            (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)
        print(f"{name}: {len(list(folder.iterdir()))} inputs")


if __name__ == "__main__":
    main()
