"""IPython Parallel's engines as ipympi ranks: ``ipp.Cluster(engines="ipympi")``.

A real IPython Parallel cluster (controller and 2 engines under ``python -m ipympi.run``),
driven by IPython Parallel's own client; skipped where ipyparallel is not installed.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import wait_gone

ipp = pytest.importorskip("ipyparallel")

from ipyparallel.cluster.launcher import find_launcher_class  # noqa: E402

from ipympi.notebook.ipp_engines import IpympiEngineSetLauncher  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def test_the_launcher_is_registered_under_ipympi() -> None:
    assert find_launcher_class("ipympi", "engine") is IpympiEngineSetLauncher
    assert find_launcher_class("IPyMPI", "engine") is IpympiEngineSetLauncher


def mpi_facts():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    return comm.Get_rank(), comm.Get_size(), MPI.__name__, comm.allreduce(comm.Get_rank() + 1)


mpi_facts.__module__ = "__main__"  # as if defined in a notebook: IPython Parallel sends it


def test_engines_are_ranks_and_stop_signal_restart_work(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    cluster = ipp.Cluster(engines="ipympi", n=2, log_level=40)
    rc = cluster.start_and_connect_sync()
    try:
        rc.wait_for_engines(2, timeout=60)
        facts = rc[:].apply_sync(mpi_facts)
        assert sorted(facts) == [(0, 2, "ipympi.MPI", 3), (1, 2, "ipympi.MPI", 3)]
        pids = rc[:].apply_sync(os.getpid)

        ar = rc[:].apply_async(time.sleep, 30)
        time.sleep(1.0)
        cluster.signal_engines_sync(signal.SIGINT)
        with pytest.raises(ipp.error.CompositeError) as info:
            ar.get(timeout=20)
        assert {e[0] for e in info.value.elist} == {"KeyboardInterrupt"}
        assert rc[:].apply_sync(os.getpid) == pids  # interrupted, not ended

        cluster.restart_engines_sync()
        assert wait_gone(pids) == []
        rc.wait_for_engines(2, timeout=60)
        assert sorted(rc.ids) == [0, 1]  # the old engines unregistered: ids are reused
        assert sorted(rc[:].apply_sync(mpi_facts)) == sorted(facts)
        pids = rc[:].apply_sync(os.getpid)
    finally:
        rc.close()
        cluster.stop_cluster_sync()
    assert wait_gone(pids) == []


def test_ipcluster_start_with_ipympi_engines(tmp_path) -> None:
    env = dict(os.environ, IPYTHONDIR=str(tmp_path))
    ipcluster = [sys.executable, "-m", "ipyparallel.cluster"]
    start = [*ipcluster, "start", "-n", "2", "--engines=ipympi", "--daemonize"]
    subprocess.run(start, env=env, timeout=60, check=True, capture_output=True)
    try:
        code = (
            "import ipyparallel as ipp\n"
            "rc = ipp.Client()\n"
            "rc.wait_for_engines(2, timeout=60)\n"
            "print(sorted(rc[:].apply_sync(lambda: __import__('mpi4py.MPI').MPI.__name__)))\n"
            "print(rc[:].apply_sync(__import__('os').getpid))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, timeout=90, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        names, pids = proc.stdout.splitlines()
        assert names == "['ipympi.MPI', 'ipympi.MPI']"
    finally:
        subprocess.run([*ipcluster, "stop"], env=env, timeout=60, capture_output=True)
    assert wait_gone(ast.literal_eval(pids)) == []
