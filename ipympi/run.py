"""``python -m ipympi.run -n N PROGRAM [ARGS...]``: run an MPI program on N ranks.

The same command as ``ipympi run`` and ``python -m ipympi run``, and used like
``mpiexec -n N``. This module only reads the command line; :mod:`ipympi.launch.launcher`
runs the job. A job on this machine whose ranks are forked gets its rank template
started first (:func:`ipympi.launch.template.start`), before the launcher's machinery
is imported, so that the template's import of MPI overlaps the launcher's imports.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

from . import mpi4py as mpi4py_name
from .core.tracebacks import ENV_TRACEBACK
from .launch import template
from .launch.basics import (
    DEADLOCK_STATUS,
    LAUNCHERS,
    PROG,
    TIMEOUT_STATUS,
    _die_with_parent,
    job_environment,
)

if TYPE_CHECKING:
    from .launch.launcher import Job

__all__ = ["main", "program_argv"]

_DESCRIPTION = """\
Run PROGRAM on N ranks of ipympi's built-in MPI, like mpiexec -n N. PROGRAM is
a .py file (run with this Python), -m MODULE or -c CODE (likewise), or any
executable. Programs written for mpi4py run unchanged: on the ranks, 'import
mpi4py' gives ipympi. The output of every rank is forwarded line by line. When a rank
fails or calls Abort, the other ranks are ended and the exit status is that
rank's (128+n for death by signal n, the error code for Abort); Ctrl-C is
forwarded to every rank.
"""

_EPILOG = f"""\
deadlocks: when no rank can progress (every running rank has been blocked in
one MPI call for a while, with no message moving: the ranks wait on each other
or on ranks that have exited), the job is ended within about a second: the
launcher prints the wait-for graph, e.g. "deadlock: rank 0 waits in
recv(source=1, tag=7) on MPI_COMM_WORLD; rank 1 waits in recv(source=0, tag=7)
on MPI_COMM_WORLD", and what every rank is doing, interrupts the ranks and
exits with status {DEADLOCK_STATUS}. A rank that computes, a long transfer or
a loop of short waits is not a deadlock. --no-deadlock-check turns this off.

errors: a rank's uncaught exception is shown without ipympi's own frames, and
the same traceback of several ranks once, headed by them: "[ranks 0-3]
Traceback ...". --full-traceback (or {ENV_TRACEBACK}=full) shows every frame.

exit status: 0 when every rank exits 0; else the first failing rank's status,
the error code of Abort, {TIMEOUT_STATUS} after --timeout, {DEADLOCK_STATUS} for a deadlock,
126 (127) when PROGRAM cannot be run (found), 128+n after signal n.
"""

# Launcher options that take a value in the next argument.
_VALUED = frozenset(
    {"-n", "-np", "--np", "--timeout", "--hosts", "--hostfile", "--launcher", "--launcher-exec",
     "--iface"}
)  # fmt: skip


def program_argv(command: Sequence[str]) -> list[str]:
    """The argv that runs ``command`` (``PROGRAM [ARGS...]``) on each rank.

    ``x.py``, ``-m MODULE`` and ``-c CODE`` run with this Python (like
    ``mpi4py.run``); anything else is an executable run as given.
    """
    if not command:
        raise ValueError("missing PROGRAM (a .py file, -m MODULE, -c CODE or an executable)")
    first, rest = command[0], list(command[1:])
    if first in ("-m", "-c"):
        if not rest:
            raise ValueError(f"argument {first}: expected one argument")
        return [sys.executable, first, *rest]
    if first.endswith(".py"):
        return [sys.executable, first, *rest]
    return [first, *rest]


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``argv`` into the launcher's options and ``PROGRAM [ARGS...]``.

    Launcher options end at ``--``, at ``-m``/``-c``, or at the first argument
    that is not an option; everything after belongs to the program.
    """
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return list(argv[:i]), list(argv[i + 1 :])
        if arg in ("-m", "-c") or not arg.startswith("-") or arg == "-":
            return list(argv[:i]), list(argv[i:])
        i += 2 if arg in _VALUED else 1
    return list(argv), []


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type: ``kind`` of the text, which must be positive."""

    def convert(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, not {text}")
        return value

    convert.__name__ = getattr(kind, "__name__", "value")  # argparse names it in errors
    return convert


def make_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The parser of the launcher's own options."""
    parser = argparse.ArgumentParser(
        prog=prog,
        usage=f"{prog} [-h] [-n N] [--tag-output] [--timeout S] [--no-deadlock-check] "
        "[--full-traceback] "
        "[--hosts LIST | --hostfile FILE] [--launcher HOW] [--launcher-exec CMD] [--iface NAME] "
        "[--] (PROGRAM | -m MODULE | -c CODE) [ARGS...]",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-n", "-np", "--np", dest="np", metavar="N", type=_positive(int), default=None,
        help="number of ranks (default: 1; with hosts, every slot)",
    )  # fmt: skip
    parser.add_argument(
        "--tag-output", action="store_true",
        help="prefix every line of output (stdout and stderr) with [RANK]",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", metavar="S", type=_positive(float), default=None,
        help="after S seconds, report what every rank is doing, end the job "
        f"and exit with status {TIMEOUT_STATUS}",
    )  # fmt: skip
    parser.add_argument(
        "--no-deadlock-check", dest="deadlock_check", action="store_false",
        help="do not end the job when no rank can progress (a deadlock then "
        "lasts until --timeout, if any)",
    )  # fmt: skip
    parser.add_argument(
        "--full-traceback", action="store_true",
        help="show ipympi's own frames in a rank's traceback (by default they are "
        f"left out; {ENV_TRACEBACK}=full does the same)",
    )  # fmt: skip
    parser.add_argument(
        "--no-mpi4py-name", dest="mpi4py_name", action="store_false",
        default=mpi4py_name.enabled(),
        help="do not make 'import mpi4py' give ipympi on the ranks (by default "
        f"it does, also when mpi4py is installed; {mpi4py_name.ENV_SWITCH}=0 does the same)",
    )  # fmt: skip
    hosts = parser.add_argument_group(
        "several hosts",
        "Ranks fill each host's slots in order, then wrap around. Ranks on one host "
        "exchange Unix datagrams; ranks on different hosts signed tcp frames. Each host "
        "needs this Python with ipympi at the same path (a shared file system).",
    )
    hosts.add_argument(
        "--hosts", metavar="LIST",
        help="hosts to run on, e.g. a:4,b:4 (name[:slots], one slot by default)",
    )  # fmt: skip
    hosts.add_argument(
        "--hostfile", metavar="FILE",
        help="hosts to run on, one per line: name, name:slots or 'name slots=N'",
    )  # fmt: skip
    hosts.add_argument(
        "--launcher", choices=LAUNCHERS, default=None,
        help="how to start each host's agent: local (this machine), ssh, or srun (one "
        "step per node of a Slurm allocation, whose nodes are the default hosts); auto "
        "(the default) starts this machine's directly and others by srun inside an "
        "allocation, else by ssh",
    )  # fmt: skip
    hosts.add_argument(
        "--launcher-exec", metavar="CMD",
        help="the ssh or srun command to use, e.g. 'ssh -p 2222' or a path",
    )  # fmt: skip
    hosts.add_argument(
        "--iface", metavar="NAME",
        help="network interface (e.g. eth0, ib0) or address the ranks' and the launcher's "
        "tcp sockets bind on each host (default: the address the host list names, else "
        "the one that reaches the launcher)",
    )  # fmt: skip
    return parser


def _job_factory(args: argparse.Namespace) -> tuple[int, Callable[..., Job] | None]:
    """The number of ranks and how to build the job, from the host options.

    Raises :class:`~ipympi.launch.hosts.HostError` for hosts that cannot be used.
    """
    from .launch.hosts import HostError, parse_hosts, read_hostfile, slurm_hosts

    if args.hosts and args.hostfile:
        raise HostError("give --hosts or --hostfile, not both")
    if args.hosts:
        hosts = parse_hosts(args.hosts)
    elif args.hostfile:
        hosts = read_hostfile(args.hostfile)
    elif args.launcher == "srun":
        hosts = slurm_hosts(os.environ)
    else:
        if args.launcher not in (None, "auto", "local") or args.iface or args.launcher_exec:
            raise HostError("--launcher, --launcher-exec and --iface need --hosts or --hostfile")
        return args.np or 1, None
    n = args.np or sum(host.slots for host in hosts)
    options = {"launcher": args.launcher or "auto", "launcher_exec": args.launcher_exec}

    def make(argv: Sequence[str], n: int, **job_options: Any) -> Job:
        from .launch.agents import HostsJob

        return HostsJob(argv, n, hosts, iface=args.iface, **options, **job_options)

    return n, make


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = make_parser(prog)
    options, command = _split(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(options)
    try:
        program = program_argv(command)
        n, make_job = _job_factory(args)
    except ValueError as exc:  # HostError is one
        parser.error(str(exc))
    env = dict(os.environ)
    env[mpi4py_name.ENV_SWITCH] = "1" if args.mpi4py_name else "0"
    if args.full_traceback:
        env[ENV_TRACEBACK] = "full"
    early = None
    if make_job is None:
        env = job_environment(env)
        with contextlib.suppress(OSError):  # the job tries again, and says why it cannot
            early = template.start(program, n, env, _die_with_parent())
    try:
        from .launch.launcher import run_job  # meanwhile the template imports MPI
    except BaseException:
        if early is not None:
            early.process.close()
        raise
    return run_job(
        program,
        n,
        tag_output=args.tag_output,
        timeout=args.timeout,
        deadlock_check=args.deadlock_check,
        make_job=make_job,
        env=env,
        early=early,
    )


if __name__ == "__main__":
    _status = main()
    # The job is over and its files are gone: what is left of the interpreter's end, the
    # teardown of every module imported, only delays the shell's prompt.
    import atexit

    atexit._run_exitfuncs()
    for _stream in (sys.stdout, sys.stderr):
        try:
            _stream.flush()
        except Exception:
            _status = _status or 120  # as Python's own end does when stdout cannot be flushed
    os._exit(_status)
