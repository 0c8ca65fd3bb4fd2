"""Host lists, host files, Slurm allocations, placement and addresses (no processes)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ipympi.launch.agents import agent_argv, forwarded_environment
from ipympi.launch.hosts import (
    Host,
    HostError,
    bind_address_for,
    expand_counts,
    expand_nodelist,
    interface_address,
    is_this_machine,
    parse_hosts,
    place,
    read_hostfile,
    resolve,
    route_source,
    slurm_hosts,
)


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("a:4,b:4", [Host("a", 4), Host("b", 4)]),
        ("a,b", [Host("a"), Host("b")]),
        (" node1:2 , node2 ", [Host("node1", 2), Host("node2")]),
        ("127.0.0.2:2,127.0.0.3:1", [Host("127.0.0.2", 2), Host("127.0.0.3", 1)]),
        ("[::1]:2,[fe80::1]", [Host("::1", 2), Host("fe80::1")]),
    ],
)
def test_host_lists(text: str, hosts: list[Host]) -> None:
    assert parse_hosts(text) == hosts


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "no host"),
        (",", "no host"),
        ("a:0", "positive"),
        ("a:x", "positive"),
        (":3", "not a host"),
    ],
)
def test_bad_host_lists_say_why(text: str, why: str) -> None:
    with pytest.raises(HostError, match=why):
        parse_hosts(text)


def test_host_files(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("# the cluster\nn1:4\nn2 slots=2   # fat node\n\nn3\n")
    assert read_hostfile(str(path)) == [Host("n1", 4), Host("n2", 2), Host("n3")]
    path.write_text("n1 cpus=4\n")
    with pytest.raises(HostError, match=r"hosts:1: 'n1 cpus=4'"):
        read_hostfile(str(path))
    path.write_text("# nothing\n")
    with pytest.raises(HostError, match="no host"):
        read_hostfile(str(path))
    with pytest.raises(HostError, match="No such file"):
        read_hostfile(str(tmp_path / "missing"))


def test_ranks_fill_slots_in_order_then_wrap_around() -> None:
    assert place([Host("a", 2), Host("b", 2)], 4) == [0, 0, 1, 1]
    assert place([Host("a", 2), Host("b", 2)], 3) == [0, 0, 1]
    assert place([Host("a", 2), Host("b", 1)], 7) == [0, 0, 1, 0, 0, 1, 0]
    assert place([Host("a"), Host("b")], 5) == [0, 1, 0, 1, 0]


def test_slurm_node_lists_and_counts() -> None:
    assert expand_nodelist("n[01-03,07],gpu1") == ["n01", "n02", "n03", "n07", "gpu1"]
    assert expand_nodelist("a[8-10]-ib") == ["a8-ib", "a9-ib", "a10-ib"]
    assert expand_nodelist("single") == ["single"]
    assert expand_counts("4(x2),3") == [4, 4, 3]
    assert expand_counts("1") == [1]
    with pytest.raises(HostError):
        expand_nodelist("n[1-x]")
    with pytest.raises(HostError):
        expand_counts("4(y2)")


def test_slurm_allocation() -> None:
    env = {"SLURM_JOB_NODELIST": "n[1-2],m", "SLURM_TASKS_PER_NODE": "2(x2),1"}
    assert slurm_hosts(env) == [Host("n1", 2), Host("n2", 2), Host("m", 1)]
    cpus = {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_CPUS_PER_NODE": "8(x2)"}
    assert slurm_hosts(cpus) == [Host("n1", 8), Host("n2", 8)]
    with pytest.raises(HostError, match="salloc or sbatch"):
        slurm_hosts({})
    with pytest.raises(HostError, match="2 nodes but 1 task counts"):
        slurm_hosts({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "3"})


def test_this_machine_and_its_addresses() -> None:
    assert is_this_machine("localhost")
    assert is_this_machine(socket.gethostname())
    assert is_this_machine("127.0.0.3")  # every loopback address
    assert not is_this_machine("192.0.2.1")  # TEST-NET-1: never this machine
    assert not is_this_machine("no-such-host.invalid")
    assert resolve("127.0.0.2") == "127.0.0.2"
    with pytest.raises(HostError, match="cannot resolve"):
        resolve("no-such-host.invalid")
    assert route_source("127.0.0.2") == "127.0.0.1"
    assert interface_address("lo") == "127.0.0.1"
    assert interface_address("10.1.2.3") == "10.1.2.3"
    with pytest.raises(HostError, match="no such interface"):
        interface_address("nosuchif0")


def test_ranks_bind_the_interface_asked_for_else_the_listed_address() -> None:
    assert bind_address_for("127.0.0.3", "lo", "127.0.0.1") == "127.0.0.1"
    assert bind_address_for("127.0.0.3", None, "127.0.0.1") == "127.0.0.3"
    # A listed name that is not this machine's: the address that reaches the launcher.
    assert bind_address_for("192.0.2.1", None, "127.0.0.1") == "127.0.0.1"


def test_how_agents_start() -> None:
    host = Host("node7", 4)
    local = agent_argv(host, "local", None, "/py/bin/python", "/work")
    assert local == ["/py/bin/python", "-m", "ipympi.launch.node"]
    ssh = agent_argv(host, "ssh", "ssh -p 2222", "/py/bin/python", "/my work")
    assert ssh[:6] == ["ssh", "-p", "2222", "-o", "BatchMode=yes", "-x"]
    assert ssh[6] == "node7"
    assert ssh[7] == "cd '/my work' 2>/dev/null; exec /py/bin/python -m ipympi.launch.node"
    srun = agent_argv(host, "srun", None, "/py/bin/python", "/work")
    assert srun[0] == "srun"
    assert {"--nodes=1", "--ntasks=1", "--nodelist=node7", "--cpus-per-task=4"} <= set(srun)
    assert srun[-3:] == local
    with pytest.raises(ValueError, match="unknown launcher"):
        agent_argv(host, "pbs", None, "/py/bin/python", "/work")


def test_only_portable_variables_travel_to_other_hosts() -> None:
    env = {
        "PATH": "/bin",
        "OMP_NUM_THREADS": "2",
        "HOSTNAME": "here",
        "SSH_AUTH_SOCK": "/tmp/x",
        "SLURM_PROCID": "0",
        "IPYMPI_KEY": "secret",
        "PWD": "/here",
    }
    assert forwarded_environment(env) == {"PATH": "/bin", "OMP_NUM_THREADS": "2"}
