"""The rank template of ``ipympi.run``: one warmed-up process per host that forks the ranks.

A job whose program is a Python program this interpreter can run as it is
(:func:`ipympi.launch.pymain.plan`: ``prog.py``, ``-m MODULE``, ``-c CODE``, no interpreter
options) does not start N interpreters that each import MPI: it starts one
``python -m ipympi.launch.template FD all|core``, which imports what a rank needs (ipympi's
MPI, its ``mpi4py`` name, the transport; with ``all`` every chapter of MPI and numpy, for a
program whose text names buffer calls or numpy: :func:`needs_everything`) without starting
MPI or creating a zmq context, and forks every rank from it
(:class:`~ipympi.launch.forker.Forker`). Each rank then imports ``MPI`` afresh, which
starts MPI with the rank's environment and its own ``rc`` settings, and runs the program
as ``python`` would (:func:`ipympi.launch.pymain.run`). Anything else (``hostname``,
``python -O prog.py``, another Python) is exec'd as before.

The launcher and the template speak the JSON lines of :mod:`ipympi.launch.jsonlines`
(commands on the template's stdin, events on its stdout), plus a Unix socket, the
template's descriptor ``FD``, that carries each rank's stdin, stdout and stderr
(``SCM_RIGHTS``) just before its ``spawn`` command:

=========  ==========  ==============================================================
type       direction   keys
=========  ==========  ==============================================================
spawn      L → T       ``rank``, ``set`` and ``unset``: how the rank's environment
                       differs from the template's; ``plan``
signal     L → T       ``signal`` (int), ``ranks`` (optional list)
exit       L → T       end every rank (SIGKILL) and exit (end of file does too)
ready      T → L       ``pid``
spawned    T → L       ``rank``, ``pid``
exited     T → L       ``rank``, ``pid``, ``returncode`` (-n after signal n)
=========  ==========  ==============================================================

:class:`TemplateProcess` is the launcher's side, :class:`ForkedRank` a Popen-shaped
handle on a rank it forked. ``IPYMPI_FORK_RANKS=0`` turns forking off.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

from .. import mpi4py as mpi4py_name
from ..core import control as ctl
from . import pymain
from .basics import rank_environment
from .forker import Forker
from .jsonlines import JsonLinesProcess

__all__ = [
    "ENV_SWITCH",
    "ForkedRank",
    "Started",
    "TemplateProcess",
    "enabled",
    "launch",
    "main",
    "preload",
    "start",
]

ENV_SWITCH = "IPYMPI_FORK_RANKS"
_OFF = ("0", "no", "off", "false", "n")
_MAIN = "ipympi.launch.template"


def enabled(environ: Mapping[str, str]) -> bool:
    """Whether ranks may be forked from a template (``IPYMPI_FORK_RANKS`` is not off)."""
    return environ.get(ENV_SWITCH, "1").strip().lower() not in _OFF


# -- the template's side ---------------------------------------------------------------
def preload(everything: bool = True) -> None:
    """Import what a rank needs before it runs its program, without starting MPI
    (``ipympi.rc.initialize`` is left off; also for the notebook's engines).

    With ``everything``, every chapter of MPI and numpy, which buffers need; without, only
    what starting MPI and using its communicators need: a rank that moves no buffer then
    never imports numpy, and one that does imports what it uses itself.
    """
    from ..mpi import rc as rc_module

    rc_module.rc.initialize = False
    if _mpi4py_is_ipympi():
        import mpi4py.MPI  # noqa: F401
    from .. import MPI
    from ..mpi import runtime  # noqa: F401  (what Init needs, which MPI imports only to start)

    if everything:
        MPI.__all__  # noqa: B018  (every chapter)
        with contextlib.suppress(ImportError):
            import numpy  # noqa: F401

            from ..mpi.datatype_derived import make_leaves

            make_leaves()  # every predefined datatype's typemap leaf, once for all


# The capitalized (buffer-style) calls that move no buffer: a program that makes no other
# capitalized call and does not name numpy gets a template that imports only what
# starting MPI needs; any other (``Send``, ``Allreduce``, ``Create_vector``, ``Win``...),
# or a module run with ``-m`` (not read), gets every chapter of MPI and numpy.
_CALL = re.compile(r"\.\s*([A-Z][A-Za-z0-9_]*)\s*\(")
_LIGHT_CALLS = frozenset(
    {
        "Abort", "Barrier", "Cancel", "Compare", "Difference", "Disconnect", "Dup", "Excl",
        "Finalize", "Free", "Get_attr", "Get_count", "Get_error", "Get_errhandler",
        "Get_group", "Get_library_version", "Get_name", "Get_parent", "Get_processor_name",
        "Get_rank", "Get_remote_group", "Get_remote_size", "Get_size", "Get_source", "Get_tag",
        "Get_topology", "Get_version", "Ibarrier", "Incl", "Init", "Init_thread",
        "Intersection", "Iprobe", "Is_finalized", "Is_initialized", "Is_inter", "Is_intra",
        "Is_thread_main", "Probe", "Query_thread", "Range_excl", "Range_incl", "Set_attr",
        "Set_errhandler", "Set_name", "Split", "Split_type", "Status", "Test", "Testall",
        "Testany", "Testsome", "Translate_ranks", "Union", "Wait", "Waitall", "Waitany",
        "Waitsome", "Wtick", "Wtime",
    }
)  # fmt: skip


def needs_everything(spec: pymain.Plan) -> bool:
    """Whether the ranks of the program of ``spec`` may move buffers (and so want every
    chapter of MPI and numpy imported before they are forked), from the program's text
    (its code or its script; a module is not read: always). A program that imports a
    module of its own that moves buffers is not seen: its ranks import what it needs."""
    kind, target = spec["kind"], str(spec["target"])
    if kind == "code":
        text = target
    elif kind == "script":
        try:
            with open(target, "rb") as file:
                text = file.read(1 << 20).decode(errors="replace")
        except OSError:
            return False  # it will not run anyway
    else:
        return True
    if "numpy" in text:
        return True
    return any(name not in _LIGHT_CALLS for name in _CALL.findall(text))


def _mpi4py_is_ipympi() -> bool:
    """Whether ``import mpi4py`` gives ipympi here (the ranks have its ``mpi4py`` name).

    A real mpi4py's ``MPI`` must not be imported in the template: it would start a real
    MPI there (an MPICH singleton maps a shared-memory file that only its
    ``MPI_Finalize`` removes, and the template ends without one), and every rank forked
    from it would inherit that one started MPI instead of starting its own.
    """
    try:
        spec = importlib.util.find_spec("mpi4py")
    except (ImportError, ValueError):
        return False
    origin = spec.origin if spec is not None else None
    return origin is not None and origin.startswith(mpi4py_name.SITE + os.sep)


def _fresh_mpi() -> None:
    """In a forked rank: forget the template's import of ``MPI`` and its ``rc``, so that
    the program's ``import`` starts MPI as in a new process."""
    from ..mpi import rc as rc_module

    rc_module.reset()
    for name in ("ipympi.MPI", "mpi4py.MPI"):
        sys.modules.pop(name, None)
        package = sys.modules.get(name.split(".")[0])
        if package is not None and "MPI" in vars(package):
            delattr(package, "MPI")


class RankTemplate(Forker):
    """The template process's loop (see the module docstring)."""

    def __init__(self, fds: socket.socket, environ: Mapping[str, str]) -> None:
        super().__init__()
        self.environ = dict(environ)  # as the launcher started the template
        self.fds = fds
        self.private_fds = [fds.fileno()]
        self.gate: tuple[int, int] | None = None  # what the ranks just forked wait on

    def handle(self, command: dict[str, Any]) -> bool:
        kind = command.get("type")
        if kind == "spawn":
            self.spawn(command)
        elif kind == "signal":
            self.handle_signal(command)
        elif kind == "exit":
            return False
        else:
            print(f"ipympi template: unknown command {kind!r}", file=sys.stderr, flush=True)
        return True

    def spawn(self, command: dict[str, Any]) -> None:
        _, fds, _, _ = socket.recv_fds(self.fds, 1, 3)
        rank, spec = int(command["rank"]), command["plan"]
        stdin, stdout, stderr = fds
        if self.gate is None:
            self.gate = os.pipe()
        gate = self.gate

        def body() -> int:
            from .pymain import run

            os.close(gate[1])
            os.read(gate[0], 1)  # until the template has forked this batch
            os.close(gate[0])
            _fresh_mpi()
            return run(spec)

        try:
            env = {k: v for k, v in self.environ.items() if k not in command["unset"]}
            env.update(command["set"])
            pid = self.fork_child(rank, env, body, (stdin, stdout, stderr))
        finally:
            for fd in fds:
                os.close(fd)
        self.emit({"type": "spawned", "rank": rank, "pid": pid})

    def after_commands(self) -> None:
        """Let the ranks just forked run: forking them all first, before they compete
        with the template for the processors, starts a large job sooner."""
        if self.gate is not None:
            for fd in self.gate:
                os.close(fd)
            self.gate = None

    def end(self) -> None:
        self.after_commands()
        super().end()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    fds = socket.socket(fileno=int(args[0]))
    environ = dict(os.environ)
    preload(everything=args[1:2] != ["core"])
    return RankTemplate(fds, environ).run({"type": "ready", "pid": os.getpid()})


# -- the launcher's side -----------------------------------------------------------------
def _has_stdin() -> bool:
    """Whether this process was started with a stdin (else descriptor 0 may be anything
    it opened since, and the rank gets /dev/null)."""
    return sys.__stdin__ is not None


class ForkedRank:
    """A Popen-shaped handle on a rank the template forked; its exit comes as an event."""

    local = False  # no pidfd: the template's ``exited`` event tells the job

    def __init__(self, rank: int, template: TemplateProcess) -> None:
        self.rank = rank
        self.template = template
        self.pid: int | None = None
        self.returncode: int | None = None
        self.hello: dict[str, Any] | None = None
        self.pidfd: int | None = None

    @property
    def mpi_pid(self) -> int | None:
        if self.hello is not None:
            return int(self.hello["pid"])
        return self.pid

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.template.argv, timeout or 0.0)
            self.template.pump(left)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal the rank's process group (through the template until its pid is known)."""
        if self.returncode is not None:
            return
        if self.pid is None:
            self.template.command({"type": "signal", "signal": int(sig), "ranks": [self.rank]})
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start(
    argv: list[str], n: int, env: Mapping[str, str], preexec: Callable[[], None] | None
) -> Started | None:
    """Start the template of a job of ``n`` ranks running ``argv`` with the job's
    environment ``env``; None when its ranks are not forked (see the module docstring)."""
    plan = pymain.plan(argv, dict(env)) if enabled(env) else None
    if plan is None:
        return None
    return Started(launch(env, n, preexec, needs_everything(plan)), plan, list(argv), n)


def launch(
    env: Mapping[str, str], n: int, preexec: Callable[[], None] | None, everything: bool = True
) -> TemplateProcess:
    """A template for the processes of a job of ``n`` ranks with the environment ``env``
    (``everything``: see :func:`preload`)."""
    # The template's environment is the ranks' without what differs per rank.
    shared = rank_environment(env, 0, n, "", "", os.cpu_count())
    for name in (ctl.ENV_RANK, ctl.ENV_SIZE, ctl.ENV_SESSION_DIR, ctl.ENV_CTL, ctl.ENV_KEY):
        if name not in env:
            shared.pop(name, None)
    return TemplateProcess(shared, preexec, everything)


class Started(NamedTuple):
    """A template :func:`start` started: the process, how ranks run the program, and the
    job it was started for (``argv``, ``n``)."""

    process: TemplateProcess
    plan: pymain.Plan
    argv: list[str]
    n: int


class TemplateProcess(JsonLinesProcess):
    """The launcher's handle on a running template: spawns ranks, dispatches events."""

    def __init__(
        self, env: Mapping[str, str], preexec: Callable[[], None] | None, everything: bool = True
    ) -> None:
        """Start the template; ``everything``: see :func:`preload`."""
        self._mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            super().__init__(
                [
                    sys.executable,
                    "-m",
                    _MAIN,
                    str(theirs.fileno()),
                    "all" if everything else "core",
                ],
                env,
                preexec=preexec,
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        self.env = dict(env)
        self.ranks: dict[int, ForkedRank] = {}

    def spawn(
        self, rank: int, env: Mapping[str, str], spec: dict[str, Any], stdin: bool
    ) -> tuple[ForkedRank, list[Any]]:
        """Fork ``rank``: its handle and the read ends of its stdout and stderr pipes.

        With ``stdin`` the rank reads the launcher's stdin, else /dev/null.
        """
        handle = ForkedRank(rank, self)
        self.ranks[rank] = handle
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        stdin = stdin and _has_stdin()
        source = 0 if stdin else os.open(os.devnull, os.O_RDONLY)
        try:
            with contextlib.suppress(OSError):  # a dead template: its end of file tells
                socket.send_fds(self._mine, [b"f"], [source, out_w, err_w])
            changed = {k: v for k, v in env.items() if self.env.get(k) != v}
            unset = [k for k in self.env if k not in env]
            command = {"type": "spawn", "rank": rank, "set": changed, "unset": unset, "plan": spec}
            self.command(command)
        finally:
            for fd in (out_w, err_w) if stdin else (out_w, err_w, source):
                os.close(fd)
        return handle, [os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)]

    def dispatch(self) -> bool:
        """Handle the events the template has written (its exits, their pids); False
        once it is gone (and its ranks, which die with it)."""
        events = self.read()
        if events is None:
            for handle in self.ranks.values():
                if handle.returncode is None:
                    handle.returncode = -signal.SIGKILL
            return False
        for event in events:
            found = self.ranks.get(event.get("rank", -1))
            if found is None:
                continue
            handle = found
            if event.get("type") == "spawned":
                handle.pid = int(event["pid"])
            elif event.get("type") == "exited":
                handle.pid = int(event["pid"])
                handle.returncode = int(event["returncode"])
        return True

    def pump(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` seconds for events, and handle them."""
        if self.gone:  # every rank has its return code
            return
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            self.dispatch()

    def close(self) -> None:
        """End of file on its stdin (it kills what is left and exits); reap it."""
        self.stop(2.0)
        self._mine.close()


if __name__ == "__main__":
    # No interpreter shutdown to wait for: the launcher waits for this exit.
    os._exit(main())
