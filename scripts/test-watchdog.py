#!/usr/bin/env python3
"""Runs the test command given as arguments and passes its output through, line by line.

A test that hangs must not hold the run until CI's own limit cuts it off with nothing
said: when the command prints nothing for --quiet seconds, this names the tests that
started and did not end, asks every test process for a backtrace of all its threads
(SIGABRT, which the Swift runtime's backtracer answers when SWIFT_BACKTRACE enables it),
then stops the command and exits 124.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

STARTED = re.compile(r"Test (\S+?\(.*?\)) started\.")
# A parameterized test ends "... with N test cases passed".
ENDED = re.compile(r"Test (\S+?\(.*?\))(?: with \d+ test cases?)? (?:passed|failed|skipped)")


def test_processes(session):
    """The test binaries of the command's session (their command line names the package's
    tests); another run's, on the same machine, are not touched."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                # pid (comm) state ppid pgrp session ...: comm may hold spaces.
                fields = handle.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read().split(b"\0")
        except (OSError, IndexError):
            continue
        if int(fields[3]) == session and command and command[0].endswith(b"PackageTests.xctest"):
            found.append(int(pid))
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quiet", type=int, default=900, help="seconds without output that count as a hang")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    running = {}
    last = [time.monotonic()]
    lock = threading.Lock()

    def pump():
        for raw in child.stdout:
            sys.stdout.buffer.write(raw)
            sys.stdout.buffer.flush()
            line = raw.decode("utf-8", "replace")
            with lock:
                last[0] = time.monotonic()
                if (match := STARTED.search(line)):
                    running[match.group(1)] = time.monotonic()
                elif (match := ENDED.search(line)):
                    running.pop(match.group(1), None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    while child.poll() is None:
        time.sleep(5)
        with lock:
            silent = time.monotonic() - last[0]
            unfinished = sorted(running.items(), key=lambda item: item[1])
        if silent < args.quiet:
            continue
        print(f"\ntest-watchdog: no output for {int(silent)} s; the tests still running:", flush=True)
        for name, since in unfinished:
            print(f"  {name} (started {int(time.monotonic() - since)} s ago)", flush=True)
        for pid in test_processes(child.pid):
            print(f"test-watchdog: asking process {pid} for its threads' backtraces", flush=True)
            try:
                os.kill(pid, signal.SIGABRT)
            except ProcessLookupError:
                pass
        # The backtracer writes for a while; then everything the command started stops.
        deadline = time.monotonic() + 120
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()
        reader.join(timeout=10)
        print("test-watchdog: the test run hung and was stopped", flush=True)
        return 124
    reader.join()
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
