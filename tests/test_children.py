"""The controller's spawned processes (``notebook.controller.children``) without a kernel.

Real processes are started from ``spawn`` messages as the ranks send them; their output,
exits, refusals (nothing starts) and ending are checked through ``Children``'s own calls.
"""

from __future__ import annotations

import os
import select
import sys
import time
from typing import Any

import pytest
from conftest import alive

from ipympi.core import control as ctl
from ipympi.core.errors import ERR_SPAWN, SUCCESS
from ipympi.notebook.controller.children import Children


def environment(index: int, size: int) -> dict[str, str]:
    return {**os.environ, ctl.ENV_RANK: str(index), ctl.ENV_SIZE: str(size)}


def request(*apps: dict[str, Any]) -> dict[str, Any]:
    return {"type": ctl.SPAWN, "id": 1, "apps": list(apps), "parents": [0], "context": 8, "base": 0}


def app(code: str, count: int = 1) -> dict[str, Any]:
    return {"argv": [sys.executable, "-c", code], "maxprocs": count}


def collect(children: Children, timeout: float = 20.0) -> tuple[list, list]:
    """Everything the children say until all have exited."""
    items: list = []
    exits: list = []
    deadline = time.monotonic() + timeout
    while children.procs and time.monotonic() < deadline:
        select.select([children.fd], [], [], 0.5)
        said, ended = children.take()
        items += said
        exits += ended
    return items, exits


def text_of(items: list, index: int, name: str = "stdout") -> str:
    return "".join(c["text"] for i, kind, c in items if i == index and c["name"] == name)


@pytest.mark.timeout(60)
def test_children_take_the_next_indexes_and_say_what_they_print() -> None:
    children = Children()
    children.reset(2)
    code = (
        "import os, sys; print('hi from', os.environ['IPYMPI_RANK'], "
        "os.environ['IPYMPI_WORLD_BASE'], os.environ['IPYMPI_SIZE'], "
        "os.environ['IPYMPI_APPNUM'])"
    )
    answer = children.spawn(request(app(code, 2), app("import sys; sys.exit(3)")), environment)
    try:
        assert answer["ranks"] == [2, 3, 4]
        assert answer["errcodes"] == [SUCCESS] * 3
        assert "error" not in answer
        items, exits = collect(children)
        assert text_of(items, 2) == "hi from 2 2 3 0\n"
        assert text_of(items, 3) == "hi from 3 2 3 0\n"
        assert sorted(exits) == [(2, 0), (3, 0), (4, 3)]
        notice = children.failure_notice(4, 3)
        assert notice == (
            4,
            "stream",
            {"name": "stderr", "text": "spawned process 4 exited with status 3\n"},
        )
        assert children.spawn(request(app("pass")), environment)["ranks"] == [5]
        collect(children)
    finally:
        children.close(1.0)


@pytest.mark.timeout(60)
def test_a_request_that_cannot_be_met_starts_nothing() -> None:
    children = Children()
    children.reset(2)
    missing = {"argv": ["no-such-command-here"], "maxprocs": 2}
    answer = children.spawn(request(app("pass"), missing), environment)
    assert answer["ranks"] == [] and answer["errcodes"] == [ERR_SPAWN] * 3
    assert "no-such-command-here" in answer["error"]
    assert not children.procs and children.next_index == 2
    no_parents = {**request(app("pass")), "parents": []}
    assert children.spawn(no_parents, environment)["error"] == "the request names no parents"
    refused = children.spawn(request(app("pass")), lambda index, size: None)
    assert refused["error"] == "the ranks of this session start no processes"
    assert not children.procs


@pytest.mark.timeout(60)
def test_close_ends_children_that_do_not_exit() -> None:
    children = Children()
    children.reset(1)
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
    children.spawn(request(app(code, 2)), environment)
    pids = [child.popen.pid for child in children.procs.values()]
    assert all(alive(pid) for pid in pids)
    children.close(0.5)
    assert not any(alive(pid) for pid in pids)
    assert not children.procs and not children.running
    refused = children.spawn(request(app("pass")), environment)
    assert refused["error"] == "the world is ending"


@pytest.mark.timeout(60)
def test_output_is_read_while_nobody_takes_it() -> None:
    """A child printing far more than a pipe holds finishes while no one takes its output
    (as between two cells); all of it is there at the next take, in order."""
    children = Children()
    children.reset(1)
    code = "import sys\nfor i in range(20000):\n    print(f'line {i:05d}', 'é' * 20)\n"
    children.spawn(request(app(code)), environment)
    (child,) = children.procs.values()
    try:
        child.popen.wait(timeout=30)  # stalls on a full pipe if nobody reads it
        items, exits = collect(children)
        lines = text_of(items, 1).splitlines()
        # two-byte characters cut by reads are decoded whole
        assert lines == [f"line {i:05d} " + "é" * 20 for i in range(20000)]
        assert exits == [(1, 0)]
    finally:
        children.close(1.0)
