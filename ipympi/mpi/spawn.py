"""Dynamic processes: ``Comm.Spawn``, ``Spawn_multiple`` and ``Comm.Get_parent``.

Spawned processes are more processes of the same job: the launcher of ``python -m
ipympi.run`` (or, for a program started without it, the supervisor a singleton starts on
its first ``Spawn``, :mod:`ipympi.launch.supervisor`; for the ranks of a notebook session,
the controller, :mod:`ipympi.notebook.controller.children`) starts them in the same session
directory, at the next free process indexes, so that the transport reaches them as it
reaches the first ranks. Their ``COMM_WORLD`` holds the children of one ``Spawn`` only.

``Spawn`` is collective over the parents' intracommunicator. The parents agree on a
context id free on all of them (children, being new, use none yet); the root sends the
launcher a ``spawn`` control message (:mod:`ipympi.core.control`) with the programs,
the parents' process indexes and that context, and waits for its ``spawned`` answer: the
new processes' indexes and the per-process error codes. The launcher checks every
program before it starts any (a command that cannot be found or run, a ``wdir`` that is
no folder, a ``host`` that is not this one give ``ERR_SPAWN`` and nothing runs). The
root hands the answer to the other parents with a broadcast; each builds the
intercommunicator (local group: the parents, remote group: the children). A child finds
its parents, the context and the collectives' first sequence number in its environment
(``IPYMPI_PARENT``) and builds the same intercommunicator at ``Init``, which
``Get_parent`` returns until it is disconnected.

Info keys: ``wdir`` (the children's working directory), ``path`` (folders, separated by
``:``, where to look for the command), ``host`` (must name this host: every child runs
on the launcher's host), ``soft`` (acceptable numbers of processes, e.g. ``1:4,8``;
the launcher always starts ``maxprocs``), and ipympi's ``env`` (lines ``NAME=value``
added to the children's environment). Others are ignored, as the standard allows.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Sequence
from typing import Any

from ..core import contexts as ctx
from ..core import control as _control
from ..core.errors import ERR_ARG, ERR_INFO_VALUE, ERR_SPAWN
from ..core.errors import Exception as MPIException
from . import commbuild as cb
from .args import c_int
from .commimpl import CommImpl, comm_class
from .errhandling import mpi_call
from .info import INFO_NULL, Info
from .intercomm import _bcast_object
from .process import PROCESS

__all__ = ["SpawnMethods", "get_parent", "make_parent"]

SPAWN_TIMEOUT = 120.0  # seconds the root waits for the launcher's answer
_ids = itertools.count(1)
_parent: list[Any] = [None]  # the intercommunicator to the parents (a spawned process)


# -- the programs to start ----------------------------------------------------------------
def _text(value: Any, what: str, call: str) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{call}: {what} must be a string, not {type(value).__name__}")
    return value


def _arguments(args: Any, call: str) -> list[str]:
    if args is None:
        return []
    if isinstance(args, (str, bytes)):
        raise TypeError(f"{call}: args must be a sequence of strings, not a string")
    return [_text(arg, "each argument", call) for arg in args]


_SOFT = re.compile(r"^\d+(:\d+(:\d+)?)?$")


def _check_soft(text: str, call: str) -> None:
    """``ERR_INFO_VALUE`` unless ``text`` is a ``soft`` value: counts ``a``, ``a:b`` or
    ``a:b:step``, separated by commas."""
    for part in text.split(","):
        if not _SOFT.match(part.strip()):
            raise MPIException(ERR_INFO_VALUE, f"{call}: soft={text!r} is not a list of counts")


def _app(command: Any, args: Any, maxprocs: Any, info: Any, call: str) -> dict[str, Any]:
    """One program of a spawn request (see ``core.control``'s ``spawn`` message)."""
    argv = [_text(command, "command", call), *_arguments(args, call)]
    if not argv[0]:
        raise MPIException(ERR_SPAWN, f"{call}: the command is empty")
    count = c_int(maxprocs)
    if count < 1:
        raise MPIException(ERR_ARG, f"{call}: maxprocs must be at least 1, not {count}")
    app: dict[str, Any] = {"argv": argv, "maxprocs": count}
    hints = cb.hints_of(info, call)
    for key in ("wdir", "path", "host", "env"):
        if hints.get(key):
            app[key] = hints[key]
    if hints.get("soft"):
        _check_soft(hints["soft"], call)  # ``maxprocs`` processes always start here
    return app


def _spread(value: Any, count: int, what: str, call: str) -> list[Any]:
    """``value`` for each of ``count`` programs: a sequence of that length, or one value."""
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f"{call}: {what} has {len(value)} entries for {count} commands")
        return list(value)
    return [value] * count


def _multiple(command: Any, args: Any, maxprocs: Any, info: Any, call: str) -> list[Any]:
    if isinstance(command, (str, bytes, os.PathLike)) or not isinstance(command, Sequence):
        raise ValueError(f"{call}: command must be a sequence of commands")
    count = len(command)
    if args is None:
        arglists: list[Any] = [None] * count
    else:
        if isinstance(args, (str, bytes)) or len(args) != count:
            raise ValueError(f"{call}: args must hold one argument list per command")
        arglists = list(args)
    counts = [1] * count if maxprocs is None else _spread(maxprocs, count, "maxprocs", call)
    infos = _spread(INFO_NULL if info is None else info, count, "info", call)
    return [_app(*spec, call) for spec in zip(command, arglists, counts, infos)]


# -- Spawn -------------------------------------------------------------------------------
def _ask_launcher(apps: list[dict[str, Any]], parents: list[int], agreed: Any, call: str) -> Any:
    """At the root: have the launcher start ``apps``; its ``spawned`` answer."""
    if not PROCESS.launched:
        from .singleton import become_job

        become_job(call)
    engine = PROCESS.live_engine(call)
    transport = engine.transport
    if transport is None or not PROCESS.can_spawn or PROCESS.progress is None:
        raise MPIException(ERR_SPAWN, f"{call}: the launcher of these ranks starts no processes")
    if transport.remote:
        raise MPIException(ERR_SPAWN, f"{call}: a job placed on several hosts spawns no processes")
    ident = next(_ids)
    context, base = agreed
    msg = {
        "type": _control.SPAWN,
        "rank": engine.rank,
        "id": ident,
        "apps": apps,
        "parents": parents,
        "context": context,
        "base": base,
    }
    try:
        return PROCESS.progress.ask_launcher(msg, ident, SPAWN_TIMEOUT)
    except TimeoutError as exc:
        raise MPIException(ERR_SPAWN, f"{call}: {exc}") from None


def _spawn(comm: Any, call: str, build: Any, root: Any, errcodes: Any, nested: bool) -> Any:
    impl = comm._live()
    root = c_int(root)
    if not 0 <= root < impl.size:
        raise MPIException(ERR_ARG, f"{call}: root {root} is not a rank (size {impl.size})")
    engine = impl.engine
    parts = cb.allgather(comm, call, ctx.contribution(engine))
    outcome: Any = None
    if impl.rank == root:
        try:
            apps = build()
            agreed = cb.agree(parts, call)
            answer = _ask_launcher(apps, list(impl.world_ranks), agreed, call)
            codes = [int(code) for code in answer["errcodes"]]
            if answer.get("error"):
                outcome = ("mpi", ERR_SPAWN, f"{call}: {answer['error']}", codes, apps)
            else:
                outcome = ("ok", [int(r) for r in answer["ranks"]], agreed, codes, apps)
        except MPIException as exc:
            outcome = ("mpi", exc.Get_error_class(), exc._message or str(exc), None, None)
        except (TypeError, ValueError) as exc:
            outcome = ("python", exc)
    outcome = _bcast_object(comm, call, outcome, root)
    if outcome[0] == "python":
        raise outcome[1]
    kind, first, second, codes, apps = outcome
    if errcodes is not None and codes is not None:
        _fill(errcodes, codes, apps, nested)
    if kind == "mpi":
        raise MPIException(first, second)
    children, (context, base) = first, second
    engine.grow(max(children) + 1)
    new = cb.new_inter_impl(impl, context, base, impl.world_ranks, children)
    return comm_class("Intercomm")._from_impl(new)


def _fill(errcodes: Any, codes: list[int], apps: list[dict[str, Any]], nested: bool) -> None:
    """Put the error codes into the caller's list: one per process, per command if ``nested``."""
    if not nested:
        errcodes[:] = codes
        return
    grouped, start = [], 0
    for app in apps:
        grouped.append(codes[start : start + app["maxprocs"]])
        start += app["maxprocs"]
    errcodes[:] = grouped


class SpawnMethods:
    """``Intracomm.Spawn`` and ``Intracomm.Spawn_multiple``."""

    __slots__ = ()

    @mpi_call
    def Spawn(
        self,
        command: str,
        args: Sequence[str] | None = None,
        maxprocs: int = 1,
        info: Info = INFO_NULL,
        root: int = 0,
        errcodes: list[int] | None = None,
    ) -> Any:
        """Start ``maxprocs`` processes running ``command args`` (significant at ``root``)
        and return an intercommunicator to them: collective."""

        def build() -> list[dict[str, Any]]:
            return [_app(command, args, maxprocs, info, "Spawn")]

        return _spawn(self, "Spawn", build, root, errcodes, False)

    @mpi_call
    def Spawn_multiple(
        self,
        command: Sequence[str],
        args: Sequence[Sequence[str]] | None = None,
        maxprocs: Sequence[int] | int | None = None,
        info: Sequence[Info] | Info = INFO_NULL,
        root: int = 0,
        errcodes: list[list[int]] | None = None,
    ) -> Any:
        """Start several programs as one ``COMM_WORLD`` (``APPNUM`` tells them apart):
        collective; the arguments are significant at ``root``."""

        def build() -> list[dict[str, Any]]:
            return _multiple(command, args, maxprocs, info, "Spawn_multiple")

        return _spawn(self, "Spawn_multiple", build, root, errcodes, True)


# -- the children's side -----------------------------------------------------------------
def make_parent() -> None:
    """At ``Init`` of a spawned process: the intercommunicator to its parents."""
    spec = PROCESS.parent
    world = PROCESS.world
    if not spec or world is None or world._impl is None:
        return
    context, base, parents = _control.decode_parent(spec)
    impl = world._impl
    parent = CommImpl(
        impl.engine,
        context,
        list(impl.world_ranks),
        impl.rank,
        "MPI_COMM_PARENT",
        impl.errhandler,
    )
    parent.remote_world_ranks = parents
    ctx.install(impl.engine, context, base)
    _parent[0] = comm_class("Intercomm")._from_impl(parent, "MPI_COMM_PARENT")


def get_parent() -> Any:
    """The intercommunicator to the parents (one handle: ``Disconnect`` nulls it), else
    ``COMM_NULL``."""
    parent = _parent[0]
    if parent is None or parent._impl is None:
        return comm_class("Intercomm")._from_impl(None, "COMM_NULL")
    return parent
