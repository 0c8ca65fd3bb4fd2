"""A helper process's events and stderr (:mod:`ipympi.launch.jsonlines`), with real processes."""

from __future__ import annotations

import select
import sys
import time

from ipympi.launch.jsonlines import JsonLinesProcess

PROGRAM = (
    "import sys\n"
    'print(\'{"type": "ready"}\', flush=True)\n'
    "print('not an event', flush=True)\n"
    "print('ssh: connect to host b port 22: Connection refused', file=sys.stderr)\n"
    "sys.exit(255)\n"
)


def events_until_the_end(proc: JsonLinesProcess) -> list[dict]:
    events: list[dict] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        select.select([proc.fd], [], [], 1.0)
        got = proc.read()
        if got is None:
            return events
        events += got
    raise AssertionError("no end of file")


def test_stderr_read_with_the_end_of_the_events_is_still_given_once() -> None:
    # Reading the events to their end also reads stderr (for the exit note): a caller
    # that asks for the new stderr lines only then still gets them, and only once.
    proc = JsonLinesProcess([sys.executable, "-c", PROGRAM], capture_stderr=True)
    try:
        assert events_until_the_end(proc) == [{"type": "ready"}]
        assert proc.proc.wait(30) == 255
        said = "ssh: connect to host b port 22: Connection refused"
        assert proc.new_errors() == [said]
        assert proc.new_errors() == []
        assert list(proc.errors) == ["not an event", said]
        assert said in proc.exit_note()
    finally:
        proc.stop(grace=5)
