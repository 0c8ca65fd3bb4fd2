"""IPython Parallel's client API on ipympi's own session: ``ipympi.Cluster``, views, results.

Real engines (3 ranks of the built-in MPI), driven without a kernel; each test is one
or a few requests.
"""

from __future__ import annotations

import os
import pickle
import signal
import time

import numpy as np
import pytest
from conftest import wait_gone

import ipympi
from ipympi.mpi import byvalue
from ipympi.notebook.controller import session
from ipympi.notebook.controller.asyncresult import AsyncResult
from ipympi.notebook.controller.remote_errors import CompositeError, RemoteError, TimeoutError

pytestmark = pytest.mark.timeout(60)

N = 3


@pytest.fixture(scope="module")
def cluster():
    cluster = ipympi.Cluster(n=N)
    cluster.start_cluster_sync()
    yield cluster
    cluster.stop_cluster_sync()


@pytest.fixture
def rc(cluster):
    return cluster.connect_client_sync()


def notebook(func):
    """``func`` as if defined in a notebook cell (sent by value, like the notebook's)."""
    func.__module__ = "__main__"
    return func


@notebook
def rank_of() -> int:
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_rank()


def test_client_ids_and_views(rc) -> None:
    assert rc.ids == list(range(N))
    assert len(rc) == N
    assert rc[:].targets == "all" and len(rc[:]) == N
    assert rc[1].targets == 1
    assert rc[0, 2].targets == [0, 2]
    assert rc[1:].targets == [1, 2]
    assert rc[:].block is False


def test_apply_sync_async_and_single_target(rc) -> None:
    view = rc[:]
    assert view.apply_sync(rank_of) == [0, 1, 2]
    ar = view.apply_async(rank_of)
    assert isinstance(ar, AsyncResult)
    assert ar.get_dict() == {0: 0, 1: 1, 2: 2}
    assert ar.ready() and ar.successful() and ar.elapsed > 0
    assert rc[2].apply_sync(rank_of) == 2  # one int: the value, not a list
    assert rc[0, 2].apply_sync(rank_of) == [0, 2]
    assert isinstance(view.apply(rank_of), AsyncResult)  # block=False by default
    view.block = True
    assert view.apply(lambda x, y=1: x + y, 1, y=5) == [6, 6, 6]


def test_lambdas_and_notebook_functions_read_the_ranks_globals(rc) -> None:
    view = rc[:]
    view.execute("here = rank * 10", block=True)
    assert view.apply_sync(lambda: here) == [0, 10, 20]  # noqa: F821 (a rank's name)
    offset = 3

    def with_closure(x):
        return x + offset

    assert view.apply_sync(with_closure, 1) == [4, 4, 4]

    def set_global():
        global made_here
        made_here = "yes"

    view.apply_sync(set_global)
    assert view["made_here"] == ["yes"] * N


def test_map_and_parallel(rc) -> None:
    view = rc[:]
    assert view.map_sync(lambda x: x * x, range(10)) == [x * x for x in range(10)]
    assert view.map_sync(lambda a, b: a + b, [1, 2], [10, 20]) == [11, 22]  # fewer items than ranks
    amr = view.map_async(str, range(5))
    assert list(amr) == ["0", "1", "2", "3", "4"]
    assert view.map(abs, [-1, -2, -3], block=True) == [1, 2, 3]

    @view.parallel(block=True)
    def lengths(part):
        return [len(part)] * len(part)

    assert lengths(list(range(7))) == [3, 3, 3, 2, 2, 2, 2]
    assert view.parallel(block=True)(len).map(["ab", "c"]) == [2, 1]
    with pytest.raises(ValueError, match="differ in length"):
        view.map_sync(pow, [1, 2], [1])


def test_push_pull_getitem_setitem(rc) -> None:
    view = rc[:]
    view["a"] = 5
    assert view["a"] == [5, 5, 5]
    view.push({"b": [1, 2], "c": "x"}, block=True)
    assert view.pull(["b", "c"], targets=0, block=True) == [[1, 2], "x"]
    assert view.pull("c", block=True) == ["x"] * N
    ar = view.pull("a")
    assert ar.get() == [5, 5, 5]
    view.push({"f": lambda: rank + 100}, block=True)  # noqa: F821 (a function, by value)
    assert view.apply_sync(lambda: f()) == [100, 101, 102]  # noqa: F821
    with pytest.raises(CompositeError) as info:
        view.pull("nothing_here", block=True)
    assert info.value.ename == "NameError"


def test_scatter_gather(rc) -> None:
    view = rc[:]
    view.scatter("part", list(range(10)), block=True)
    assert view["part"] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert view.gather("part", block=True) == list(range(10))
    view.scatter("arr", np.arange(6.0), block=True)
    assert np.array_equal(view.gather("arr", block=True), np.arange(6.0))
    view.scatter("one", [7, 8, 9], flatten=True, block=True)
    assert view["one"] == [7, 8, 9]


def test_execute_run_and_outputs(rc, tmp_path) -> None:
    view = rc[:]
    ar = view.execute("print('hi from', rank)")
    ar.wait()
    assert ar.stdout == [f"hi from {r}\n" for r in range(N)]
    script = tmp_path / "script.py"
    script.write_text("ran = rank + 1\n")
    view.run(str(script), block=True)
    assert view["ran"] == [1, 2, 3]
    single = rc[1].apply_async(print, "one")
    single.get()
    assert single.stdout == "one\n"


def test_remote_decorator(rc) -> None:
    view = rc[:]

    @view.remote(block=True)
    def mpi_rank():
        from mpi4py import MPI

        return MPI.COMM_WORLD.Get_rank()

    assert mpi_rank() == [0, 1, 2]
    mpi_rank.block = False
    assert mpi_rank().get_dict() == {0: 0, 1: 1, 2: 2}


def test_errors_are_composite_with_ipympis_report(rc) -> None:
    def fail():
        from mpi4py import MPI

        if MPI.COMM_WORLD.rank == 1:
            raise ValueError("rank one says no")
        MPI.COMM_WORLD.barrier()  # the others wait for rank 1: a failed peer, reported

    start = time.monotonic()
    with pytest.raises(CompositeError) as info:
        rc[:].apply_sync(fail)
    assert time.monotonic() - start < 30
    exc = info.value
    assert [e[0] for e in exc.elist if e[3]["engine_id"] == 1] == ["ValueError"]
    assert "rank 1 of 3 raised ValueError" in exc.render_traceback()[0]
    assert "waiting in barrier" in exc.render_traceback()[0]
    with pytest.raises(RemoteError) as one:
        exc.raise_exception(0)
    assert one.value.engine_info["engine_id"] in (0, 1, 2)
    assert rc[:].apply_sync(rank_of) == [0, 1, 2]  # the ranks go on


def test_get_timeout_and_wait(rc) -> None:
    view = rc[:]
    ar = view.apply_async(time.sleep, 1.0)
    with pytest.raises(TimeoutError):
        ar.get(timeout=0.05)
    assert not ar.ready()
    assert view.wait(timeout=10)
    assert ar.ready() and ar.get() == [None] * N
    assert not isinstance(ar.get, type(None))


def test_sync_imports(rc, capsys) -> None:
    view = rc[:]
    with view.sync_imports():
        import json  # noqa: F401
    assert "importing json on engine(s)" in capsys.readouterr().out
    view.execute("dumped = json.dumps(1)", block=True)
    assert view["dumped"] == ["1"] * N


def test_signal_interrupts_running_calls(cluster, rc) -> None:
    ar = rc[:].apply_async(time.sleep, 30)
    time.sleep(0.5)
    ar.wait(0.2)  # the ranks have started sleeping
    cluster.signal_engines_sync(signal.SIGINT)
    with pytest.raises(CompositeError) as info:
        ar.get(timeout=20)
    assert {e[0] for e in info.value.elist} == {"KeyboardInterrupt"}


def test_byvalue_pickles_closures_and_empty_cells() -> None:
    def outer():
        later = None

        def inner():
            return later

        return inner

    data = byvalue.dumps((outer(), lambda: 1))
    inner, one = byvalue.loads(data, {"__builtins__": __builtins__})
    assert inner() is None and one() == 1
    with pytest.raises((AttributeError, pickle.PicklingError)):
        pickle.dumps(lambda: 1)  # plain pickle cannot: the reason for byvalue


def test_cluster_context_manager_stops_its_ranks() -> None:
    current = session._current
    session.set_current(None)
    try:
        with ipympi.Cluster(n=2) as rc:
            pids = rc[:].apply_sync(os.getpid)
            assert len(pids) == 2
        assert wait_gone(pids) == []
    finally:
        session.set_current(current)


def test_display_outputs_and_wait_interactive(rc, capsys) -> None:
    view = rc[:]
    ar = view.execute("print('out', rank)")
    ar.wait_interactive(interval=0.05)
    assert ar.ready()
    capsys.readouterr()
    ar.display_outputs()
    shown = capsys.readouterr().out
    for r in range(N):
        assert f"[stdout:{r}]" in shown and f"out {r}" in shown
    with pytest.raises(ValueError, match="groupby"):
        ar.display_outputs("nonsense")


def test_activate_binds_the_px_magics_to_the_view(cluster) -> None:
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    rc = cluster.connect_client_sync()  # in IPython: binds %px to all ranks
    rc[0, 2].activate()
    shell.run_cell("%px value_here = rank + 7")
    assert rc[:].pull("value_here", targets=[0, 2], block=True) == [7, 9]
    with pytest.raises(CompositeError):
        rc[1]["value_here"]  # rank 1 is not in the view
    rc[:].activate()
    with pytest.raises(ValueError, match="suffix"):
        rc[:].activate("2")


def test_results_nobody_waits_for_are_let_go(cluster, rc) -> None:
    view = rc[:]
    first = view.apply_async(int)
    assert view.wait(timeout=10)
    unwaited = [view.push({"k": i}) for i in range(5)]
    view.apply_sync(int)  # every push has replied by now
    view.apply_async(int).get()  # a new call lets go of the old results that are in
    known = set(cluster._session.requests)
    assert not known & {req for ar in [first, *unwaited] for req in ar.msg_ids}
    assert all(ar._finished is not None for ar in unwaited)
