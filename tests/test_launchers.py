"""Launchers without processes: choosing one, bad choices, the pure parts of the mpi4py backend.

The exit reports of a rank's keeper, the recognition of an MPI library's
``Abort`` message, the command lines of ``mpiexec`` and ``srun``, and the
errors a notebook user sees for a backend or launcher that cannot work here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from ipympi.launch.hosts import Host
from ipympi.notebook.controller import session
from ipympi.notebook.controller.cluster import Cluster, ClusterError
from ipympi.notebook.controller.launchers import (
    MPILauncher,
    SupervisorLauncher,
    routable_address,
)
from ipympi.notebook.controller.placement import make_launcher
from ipympi.notebook.engine.keeper import launcher_rank, parse_report, report_line
from ipympi.notebook.engine.mpi4py_engine import abort_in

pytestmark = pytest.mark.timeout(30)

KEY = b"k" * 16
HAS_MPI4PY = importlib.util.find_spec("mpi4py") is not None


# -- exit reports --------------------------------------------------------------------------
def test_an_exit_report_round_trips_and_a_forged_one_is_refused() -> None:
    report = {"rank": 2, "pid": 4242, "host": "node7", "returncode": -9}
    line = report_line(KEY, report)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert parse_report(line, KEY) == report
    assert parse_report(line, b"another key....!") is None
    assert parse_report(line.replace(b"-9", b"-7"), KEY) is None
    assert parse_report(b"hello from rank 2\n", KEY) is None
    assert parse_report(b"ipympi-exit nonsense", KEY) is None


def test_the_launcher_rank_comes_from_the_launchers_variables() -> None:
    assert launcher_rank({"PMI_RANK": "3"}) == 3
    assert launcher_rank({"SLURM_PROCID": "5"}) == 5
    assert launcher_rank({"OMPI_COMM_WORLD_RANK": "1", "PMI_RANK": "bad"}) == 1
    assert launcher_rank({}) is None


# -- what MPI libraries print on Abort -----------------------------------------------------
def test_abort_messages_of_mpich_and_open_mpi_are_recognised() -> None:
    mpich = (
        b"Abort(2) on node 1 (rank 1 in comm 0): "
        b"application called MPI_Abort(MPI_COMM_WORLD, 2) - process 1\n"
    )
    assert abort_in(mpich) == (2, "MPI_Abort(MPI_COMM_WORLD, 2)")
    open_mpi = (
        b"MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\nwith errorcode 7.\n"
    )
    assert abort_in(open_mpi) == (7, "MPI_Abort(MPI_COMM_WORLD, 7)")
    assert abort_in(b"grep: MPI_Abort: no such file\n") is None
    assert abort_in(b"Traceback (most recent call last):\n") is None


# -- choosing a backend and a launcher ------------------------------------------------------
def test_the_builtin_backend_is_forked_by_the_supervisor() -> None:
    launcher = make_launcher("builtin", None, {})
    assert isinstance(launcher, SupervisorLauncher)
    assert launcher.interrupts_mpi_calls and not launcher.remote


def test_bad_backends_and_launchers_are_refused_with_a_readable_error() -> None:
    with pytest.raises(ClusterError, match=r"unknown backend 'foo': choose from builtin, mpi4py"):
        Cluster(2, backend="foo")
    with pytest.raises(ClusterError, match="--launcher mpiexec starts ranks on mpi4py"):
        Cluster(2, backend="builtin", launcher="mpiexec")
    with pytest.raises(ClusterError, match="--launcher srun needs a Slurm allocation"):
        Cluster(2, backend="builtin", launcher="srun", env={})
    with pytest.raises(ClusterError, match="give --hosts"):
        Cluster(2, backend="builtin", launcher="ssh")
    with pytest.raises(ClusterError, match="unknown launcher 'pbs'"):
        Cluster(2, backend="builtin", launcher="pbs")


def test_a_missing_mpi4py_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # as if it were not installed
    with pytest.raises(ClusterError, match=r"needs mpi4py .*pip install mpi4py"):
        Cluster(2, backend="mpi4py")


@pytest.mark.skipif(not HAS_MPI4PY, reason="mpi4py is not installed")
def test_srun_outside_slurm_is_named(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="there is no srun on PATH"):
        Cluster(2, backend="mpi4py", launcher="srun", env={"PATH": str(tmp_path)})
    with pytest.raises(ClusterError, match="--launcher ssh starts the built-in MPI's engines"):
        make_launcher("mpi4py", "ssh", {})


@pytest.mark.skipif(not HAS_MPI4PY, reason="mpi4py is not installed")
def test_command_lines_carry_no_secret(tmp_path: Path) -> None:
    for name in ("mpiexec", "srun"):
        program = tmp_path / name
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    env = {"PATH": str(tmp_path)}
    mpiexec = MPILauncher("mpiexec", env)
    engine = [sys.executable, "-m", "ipympi.notebook.engine.mpi4py_engine"]
    assert mpiexec.command(3) == [str(tmp_path / "mpiexec"), "-n", "3", *engine]
    assert not mpiexec.remote
    srun = MPILauncher("srun", env)
    assert srun.command(3) == [
        str(tmp_path / "srun"),
        "--ntasks=3",
        "--kill-on-bad-exit=1",
        *engine,
    ]
    assert srun.remote and not srun.interrupts_mpi_calls
    # inside a batch allocation mpiexec may start ranks on other hosts
    assert MPILauncher("mpiexec", {**env, "SLURM_JOB_ID": "12"}).remote


@pytest.mark.skipif(not HAS_MPI4PY, reason="mpi4py is not installed")
def test_hosts_go_to_the_mpi_launcher(tmp_path: Path) -> None:
    mpiexec = tmp_path / "mpiexec"
    mpiexec.write_text("#!/bin/sh\necho 'HYDRA build details:'\n")
    mpiexec.chmod(0o755)
    hosts = [Host("a", 4), Host("b", 2)]
    launcher = make_launcher("mpi4py", None, {"PATH": str(tmp_path)}, hosts=hosts, iface="lo")
    assert isinstance(launcher, MPILauncher) and launcher.remote
    assert launcher.command(6)[1:5] == ["-n", "6", "-hosts", "a:4,b:2"]
    assert launcher.address() == "127.0.0.1"  # the interface asked for
    mpiexec.write_text("#!/bin/sh\necho 'mpiexec (Open MPI) 5.0.3'\n")
    other = MPILauncher("mpiexec", {"PATH": str(tmp_path)}, hosts)
    assert other.command(6)[3:5] == ["--host", "a:4,b:2"]
    srun = MPILauncher("srun", {"PATH": str(tmp_path)}, hosts, program="/opt/slurm/srun")
    assert srun.command(6)[:4] == ["/opt/slurm/srun", "--ntasks=6", "--kill-on-bad-exit=1",
                                   "--nodelist=a,b"]  # fmt: skip


def test_the_built_in_mpi_on_hosts_has_a_supervisor_per_host() -> None:
    from ipympi.notebook.controller.hosts import HostsLauncher

    launcher = make_launcher("builtin", None, {}, hosts=[Host("127.0.0.2", 2), Host("x", 1)])
    assert isinstance(launcher, HostsLauncher) and launcher.remote
    assert launcher.started_by == "forked by supervisors on 2 hosts"
    allocation = {"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "4(x3)"}
    slurm = make_launcher("builtin", "srun", allocation)
    assert isinstance(slurm, HostsLauncher)
    assert slurm.describe_hosts() == "n1:4,n2:4,n3:4"
    local = make_launcher("builtin", None, {}, hosts=[Host("127.0.0.2", 2)], iface="lo")
    assert local.address() == "127.0.0.1"


def test_engines_on_other_hosts_connect_to_one_interface() -> None:
    address = routable_address()
    assert address != "0.0.0.0" and address.count(".") == 3


def test_the_environment_chooses_the_kernels_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IPYMPI_BACKEND", raising=False)
    monkeypatch.delenv("IPYMPI_LAUNCHER", raising=False)
    assert (session.default_backend(), session.default_launcher()) == ("builtin", None)
    monkeypatch.setenv("IPYMPI_BACKEND", "mpi4py")
    monkeypatch.setenv("IPYMPI_LAUNCHER", "srun")
    assert (session.default_backend(), session.default_launcher()) == ("mpi4py", "srun")
    monkeypatch.setenv("IPYMPI_BACKEND", "openmpi")
    with pytest.raises(ClusterError, match="IPYMPI_BACKEND='openmpi': choose from"):
        session.default_backend()
    monkeypatch.setenv("IPYMPI_LAUNCHER", "pbs")
    with pytest.raises(ClusterError, match="IPYMPI_LAUNCHER='pbs': choose from"):
        session.default_launcher()
    monkeypatch.setenv("IPYMPI_HOSTS", "a:4,b:0")
    with pytest.raises(ClusterError, match=r"IPYMPI_HOSTS='a:4,b:0': .*positive"):
        session.default_placement()
    monkeypatch.setenv("IPYMPI_HOSTS", "a:4,b:4")
    monkeypatch.setenv("IPYMPI_IFACE", "ib0")
    assert session.default_placement() == {
        "hosts": [Host("a", 4), Host("b", 4)],
        "iface": "ib0",
        "launcher_exec": None,
    }
