#!/usr/bin/env python3
"""Validates WebSocket frames against docs/schemas/ with the reference JSON Schema
implementation (python-jsonschema, draft 2020-12).

Reads one JSON object per line on standard input: {"id": ..., "frame": <frame>}.
Writes one line per input: {"id": ..., "valid": true|false, "error": "..."}.
A frame whose "type" has no schema is invalid. Used by the contract tests.
"""
import json
import pathlib
import sys

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMAS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "schemas"
BASE = "https://whisper.invalid/schemas/"


def load():
    documents = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        documents[path.stem] = json.loads(path.read_text())
    # The key directory's shapes (a message may carry a head) are found by their $id.
    nested = [json.loads(path.read_text()) for path in sorted(SCHEMAS.glob("key-transparency/*.json"))]
    registry = Registry().with_resources(
        [(BASE + name + ".json", Resource.from_contents(doc)) for name, doc in documents.items()]
        + [(doc["$id"], Resource.from_contents(doc)) for doc in nested]
    )
    for doc in list(documents.values()) + nested:
        Draft202012Validator.check_schema(doc)
    return documents, registry


def main():
    documents, registry = load()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        item = json.loads(line)
        frame = item.get("frame")
        result = {"id": item.get("id"), "valid": False, "error": ""}
        kind = frame.get("type") if isinstance(frame, dict) else None
        if not isinstance(kind, str) or kind == "common" or kind not in documents:
            result["error"] = "no schema for this frame type"
        else:
            validator = Draft202012Validator(documents[kind], registry=registry)
            errors = sorted(validator.iter_errors(frame), key=lambda e: list(e.path))
            if errors:
                first = errors[0]
                result["error"] = "/".join(str(p) for p in first.path) + ": " + first.message[:200]
            else:
                result["valid"] = True
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
