"""Which call of mpi4py a thread is inside, told from another thread (a real MPI).

Each test starts a Python process of one MPI rank (mpi4py's singleton
initialisation, no launcher) whose main thread blocks in a real MPI call that
can never complete, while a second thread asks
:func:`ipympi.notebook.engine.mpicall.current_call` (or a
:class:`~ipympi.notebook.engine.mpicall.StayProbe`) about it and prints the answer;
the process then ends itself, without ``MPI_Finalize``: it notes the shared-memory
file its MPI maps (MPICH's) as a world's rank does, and the test removes it.
Skipped where mpi4py is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ipympi.launch.sessiondir import remove_session_dir

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("mpi4py") is None,
        reason="needs mpi4py with an MPI library (pip install mpi4py mpich)",
    ),
    pytest.mark.timeout(60),
]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The looking thread, and what the main thread runs after it (``{body}``): the call
# the main thread is found in at five looks in a row, 0.1 s apart (the body's last call
# blocks for ever; an earlier one, or the first MPI call's own start, can be caught
# on a loaded machine).
SCRIPT = """\
import json, os, sys, threading, time
from mpi4py import MPI
from ipympi.launch.sessiondir import note_shared_memory
from ipympi.notebook.engine.mpicall import current_call

comm = MPI.COMM_WORLD
note_shared_memory(os.environ["WORLD_DIR"], 0)
main = threading.main_thread().ident

def look():
    deadline = time.monotonic() + 20
    seen, times = None, 0
    while time.monotonic() < deadline:
        time.sleep(0.1)
        found = current_call(sys._current_frames()[main])
        seen, times = found, (times + 1 if found == seen else 1)
        if times >= 5 and (found is not None or {plain}):
            print(json.dumps(found), flush=True)
            os._exit(0)
    os._exit(3)

threading.Thread(target=look, daemon=True).start()
time.sleep(0.3)
{body}
"""


# The probe's looks, four a second, while the main thread runs ``{body}``.
PROBE_SCRIPT = """\
import json, os, sys, threading, time
from mpi4py import MPI
from ipympi.launch.sessiondir import note_shared_memory
from ipympi.notebook.engine.mpicall import StayProbe

comm = MPI.COMM_WORLD
note_shared_memory(os.environ["WORLD_DIR"], 0)
probe = StayProbe()

def look():
    time.sleep(0.3)
    stays = []
    for _ in range(8):
        stays.append(probe.look("here", time.monotonic()))
        time.sleep(0.25)
    print(json.dumps(stays), flush=True)
    os._exit(0)

threading.Thread(target=look, daemon=True).start()
{body}
"""


def run_rank(script_text: str) -> Any:
    """Run one rank's script (from a file, so that its source can be read); the JSON
    value of its last line of output."""
    with tempfile.TemporaryDirectory() as directory:
        script, world = Path(directory) / "rank.py", Path(directory) / "world"
        script.write_text(script_text)
        world.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("IPYMPI_")}
        env["PYTHONPATH"] = os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])
        env["WORLD_DIR"] = str(world)
        try:
            done = subprocess.run(
                [sys.executable, str(script)], capture_output=True, text=True, timeout=40, env=env
            )
        finally:  # the noted files of the process, gone now: MPICH's singleton's
            remove_session_dir(str(world))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def call_of(body: str, plain: bool = False) -> dict | None:
    """What the looking thread saw while the main thread ran ``body``."""
    found = run_rank(SCRIPT.format(body=textwrap.dedent(body), plain=plain))
    return found  # type: ignore[no-any-return]


def test_a_receive_is_named_as_written_with_its_peer_and_tag() -> None:
    found = call_of(
        """
        source = 0
        def helper():
            return comm.recv(
                source=source,   tag=7)
        helper()
        """
    )
    assert found is not None
    assert found["call"] == "comm.recv(source=source, tag=7)"
    assert (found["method"], found["kind"], found["peer"], found["tag"]) == ("recv", "recv", 0, 7)
    assert found["world"] is True
    assert found["position"]


def test_a_synchronous_send_and_its_defaults() -> None:
    found = call_of("comm.Ssend(bytearray(8), 0)")
    assert found is not None
    assert (found["kind"], found["peer"], found["tag"]) == ("send", 0, 0)


def test_wildcards_and_requests() -> None:
    found = call_of("comm.recv(tag=MPI.ANY_TAG)")
    assert found is not None and (found["peer"], found["tag"]) == ("ANY_SOURCE", "ANY_TAG")
    found = call_of("request = comm.irecv(source=0, tag=3)\nMPI.Request.Waitall([request])")
    assert found is not None
    assert (found["call"], found["kind"]) == ("MPI.Request.Waitall([request])", "wait")
    assert "world" not in found


def test_a_duplicated_communicator_is_not_the_world() -> None:
    found = call_of("other = comm.Dup()\nother.recv(source=0, tag=1)")
    assert found is not None and found["world"] is False


def test_a_call_of_something_else_is_no_mpi_call() -> None:
    assert call_of("import socket\nends = socket.socketpair()\nends[0].recv(1)", plain=True) is None
    assert call_of("time.sleep(30)", plain=True) is None


def test_the_probe_tells_a_long_call_from_a_loop_of_short_ones() -> None:
    stays = run_rank(PROBE_SCRIPT.format(body="comm.recv(source=0, tag=5)"))
    assert stays[0] == 0.0
    assert all(b > a for a, b in zip(stays, stays[1:])), stays  # it has stayed inside
    assert stays[-1] > 1.0
    loop = "while True:\n    comm.Iprobe()\n    time.sleep(0.01)"
    assert run_rank(PROBE_SCRIPT.format(body=loop)) == [0.0] * 8  # it keeps leaving
