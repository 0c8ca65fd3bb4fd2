"""The magics: ``%mpi``, ``%%px``/``%%mpi``, ``%px``, ``%pxresult``, ``%pxconfig``,
``%autopx`` and ``%%local``.

Each magic parses its options and delegates: cells run through
:func:`ipympi.notebook.controller.execute.run_cell`, data moves through
:mod:`ipympi.notebook.controller.session`, and output is published by
:func:`ipympi.notebook.controller.publish.publisher_for`. Docstrings are the help
(``%%px?``).
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from ipympi.launch.hosts import HostError, parse_hosts, read_hostfile
from ipympi.launch.watch import ON_ERROR
from ipympi.notebook.controller import session
from ipympi.notebook.controller.cluster import Cluster, ClusterError
from ipympi.notebook.controller.errands import driven
from ipympi.notebook.controller.execute import (
    CellOptions,
    CellResult,
    RankError,
    ensure_world,
    follow,
    run_cell,
)
from ipympi.notebook.controller.launchers import BACKENDS, LAUNCHERS
from ipympi.notebook.controller.placement import make_launcher
from ipympi.notebook.controller.publish import cell_number, publisher_for, request_is_silent
from ipympi.notebook.controller.render import GROUPS
from ipympi.notebook.controller.status import StatusTable

from ._autopx import AutoParallel

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["ParallelMagics"]


def _exec_options(func: Any) -> Any:
    """The options of ``%%px`` (shared by ``%pxconfig``)."""
    for decorator in reversed(
        [
            argument("-t", "--targets", help="ranks to run on: 0, 1,3, ::2, all (default: all)"),
            argument(
                "--block",
                action="store_const",
                const=True,
                dest="block",
                help="wait for the cell to end (default)",
            ),
            argument(
                "--noblock",
                action="store_const",
                const=False,
                dest="block",
                help="return at once; %%pxresult shows the output later",
            ),
            argument(
                "--group-outputs",
                choices=GROUPS,
                dest="group",
                help="order: as it arrives (default); rank: rank by rank; type: "
                "all stdout, all stderr, all displays, all results",
            ),
            argument(
                "--stream",
                action="store_const",
                const=True,
                dest="stream",
                help="show output while the cell runs (default)",
            ),
            argument(
                "--no-stream",
                action="store_const",
                const=False,
                dest="stream",
                help="show output when the cell has ended",
            ),
            argument(
                "--no-collapse",
                action="store_const",
                const=False,
                dest="collapse",
                help="show identical output of several ranks once per rank",
            ),
            argument(
                "--timeout",
                type=float,
                metavar="S",
                help="interrupt the ranks after S seconds and report what each was doing",
            ),
            argument(
                "--trace",
                action="store_const",
                const=True,
                dest="trace",
                help="record every message of the cell on every rank and draw them under it "
                "(ipympi.last_trace() returns the records)",
            ),
            argument(
                "--no-trace",
                action="store_const",
                const=False,
                dest="trace",
                help="do not record messages (the default, unless %%mpi trace on)",
            ),
        ]
    ):
        func = decorator(func)
    return func


@magics_class
class ParallelMagics(Magics):
    """Run cells on the ranks of an MPI session and move data to and from them."""

    def __init__(self, shell: Any, autopx: AutoParallel) -> None:
        super().__init__(shell)
        # The instance attribute hides the %autopx method, registered above.
        self.autopx = autopx  # type: ignore[assignment,misc]
        self.defaults: dict[str, Any] = {}
        self.pending: CellResult | None = None

    @property
    def _shell(self) -> InteractiveShell:
        shell = self.shell
        assert shell is not None  # registered magics have their shell
        return shell

    # -- the session -------------------------------------------------------------------
    def _cluster(self) -> Cluster:
        try:
            return session.current()
        except ClusterError as exc:
            raise UsageError(str(exc)) from None

    @line_cell_magic
    def mpi(self, line: str, cell: str | None = None) -> Any:
        """Manage the MPI session, or (as ``%%mpi``) run a cell on the ranks like ``%%px``.

        %mpi start [-n N] [--backend builtin|mpi4py] [--launcher L] [--hosts LIST]
                              start N ranks (default: IPYMPI_NP, else 4) on ipympi's own
                              MPI (default: IPYMPI_BACKEND, else builtin) or on mpi4py,
                              started by mpiexec (default: IPYMPI_LAUNCHER) or srun
                              --hosts a:4,b:4 (or --hostfile FILE): ranks on several hosts;
                              the built-in MPI's are started directly (this machine), by
                              ssh, or by srun in a Slurm allocation (--launcher auto|local|
                              ssh|srun; srun alone takes the allocation's nodes);
                              --launcher-exec CMD replaces ssh, srun or mpiexec;
                              --iface NAME is the network interface every socket binds
        %mpi stop             end the ranks
        %mpi restart [-n N] [--backend B] [--launcher L] [--hosts LIST] ...
                              a fresh world of N ranks (default: the same size, backend
                              and hosts)
        %mpi status           what each rank is doing: pid, host, state, MPI call, memory
        %mpi push NAME...     send the controller's variables to every rank
        %mpi pull NAME [-t T] the value of NAME on each rank, as a list
        %mpi config on_error=interrupt|wait|abort
                              when no rank of a cell can progress (a deadlock, or ranks
                              waiting on a failed one): stop the waiting ranks (default),
                              keep waiting, or end the world (on a real MPI, whose calls
                              no interrupt reaches, stopping them ends the world)
        %mpi config deadlock_after=S
                              on a real MPI: end a cell as a probable deadlock once every
                              rank has sat in an MPI call, silent, for S seconds (default 3)
        %mpi config keep_messages=on|off
                              after a cell that failed or was interrupted, keep what it
                              left unreceived for later cells to receive (default off:
                              every rank discards it, and the cell's error says so)
        %mpi trace on|off     trace every parallel cell (as %%px --trace): a diagram of
                              every message under each cell
        %mpi show NAME... [-t T]
                              each rank's value of NAME side by side, differences marked
        %mpi explain CALL     run one collective call (e.g. comm.Allreduce(a, b)) on the
                              ranks and show it step by step: who sends what to whom, and
                              every rank's data before and after each step
        """
        if cell is not None:
            return self.px(line, cell)
        first, _, raw = line.strip().partition(" ")
        if first == "explain":  # the rest is Python code, not shell words
            with _one_line("%mpi explain"):
                return self._mpi_explain(raw)
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"%mpi: {exc}") from None
        if not words:
            raise UsageError(f"%mpi needs a subcommand: {', '.join(_SUBCOMMANDS)}")
        name, rest = words[0], words[1:]
        method = _SUBCOMMANDS.get(name)
        if method is None:
            raise UsageError(
                f"%mpi {name}: unknown subcommand; choose from {', '.join(_SUBCOMMANDS)}"
            )
        if name not in _URGENT and self._past_a_running_cell():
            raise UsageError(
                f"%mpi {name}: a parallel cell is running; of %mpi, only status, stop and "
                "restart get past it"
            )
        with _one_line(f"%mpi {name}"):
            return getattr(self, method)(rest)

    @staticmethod
    def _past_a_running_cell() -> bool:
        """Whether this is another thread than the one running a parallel cell now (a
        kernel subshell's): only the urgent subcommands may use the session then."""
        if threading.current_thread() is threading.main_thread():
            return False
        try:
            return session.current().errands.open
        except ClusterError:
            return False

    def _world_args(self, rest: list[str], command: str) -> argparse.Namespace:
        """``-n``, the backend, the launcher and the hosts of ``%mpi start``/``restart``."""
        parser = _Parser(prog=f"%mpi {command}")
        parser.add_argument("-n", "--np", type=int, dest="n", help="number of ranks")
        parser.add_argument("--backend", choices=BACKENDS, help="the MPI the ranks run")
        parser.add_argument("--launcher", choices=LAUNCHERS, help="how ranks are started")
        parser.add_argument("--hosts", metavar="LIST", help="hosts, e.g. a:4,b:4")
        parser.add_argument("--hostfile", metavar="FILE", help="hosts, one per line")
        parser.add_argument("--launcher-exec", metavar="CMD", help="the ssh/srun/mpiexec to use")
        parser.add_argument("--iface", metavar="NAME", help="the network interface to bind")
        args = parser.parse(rest)
        if args.n is not None and args.n < 1:
            raise UsageError(f"%mpi {command}: -n must be at least 1, not {args.n}")
        if args.hosts and args.hostfile:
            raise UsageError(f"%mpi {command}: give --hosts or --hostfile, not both")
        try:
            if args.hosts:
                args.hosts = parse_hosts(args.hosts)
            elif args.hostfile:
                args.hosts = read_hostfile(args.hostfile)
        except HostError as exc:
            raise UsageError(f"%mpi {command}: {exc}") from None
        return args

    @staticmethod
    def _placement(args: argparse.Namespace) -> dict[str, Any]:
        return {"hosts": args.hosts, "launcher_exec": args.launcher_exec, "iface": args.iface}

    def _backend_choice(
        self, cluster: Cluster, args: argparse.Namespace, command: str
    ) -> dict[str, Any] | None:
        """The backend, launcher and hosts the options switch ``cluster`` to, checked;
        None: no switch (the options say nothing new)."""
        placement = self._placement(args)
        if args.backend is None and args.launcher is None and not any(placement.values()):
            return None
        backend = args.backend or cluster.backend
        launcher = args.launcher
        if backend == "mpi4py" and launcher is None and cluster.backend == "mpi4py":
            launcher = cluster.launcher.name  # --backend mpi4py alone keeps the launcher
        same_launcher = launcher in (None, cluster.launcher.name)
        if backend == cluster.backend and same_launcher and not any(placement.values()):
            return None
        try:
            make_launcher(backend, launcher, cluster.env, **placement)  # refused before any end
        except ClusterError as exc:
            raise UsageError(f"%mpi {command}: {exc}") from None
        return {"backend": backend, "launcher": launcher, **placement}

    def _mpi_start(self, rest: list[str]) -> None:
        args = self._world_args(rest, "start")
        try:
            cluster = session.current()
        except ClusterError:
            try:
                cluster = session.new_cluster(
                    args.n, args.backend, args.launcher, **self._placement(args)
                )
            except ClusterError as exc:
                raise UsageError(f"%mpi start: {exc}") from None
            session.set_current(cluster)
            session.set_start_error(None)
        if cluster.running:
            raise UsageError(
                f"{cluster.n} ranks are already running: %mpi restart [-n N] replaces them"
            )
        choice = self._backend_choice(cluster, args, "start")
        if choice is not None:
            cluster.use(**choice)
        started = time.monotonic()
        try:
            cluster.start(args.n)
        except ClusterError as exc:
            raise UsageError(str(exc)) from None
        print(f"MPI session: {_ready(cluster)} in {time.monotonic() - started:.2f} s")

    def _mpi_stop(self, rest: list[str]) -> None:
        _Parser(prog="%mpi stop").parse(rest)
        cluster = self._cluster()
        driven(cluster.errands, cluster.stop)
        print("MPI session stopped")

    def _mpi_restart(self, rest: list[str]) -> None:
        args = self._world_args(rest, "restart")
        try:
            cluster = session.current()
        except ClusterError:
            self._mpi_start(rest)
            return
        choice = self._backend_choice(cluster, args, "restart")
        started = time.monotonic()

        def replace() -> None:
            cluster.stop()
            if choice is not None:
                cluster.use(**choice)
            cluster.start(args.n)

        try:
            driven(cluster.errands, replace)
        except ClusterError as exc:
            raise UsageError(str(exc)) from None
        print(f"MPI session restarted: {_ready(cluster)} in {time.monotonic() - started:.2f} s")

    def _mpi_status(self, rest: list[str]) -> StatusTable:
        _Parser(prog="%mpi status").parse(rest)
        cluster = self._cluster()
        rows = driven(cluster.errands, cluster.status)
        return StatusTable(rows, f"{cluster.n} ranks: {cluster.describe()}")

    def _mpi_push(self, rest: list[str]) -> None:
        parser = _Parser(prog="%mpi push")
        parser.add_argument("names", nargs="+", metavar="NAME")
        parser.add_argument("-t", "--targets")
        args = parser.parse(rest)
        ns = self._shell.user_ns
        missing = [name for name in args.names if name not in ns]
        if missing:
            raise UsageError(f"%mpi push: {missing[0]!r} is not defined in the controller")
        self._cluster().push({name: ns[name] for name in args.names}, args.targets)

    def _mpi_pull(self, rest: list[str]) -> list[Any]:
        parser = _Parser(prog="%mpi pull")
        parser.add_argument("names", nargs="+", metavar="NAME")
        parser.add_argument("-t", "--targets")
        args = parser.parse(rest)
        names = args.names[0] if len(args.names) == 1 else args.names
        return self._cluster().pull(names, args.targets)

    def _mpi_config(self, rest: list[str]) -> None:
        cluster = self._cluster()
        if not rest:
            keep = "on" if cluster.keep_messages else "off"
            print(
                f"on_error={cluster.on_error} deadlock_after={cluster.deadlock_after:g} "
                f"keep_messages={keep}"
            )
            return
        for word in rest:
            key, sep, value = word.partition("=")
            if key == "on_error" and sep:
                if value not in ON_ERROR:
                    raise UsageError(f"%mpi config: on_error must be one of {', '.join(ON_ERROR)}")
                cluster.on_error = value
            elif key == "deadlock_after" and sep:
                cluster.deadlock_after = _seconds(value, "%mpi config: deadlock_after")
            elif key == "keep_messages" and sep:
                if value not in ("on", "off"):
                    raise UsageError("%mpi config: keep_messages must be on or off")
                cluster.keep_messages = value == "on"
            else:
                raise UsageError(
                    "%mpi config: expected on_error=VALUE, deadlock_after=SECONDS or "
                    f"keep_messages=on|off, not {word!r}"
                )

    # -- teaching ------------------------------------------------------------------------
    def _mpi_trace(self, rest: list[str]) -> None:
        parser = _Parser(prog="%mpi trace")
        parser.add_argument("state", nargs="?", choices=("on", "off"))
        state = parser.parse(rest).state
        if state == "on":
            self._need_builtin("%mpi trace on")
        if state is not None:
            self.defaults["trace"] = state == "on"
        on = self.defaults.get("trace", False)
        print(
            "tracing is on: every parallel cell draws its messages (%mpi trace off ends it)"
            if on
            else "tracing is off (%mpi trace on, or %%px --trace for one cell)"
        )

    def _mpi_show(self, rest: list[str]) -> Any:
        from ipympi.teach.show import show

        parser = _Parser(prog="%mpi show")
        parser.add_argument("names", nargs="+", metavar="NAME")
        parser.add_argument("-t", "--targets")
        args = parser.parse(rest)
        return show(self._cluster(), args.names, args.targets)

    def _mpi_explain(self, text: str) -> Any:
        from ipympi.teach.explain import Explanation
        from ipympi.teach.recording import default_call, explain_call, parse_collective_call

        text, setup = text.strip(), ""
        bare = text.isidentifier()  # a collective's name: explained on default buffers
        if bare:
            found = default_call(text)
            if found is None:
                parse_collective_call(f"comm.{text}()")  # says what can be explained
                raise UsageError(f"%mpi explain: give a collective, e.g. {text}(...)")
            setup, text = found
        parse_collective_call(text)
        cluster = self._need_builtin("%mpi explain")
        ensure_world(cluster, list(range(cluster.n)), publisher_for(self.shell))
        if bare:
            buffers = f", on default buffers: {'; '.join(setup.splitlines())}" if setup else ""
            print(text + buffers)
        outcomes = cluster.apply(explain_call, text, setup)
        ranks = range(len(outcomes))
        explanation = Explanation.from_ranks(
            text,
            {rank: outcomes[rank]["records"] for rank in ranks},
            next((o["dtype"] for o in outcomes if o["dtype"]), None),
            {rank: outcomes[rank]["before"] for rank in ranks},
            {rank: outcomes[rank]["after"] for rank in ranks},
        )
        stepper = explanation.widget()
        if stepper is None:
            return explanation
        # The stepper where widgets render; the static frames elsewhere (a saved
        # notebook, nbconvert, a terminal).
        bundle = explanation._repr_mimebundle_()
        widget_view = "application/vnd.jupyter.widget-view+json"
        bundle[widget_view] = stepper._repr_mimebundle_()[widget_view]
        display(bundle, raw=True)
        return None

    def _need_builtin(self, what: str) -> Cluster:
        """The session's cluster, if it runs ipympi's own MPI, which ``what`` needs."""
        cluster = self._cluster()
        if cluster.backend != "builtin":
            raise UsageError(
                f"{what} shows what ipympi's built-in MPI does; this session runs "
                f"{cluster.backend} (%mpi restart --backend builtin switches)"
            )
        return cluster

    # -- running cells ---------------------------------------------------------------------
    def _options(self, args: argparse.Namespace) -> CellOptions:
        values = dict(self.defaults)
        for key in _CELL_OPTIONS:
            value = getattr(args, key, None)
            if value is not None:
                values[key] = value
        try:
            return CellOptions(**values)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    @magic_arguments()
    @_exec_options
    @argument("--local", action="store_true", help="also run the cell in the controller")
    @argument("-o", "--save-name", help="keep the cell's result (a CellResult) under this name")
    @line_cell_magic
    def px(self, line: str, cell: str | None = None) -> Any:
        """Run code on the ranks: ``%%px [options]`` for a cell, ``%px code`` for one line.

        Output is labelled by rank ([stdout:R], [stderr:R], Out[R:n]); a failure on
        any rank ends the cell with one error naming the ranks and their tracebacks.
        Ctrl-C (the notebook's interrupt) reaches every rank, also one blocked in MPI.
        """
        if cell is None:
            return self.run_on_ranks(line)
        args = parse_argstring(self.px, line)
        return self._run(cell, self._options(args), local=args.local, save_name=args.save_name)

    def run_on_ranks(self, code: str) -> Any:
        """Run ``code`` on the ranks with the default options, as ``%%px`` alone does.

        Returns what the magic returns: None, or the pending cell's result when
        ``%pxconfig --noblock`` made that the default; raises the cell's error.
        """
        return self._run(code, CellOptions(**self.defaults), local=False, save_name=None)

    def _run(self, code: str, options: CellOptions, local: bool, save_name: str | None) -> Any:
        cluster = self._cluster()
        publish = publisher_for(self.shell)
        if request_is_silent(self.shell):
            options = replace(options, silent=True)
        try:
            result = run_cell(cluster, code, options, publish, cell_number(self.shell))
        except (ClusterError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        if save_name:
            self._shell.user_ns[save_name] = result
        if local:
            self._shell.run_cell(code, store_history=False)
        if not options.block:
            self.pending = result
            return result
        self._show_trace(result, options.silent)
        payloads = self._shell.payload_manager
        assert payloads is not None  # made at the shell's start
        for item in result.payload:  # the pager's text of obj?, as the kernel's own
            payloads.write_payload(item)
        result.raise_for_error()
        return None

    def _show_trace(self, result: CellResult, silent: bool) -> None:
        """Keep a traced cell's trace (``ipympi.last_trace()``) and draw it under the cell."""
        trace = result.trace()
        if trace is None:
            return
        session.set_last_trace(trace)
        if not silent:
            display(trace)

    @line_magic
    def pxresult(self, line: str) -> None:
        """Wait for the last ``%%px --noblock`` cell and show its output (or its error)."""
        result = self.pending
        if result is None:
            raise UsageError("no %%px --noblock cell to wait for")
        cluster = self._cluster()
        options = CellOptions(**dict(self.defaults, stream=False, block=True))
        result.execution_count = cell_number(self.shell)
        follow(cluster, result, options, publisher_for(self.shell))
        self.pending = None
        self._show_trace(result, request_is_silent(self.shell))
        result.raise_for_error()

    @magic_arguments()
    @_exec_options
    @line_magic
    def pxconfig(self, line: str) -> None:
        """Set the default options of ``%%px`` and ``%px`` (e.g. ``%pxconfig --no-stream``)."""
        args = parse_argstring(self.pxconfig, line)
        options = self._options(args)
        self.defaults = {key: getattr(options, key) for key in _CELL_OPTIONS}

    @line_magic
    def autopx(self, line: str) -> None:
        """Toggle parallel mode: every cell runs on the ranks (``%%local`` cells excepted)."""
        autopx: AutoParallel = self.__dict__["autopx"]  # the attribute, not this method
        autopx.enabled = not autopx.enabled
        state = "on: cells run on the ranks" if autopx.enabled else "off"
        print(f"%autopx {state}")

    @cell_magic
    def local(self, line: str, cell: str) -> None:
        """Run this cell in the controller only (meaningful in parallel mode)."""
        self._shell.run_cell(cell, store_history=False)


# The CellOptions fields that %%px options and %pxconfig set.
_CELL_OPTIONS = ("targets", "block", "stream", "group", "collapse", "timeout", "trace")

_URGENT = ("status", "stop", "restart")  # get past a running cell (controller/urgent.py)
_SUBCOMMANDS = {
    "start": "_mpi_start",
    "stop": "_mpi_stop",
    "restart": "_mpi_restart",
    "status": "_mpi_status",
    "push": "_mpi_push",
    "pull": "_mpi_pull",
    "config": "_mpi_config",
    "trace": "_mpi_trace",
    "show": "_mpi_show",
    "explain": "_mpi_explain",
}


@contextlib.contextmanager
def _one_line(command: str) -> Iterator[None]:
    """Any failure of ``command`` (``%mpi show``) as one line of UsageError: what the
    ranks raised (a cell's summary line), or the exception, never a traceback of ipympi."""
    try:
        yield
    except UsageError:
        raise
    except RankError as exc:
        raise UsageError(f"{command}: {exc.traceback_lines[0]}") from None
    except (ClusterError, NameError, ValueError) as exc:
        raise UsageError(f"{command}: {exc}") from None
    except Exception as exc:
        raise UsageError(f"{command}: {type(exc).__name__}: {exc}") from None


def _seconds(text: str, what: str) -> float:
    """A positive number of seconds, or a UsageError that names ``what``."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise UsageError(f"{what} must be a positive number of seconds, not {text!r}")
    return value


def _ready(cluster: Cluster) -> str:
    """``4 ranks ready`` (``on mpi4py`` added where the backend is not the built-in MPI,
    ``on 2 hosts`` where the ranks are on several)."""
    on = "" if cluster.backend == "builtin" else f" on {cluster.backend}"
    hosts = len({engine.host for engine in cluster.engines if engine.host})
    where = f" on {hosts} hosts" if hosts > 1 else ""
    return f"{cluster.n} ranks{on} ready{where}"


class _Parser(argparse.ArgumentParser):
    """argparse for magics: errors become UsageError, never SystemExit."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(add_help=False, **kwargs)

    def error(self, message: str) -> Any:
        raise UsageError(f"{self.prog}: {message}")

    def parse(self, words: list[str]) -> argparse.Namespace:
        return self.parse_args(words)
