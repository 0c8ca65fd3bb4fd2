"""The hosts of a job that spans machines: where ranks run and how hosts are reached.

Pure logic and lookups, no processes:

* host lists as users write them: ``--hosts a:4,b:4`` (``name[:slots]``,
  one slot when no count is given) and host files (one host per line, as
  ``name``, ``name:slots`` or Open MPI's ``name slots=N``; ``#`` comments);
* Slurm allocations: ``SLURM_JOB_NODELIST`` (``node[01-03,07],gpu1``) with
  ``SLURM_TASKS_PER_NODE`` (``4(x2),3``) or ``SLURM_JOB_CPUS_PER_NODE``;
* placement: ranks fill each host's slots in list order, and wrap around to
  the first host when there are more ranks than slots (as MPICH's mpiexec);
* addresses: which names are this machine, the address to bind on an
  interface (``eth0``, or an address given as is), and the address this
  machine uses to reach another (for the launcher's own socket).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import re
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "Host",
    "HostError",
    "bind_address_for",
    "controller_address",
    "environment_is_local",
    "expand_counts",
    "expand_nodelist",
    "interface_address",
    "is_this_machine",
    "nodes_of",
    "parse_hosts",
    "place",
    "read_hostfile",
    "resolve",
    "route_source",
    "slurm_hosts",
    "start_method",
]


class HostError(ValueError):
    """A host list, host file or allocation that cannot be used, said plainly."""


@dataclass(frozen=True)
class Host:
    """One host of a job and how many ranks it takes per round of placement."""

    name: str
    slots: int = 1


# -- host lists ---------------------------------------------------------------------
def _host(text: str, where: str) -> Host:
    text = text.strip()
    name, sep, count = text.rpartition(":") if text.count(":") == 1 else ("", "", "")
    if not sep:
        name = text
    if not name or any(c.isspace() for c in name):
        raise HostError(f"{where}: {text!r} is not a host (write name or name:slots)")
    if sep:
        if not count.isdigit() or int(count) < 1:
            raise HostError(f"{where}: {text!r}: the slot count must be a positive number")
        return Host(name, int(count))
    return Host(name)


def parse_hosts(text: str) -> list[Host]:
    """``"a:4,b:4"`` → two hosts of 4 slots; ``"a,b"`` → one slot each.

    An IPv6 address needs brackets when it has a slot count: ``[::1]:2``.
    """
    hosts = []
    for part in text.split(","):
        if not part.strip():
            continue
        bracketed = re.fullmatch(r"\s*\[([^\]]+)\](?::(\d+))?\s*", part)
        if bracketed:
            slots = int(bracketed.group(2) or 1)
            if slots < 1:
                raise HostError(f"--hosts: {part!r}: the slot count must be a positive number")
            hosts.append(Host(bracketed.group(1), slots))
        else:
            hosts.append(_host(part, "--hosts"))
    if not hosts:
        raise HostError("--hosts: no host given")
    return hosts


def read_hostfile(path: str) -> list[Host]:
    """The hosts of a host file: ``name``, ``name:slots`` or ``name slots=N`` per line."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise HostError(f"--hostfile {path}: {exc.strerror or exc}") from None
    hosts = []
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{number}"
        words = line.split()
        if len(words) == 1:
            hosts.append(_host(words[0], where))
            continue
        match = re.fullmatch(r"(?:slots|max_slots)=(\d+)", words[1])
        if len(words) != 2 or not match or int(match.group(1)) < 1:
            raise HostError(f"{where}: {line!r} is not 'name', 'name:slots' or 'name slots=N'")
        hosts.append(Host(words[0], int(match.group(1))))
    if not hosts:
        raise HostError(f"--hostfile {path}: no host in the file")
    return hosts


def place(hosts: Sequence[Host], n: int) -> list[int]:
    """The host index of each of ``n`` ranks: fill slots in order, then wrap around."""
    order = [index for index, host in enumerate(hosts) for _ in range(host.slots)]
    return [order[rank % len(order)] for rank in range(n)]


def nodes_of(hosts: Sequence[Host], n: int) -> tuple[list[Host], list[int]]:
    """The distinct hosts (a name listed twice is one host, with the slots added up),
    and the index among them of each of ``n`` ranks' host (see :func:`place`)."""
    names = list(dict.fromkeys(host.name for host in hosts))
    distinct = [Host(name, sum(h.slots for h in hosts if h.name == name)) for name in names]
    return distinct, [names.index(hosts[index].name) for index in place(hosts, n)]


def start_method(name: str, launcher: str, env: Mapping[str, str]) -> str:
    """How to start a helper process on host ``name``: ``local``, ``ssh`` or ``srun``.

    ``launcher`` as asked, except ``auto``: this machine directly, another host
    as a step of the Slurm job this runs in (``SLURM_JOB_ID``), else by ssh.
    """
    if launcher != "auto":
        return launcher
    if is_this_machine(name):
        return "local"
    return "srun" if "SLURM_JOB_ID" in env else "ssh"


def controller_address(names: Sequence[str], iface: str | None) -> str:
    """The address a launcher or controller binds for ranks on the hosts ``names``.

    The interface asked for; loopback when every host is this machine; else
    the address this machine uses to reach the first other host.
    """
    if iface:
        return interface_address(iface)
    remote = [name for name in names if not is_this_machine(name)]
    return route_source(resolve(remote[0])) if remote else "127.0.0.1"


# -- Slurm -----------------------------------------------------------------------------
def expand_nodelist(text: str) -> list[str]:
    """Slurm's compact node list: ``"n[01-03,7],gpu1"`` → n01 n02 n03 n7 gpu1."""
    names: list[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?([^,]*)", text):
        prefix, ranges, suffix = match.group(1), match.group(2), match.group(3)
        if ranges is None:
            names.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise HostError(f"cannot read the Slurm node list {text!r}")
            for number in range(int(low), int(high or low) + 1):
                names.append(f"{prefix}{number:0{len(low)}d}{suffix}")
    return names


def expand_counts(text: str) -> list[int]:
    """Slurm's per-node counts: ``"4(x2),3"`` → [4, 4, 3]."""
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise HostError(f"cannot read the Slurm task counts {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def slurm_hosts(env: Mapping[str, str]) -> list[Host]:
    """The nodes of the Slurm allocation this process runs in, with their task slots."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise HostError(
            "--launcher srun needs a Slurm allocation: run inside salloc or sbatch "
            "(SLURM_JOB_NODELIST is not set)"
        )
    names = expand_nodelist(nodelist)
    counts_text = env.get("SLURM_TASKS_PER_NODE") or env.get("SLURM_JOB_CPUS_PER_NODE") or ""
    counts = expand_counts(counts_text) if counts_text else [1] * len(names)
    if len(counts) != len(names):
        raise HostError(
            f"the Slurm allocation lists {len(names)} nodes but {len(counts)} task counts"
        )
    return [Host(name, count) for name, count in zip(names, counts)]


# -- addresses --------------------------------------------------------------------------
def resolve(name: str) -> str:
    """The IP address of a host name (an address is returned as is)."""
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(name))
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise HostError(f"cannot resolve host {name!r}: {exc.strerror}") from None
    # Prefer IPv4, as most clusters' host names resolve to both.
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return str(infos[0][4][0])


def _can_bind(address: str) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
    except OSError:
        return False
    return True


def is_this_machine(name: str) -> bool:
    """Whether ``name`` is this machine: its host name, localhost, or an address of its own.

    Every loopback address (127.0.0.2, ...) is this machine.
    """
    if name in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        address = resolve(name)
    except HostError:
        return False
    if ipaddress.ip_address(address).is_loopback:
        return True
    return _can_bind(address)


def route_source(address: str) -> str:
    """The address of this machine that packets to ``address`` leave from (none is sent)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            return str(sock.getsockname()[0])
    except OSError as exc:
        raise HostError(f"no route from this host to {address}: {exc.strerror}") from None


_SIOCGIFADDR = 0x8915


def interface_address(iface: str) -> str:
    """The IPv4 address of network interface ``iface`` (``eth0``); an address is returned as is."""
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(iface))
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = struct.pack("256s", iface.encode()[:15])
            answer = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)
    except OSError as exc:
        raise HostError(
            f"--iface {iface}: no such interface with an IPv4 address on {socket.gethostname()} "
            f"({exc.strerror or exc})"
        ) from None
    return socket.inet_ntoa(answer[20:24])


def bind_address_for(host: str, iface: str | None, launcher_address: str) -> str:
    """The address the ranks on this machine bind their tcp sockets to.

    The interface asked for (``--iface``), else the address the host list
    names when it is one of this machine's, else the address this machine
    uses to reach the launcher. Never every interface.
    """
    if iface:
        return interface_address(iface)
    with contextlib.suppress(HostError):
        address = resolve(host)
        if _can_bind(address):
            return address
    return route_source(launcher_address)


def environment_is_local(name: str) -> bool:
    """Whether an environment variable describes this process or host only.

    Such variables are not copied to ranks on other hosts (``HOSTNAME``,
    ``SSH_*``, ``SLURM_*`` of the launcher's own step, ``PWD``, ...).
    """
    return name in _HOST_VARS or name.startswith(_HOST_PREFIXES)


_HOST_VARS = frozenset(
    {"HOSTNAME", "HOST", "DISPLAY", "PWD", "OLDPWD", "SHLVL", "_", "TMPDIR", "TERM", "TERMCAP"}
)
_HOST_PREFIXES = ("SSH_", "SLURM_", "XDG_", "IPYMPI_", "KRB5", "WINDOWID")
