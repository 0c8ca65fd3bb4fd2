"""A session's cluster with real engine processes, driven without a kernel.

Covers the engine life cycle (start, stop, restart, death), what engines say
(output at the Python and the file-descriptor level, results, errors),
interrupts and the realignment of collectives after them, the data API, and
the authentication of engine traffic.
"""

from __future__ import annotations

import os
import signal
import stat
import threading
import time

import pytest
import zmq
from conftest import wait_gone

from ipympi.notebook.controller import session
from ipympi.notebook.controller.cluster import Cluster, ClusterError, Submission
from ipympi.notebook.controller.interrupts import interrupts_at_waits
from ipympi.notebook.engine.protocol import MAGIC, EngineMessage, Signer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def cluster():
    with Cluster(3) as c:
        c.start()
        yield c


def run(cluster: Cluster, code: str, targets=None, timeout: float = 20.0) -> Submission:
    req = cluster.submit(
        "execute", {"code": code}, range(cluster.n) if targets is None else targets
    )
    assert cluster.wait(req, timeout), f"no reply to {code!r} from ranks {req.pending}"
    cluster.forget(req)
    return req


def stdout(req: Submission, rank: int) -> str:
    return "".join(
        c["text"]
        for r, kind, c in req.messages
        if r == rank and kind == "stream" and c["name"] == "stdout"
    )


# -- life cycle ---------------------------------------------------------------------------
def test_engines_start_and_know_their_rank(cluster: Cluster) -> None:
    assert cluster.ready
    req = run(cluster, "print(rank, size, comm.Get_rank(), type(MPI).__name__)")
    for rank in range(3):
        assert stdout(req, rank) == f"{rank} 3 {rank} module\n"


def test_session_directory_is_private(cluster: Cluster) -> None:
    mode = stat.S_IMODE(os.stat(cluster.session_dir).st_mode)
    assert mode == 0o700


def test_results_and_errors_come_back_per_rank(cluster: Cluster) -> None:
    req = run(cluster, "rank * 10")
    results = {
        r: c["data"]["text/plain"] for r, kind, c in req.messages if kind == "execute_result"
    }
    assert results == {0: "0", 1: "10", 2: "20"}
    req = run(cluster, "1 / (rank - 1)")
    errors = req.errors()
    assert list(errors) == [1]
    assert errors[1]["ename"] == "ZeroDivisionError"
    assert req.replies[1].content["status"] == "error"
    assert req.replies[0].content["status"] == "ok"


def test_namespaces_persist_across_cells(cluster: Cluster) -> None:
    run(cluster, "kept = rank + 100")
    req = run(cluster, "print(kept)")
    assert [stdout(req, r) for r in range(3)] == ["100\n", "101\n", "102\n"]


def test_output_of_c_code_children_and_shell_escapes_is_captured(cluster: Cluster) -> None:
    code = (
        "import os, subprocess\n"
        "print('py', flush=True)\n"
        "os.write(1, b'fd\\n')\n"
        "subprocess.run(['echo', 'child'], check=True)\n"
        "!echo bang\n"
    )
    req = run(cluster, code, [0])
    text = stdout(req, 0).replace("\r\n", "\n")
    assert text.splitlines() == ["py", "fd", "child", "bang"]


def test_ipython_syntax_works_on_the_ranks(cluster: Cluster) -> None:
    # The ranks skip IPython's token pass on plain Python only (engine/inputs.py).
    code = (
        "import os\n"
        "v = !echo hi\n"
        "w = %pwd\n"
        "kind = type(get_ipython().input_transformer_manager).__name__\n"
        "print(v[0], w == os.getcwd(), kind, (rank + 1) % 3 != 5)\n"
    )
    req = run(cluster, code, [0])
    assert stdout(req, 0) == "hi True RankTransformerManager True\n"


def test_large_and_unicode_output_arrives_whole_and_in_order(cluster: Cluster) -> None:
    code = "for i in range(5000):\n    print(i, 'é€𝄞' * (i % 3))\n"
    req = run(cluster, code, [1])
    lines = stdout(req, 1).splitlines()
    assert lines == [f"{i} {'é€𝄞' * (i % 3)}" for i in range(5000)]


def test_stderr_and_displays(cluster: Cluster) -> None:
    code = (
        "import sys\nfrom IPython.display import display, HTML\n"
        "print('warn', file=sys.stderr)\ndisplay(HTML('<b>x</b>'))\n"
    )
    req = run(cluster, code, [2])
    kinds = [(kind, c.get("name")) for r, kind, c in req.messages]
    assert kinds == [("stream", "stderr"), ("display_data", None)]
    assert req.messages[1][2]["data"]["text/html"] == "<b>x</b>"


def test_state_queries_answer_while_a_rank_is_blocked(cluster: Cluster) -> None:
    req = cluster.submit("execute", {"code": "comm.recv(source=1, tag=5)"}, [0])
    assert not cluster.wait(req, 0.5)
    rows = cluster.status()
    assert [row["state"] for row in rows] == ["blocked", "idle", "idle"]
    assert rows[0]["call"].startswith("recv(source=1, tag=5)")
    assert "line 1 of cell" in rows[0]["where"] or "ipython-input" in rows[0]["where"]
    assert all(row["pid"] and row["memory"] for row in rows)
    run(cluster, "comm.send('late', dest=0, tag=5)", [1])
    assert cluster.wait(req, 10)
    assert req.replies[0].content["status"] == "ok"


def test_a_late_answer_to_a_state_query_is_not_taken_for_the_next_one(cluster: Cluster) -> None:
    cluster.query_states(wait=False)  # its answers come while the next query waits
    states = cluster.query_states()
    assert [s["state"] for s in states] == ["idle"] * 3
    assert cluster._ctl is not None
    assert {engine.state.get("query") for engine in cluster.engines} == {cluster._ctl.query_id}


def test_interrupt_reports_where_and_the_next_cell_works(cluster: Cluster) -> None:
    run(cluster, "before = rank")
    code = "if rank == 0:\n    comm.recv(source=1, tag=7)\nelse:\n    comm.Barrier()\n"
    req = cluster.submit("execute", {"code": code}, range(3))
    assert not cluster.wait(req, 0.5)
    started = time.monotonic()
    cluster.interrupt(req)
    assert time.monotonic() - started < 5
    errors = req.errors()
    assert sorted(errors) == [0, 1, 2]
    assert {e["ename"] for e in errors.values()} == {"KeyboardInterrupt"}
    assert errors[0]["where"].startswith("in recv(source=1, tag=7) on MPI_COMM_WORLD")
    assert errors[1]["where"].startswith("in Barrier")
    req = run(cluster, "print(comm.allreduce(rank), before)")
    assert [stdout(req, r) for r in range(3)] == ["3 0\n", "3 1\n", "3 2\n"]
    req = run(cluster, "print(comm.bcast(rank, root=2)); comm.Barrier()")
    assert [stdout(req, r) for r in range(3)] == ["2\n"] * 3


def test_ctrl_c_while_following_a_cell_is_taken_only_where_the_controller_waits(
    cluster: Cluster,
) -> None:
    before = signal.getsignal(signal.SIGINT)
    with interrupts_at_waits():
        signal.raise_signal(signal.SIGINT)  # outside a wait: kept for the next one
        with pytest.raises(KeyboardInterrupt):
            cluster.pump(time.monotonic() + 5, lambda: False)
        timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
        started = time.monotonic()
        timer.start()
        with pytest.raises(KeyboardInterrupt):  # inside a wait: at once
            cluster.pump(time.monotonic() + 10, lambda: False)
        assert time.monotonic() - started < 5
        timer.join()
        assert cluster.pump(time.monotonic() + 0.1, lambda: False) is False  # none left
    assert signal.getsignal(signal.SIGINT) is before
    run(cluster, "print(rank)")  # the cluster is unharmed


def test_data_api_round_trips(cluster: Cluster) -> None:
    import numpy as np

    cluster.push({"a": 5, "b": [1, 2]})
    assert cluster.pull("a") == [5, 5, 5]
    assert cluster.pull(["a", "b"], targets="1") == [(5, [1, 2])]
    cluster.scatter("part", list(range(7)))
    assert cluster.pull("part") == [[0, 1, 2], [3, 4], [5, 6]]
    assert cluster.gather("part") == list(range(7))
    cluster.scatter("arr", np.arange(10.0))
    assert np.array_equal(cluster.gather("arr"), np.arange(10.0))
    assert cluster.apply(pow, 2, 3, targets="::2") == [8, 8]


def test_pull_of_an_undefined_name_raises_naming_the_rank(cluster: Cluster) -> None:
    from ipympi.notebook.controller.execute import RankError

    with pytest.raises(RankError) as info:
        cluster.pull("nowhere_defined")
    assert type(info.value).__name__ == "NameError"
    assert "nowhere_defined" in str(info.value)


# -- authentication -------------------------------------------------------------------------
def test_forged_requests_cannot_run_code(cluster: Cluster, tmp_path) -> None:
    marker = tmp_path / "pwned"
    code = f"open({str(marker)!r}, 'w').close()"
    target = b"in%d.%d" % (cluster.gen, 0)
    good = Signer(cluster.key).encode(EngineMessage("execute", {"code": code}))
    forgeries = [
        Signer(b"an attacker's own key!").encode(EngineMessage("execute", {"code": code})),
        [MAGIC, b"", good[2]],  # unsigned
        [MAGIC, good[1], good[2].replace(b"pwned", b"pwneD")],  # tampered after signing
        [b"raw", code.encode()],
    ]
    for frames in forgeries:
        cluster._router.send_multipart([target, *frames])
    req = run(cluster, "print('alive')", [0])  # served after the forgeries
    assert stdout(req, 0) == "alive\n"
    assert not marker.exists()


def test_forged_engine_messages_are_dropped_by_the_controller(cluster: Cluster) -> None:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, b"intruder")
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"ipc://{cluster.session_dir}/engines")
    try:
        req = cluster.submit("execute", {"code": "import time; time.sleep(0.3)"}, [1])
        forged = Signer(b"not the session key!!").encode(
            EngineMessage("stream", {"name": "stdout", "text": "forged\n"}, parent=req.id)
        )
        before = cluster.dropped
        sock.send_multipart(forged)
        assert cluster.wait(req, 10)
        assert cluster.dropped == before + 1
        assert not any(kind == "stream" for _r, kind, _c in req.messages)
    finally:
        sock.close()


# -- failures and restarts (each with its own cluster) --------------------------------------
def test_a_dying_engine_is_reported_with_its_exit_status() -> None:
    with Cluster(2) as c:
        c.start()
        req = run(c, "import os\nif rank == 1: os._exit(3)")
        assert req.errors()[1]["ename"] == "EngineDied"
        assert "exited with status 3" in req.errors()[1]["evalue"]
        killed = c.engines[0].pid
        req = c.submit("execute", {"code": "import time; time.sleep(30)"}, [0])
        os.kill(killed, signal.SIGKILL)
        assert c.wait(req, 10)
        assert "SIGKILL" in req.errors()[0]["evalue"]
        assert [row["state"] for row in c.status()] == ["killed (SIGKILL)", "exited (3)"]
        c.restart()
        req = run(c, "print(comm.allreduce(1))")
        assert [stdout(req, r) for r in range(2)] == ["2\n", "2\n"]


def test_stop_restart_and_close_leave_no_process() -> None:
    c = Cluster(2)
    try:
        c.start()
        first = [e.pid for e in c.engines]
        c.restart(3)
        assert c.n == 3 and c.ready
        assert wait_gone(first) == []
        second = [e.pid for e in c.engines]
        assert set(first).isdisjoint(second)
        supervisor = c.launcher.supervisor.pid
        c.stop()
        assert wait_gone(second) == []
        req = c.submit("execute", {"code": "1"}, [0])
        assert req.done and req.errors()[0]["evalue"] == "rank 0 is not running"
    finally:
        c.close()
    assert wait_gone([supervisor]) == []
    assert not os.path.exists(c.session_dir)


def test_engines_die_with_the_supervisor() -> None:
    with Cluster(2) as c:
        c.start()
        pids = [e.pid for e in c.engines]
        os.kill(c.launcher.supervisor.pid, signal.SIGKILL)
        assert wait_gone(pids) == []
        c.pump(time.monotonic() + 2, lambda: not c.running)
        assert not c.running
        c.start()
        assert c.ready


def test_a_supervisor_that_cannot_start_is_reported_at_once(tmp_path) -> None:
    """A supervisor that dies before forking any engine ends the start with its
    exit status, instead of a wait for hellos until the start-up timeout."""
    broken = tmp_path / "IPython"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise RuntimeError('IPython is broken here')\n")
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    with Cluster(2, env=dict(os.environ, PYTHONPATH=path)) as c:
        began = time.monotonic()
        with pytest.raises(ClusterError, match=r"the engine supervisor ended \(exit status 1"):
            c.start()
        assert time.monotonic() - began < 20
        assert not c.running


def test_start_refuses_a_second_world_and_bad_sizes() -> None:
    with Cluster(1) as c:
        c.start()
        with pytest.raises(ClusterError, match="already running"):
            c.start()
    with pytest.raises(ValueError):
        Cluster(0)


def test_default_size_reads_ipympi_np(monkeypatch) -> None:
    monkeypatch.setenv("IPYMPI_NP", "3")
    assert session.default_size() == 3
    monkeypatch.setenv("IPYMPI_NP", "many")
    with pytest.raises(ClusterError, match="not a number"):
        session.default_size()
    monkeypatch.delenv("IPYMPI_NP")
    assert session.default_size() == 4
