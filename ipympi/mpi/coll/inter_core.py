"""The machinery of intercommunicator collectives: the union rank space and the runner.

Each intercommunicator collective runs as *one* collective operation (one
sequence number) of the engine, on the intercommunicator's collective context,
in a *union* rank space that numbers both groups together: the group whose
first member has the lower world rank comes first, so every process of both
groups numbers every process the same way. That lets each call reuse the
one-group (intracommunicator) algorithms of :mod:`ipympi.core.algorithms` and
:mod:`ipympi.core.reductions`, with their ranks shifted into the union, composed
with messages between the groups, rather than needing machinery of its own.

:meth:`InterCollBase._inter` runs such a call in any of the three forms: blocking,
nonblocking (a request progressed while the process is in any MPI call) and
persistent (a ``Prequest`` whose every ``Start`` builds the call's algorithm
afresh, as the intracommunicator's persistent collectives do). The signature
carries the form, so calls of different forms never match (``ERR_NOT_SAME``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable

from ...core import constants as K
from ...core.errors import ERR_BUFFER
from ...core.errors import Exception as MPIException
from ...core.modes import BLOCKING, Form
from ...core.schedule import Algorithm, Round, signature
from ..args import inter_root
from ..handles import InterMixin
from ..jobs import local_first
from ..rawmem import IN_PLACE
from .runner import CollOp, check_reported, run_in_mode

if TYPE_CHECKING:
    from ..commimpl import CommImpl

__all__ = [
    "Build",
    "InterCollBase",
    "InterCollOp",
    "layout",
    "no_in_place",
    "nothing",
    "once",
    "shifted",
]

# build(rank, n, lo, ro) -> (algorithm, finish): this process's local rank, the
# local group's size and the union offsets of the local and remote groups.
Build = Callable[[int, int, int, int], "tuple[Algorithm, Callable[[Any], Any] | None]"]


def layout(impl: CommImpl) -> tuple[list[int], int, int]:
    """(union world ranks, offset of the local group, offset of the remote group)."""
    local, remote = impl.world_ranks, impl.remote_world_ranks
    if local_first(local, remote):
        return list(local) + list(remote), 0, len(local)
    return list(remote) + list(local), len(remote), 0


def shifted(gen: Algorithm, base: int) -> Algorithm:
    """Run a one-group algorithm with its ranks shifted by ``base`` into the union.

    Each round is moved in place, so whatever else it carries (its label, any
    state an algorithm attaches for traces) stays with it.
    """
    try:
        rnd = next(gen)
        while True:
            rnd.sends = [(base + peer, data) for peer, data in rnd.sends]
            rnd.recvs = [(base + peer, target) for peer, target in rnd.recvs]
            received = yield rnd
            rnd = gen.send(received)
    except StopIteration as stop:
        return stop.value


def nothing() -> Algorithm:
    """The algorithm of a process with no part in the call (``PROC_NULL``)."""
    return None
    yield  # a generator with no rounds


def once(rnd: Round) -> Algorithm:
    """An algorithm of one round; returns the round's completed receives."""
    received = yield rnd
    return received


def no_in_place(call: str, *bufs: Any) -> None:
    """``ERR_BUFFER`` for ``IN_PLACE``: there is no message from a process to itself."""
    if any(buf is IN_PLACE for buf in bufs):
        raise MPIException(
            ERR_BUFFER, f"{call}: MPI.IN_PLACE is not allowed on an intercommunicator"
        )


class InterCollOp(CollOp):
    """A collective over both groups, addressed by union rank."""

    def __init__(
        self,
        comm: Any,
        call: str,
        algorithm: Algorithm,
        sig: int,
        finish: Callable[[Any], Any] | None,
        union: list[int],
        me: int,
    ) -> None:
        impl = comm._impl
        shadow = SimpleNamespace(
            _impl=SimpleNamespace(
                engine=impl.engine,
                context=impl.context,
                world_ranks=union,
                remote_world_ranks=union,
                rank=me,
                size=len(union),
                name=impl.name,
                label=impl.label,
            )
        )
        if getattr(algorithm, "__name__", "") in _WRAPPERS:
            # Traces name the algorithm: the intercommunicator form of the call.
            algorithm.__name__ = f"intercomm_{call.lower()}"  # type: ignore[attr-defined]
        super().__init__(shadow, call, algorithm, sig, finish)
        self.comm = comm


# Generic generator names that say nothing in a trace.
_WRAPPERS = frozenset({"run", "once", "nothing", "shifted"})


class InterCollBase(InterMixin):
    """Running one intercommunicator collective, and the rules of its root argument."""

    __slots__ = ()

    def _inter(self, call: str, kind: str, root: int, build: Build, mode: Form = BLOCKING) -> Any:
        """Run a collective over both groups: blocking, or return its (persistent) request.

        ``root`` is the root's union rank (0 when there is none or it is unknown).
        A persistent request calls ``build`` again at every ``Start``.
        """
        impl = self._live()
        engine = impl.engine
        union, lo, ro = layout(impl)
        sig = signature(kind, root, mode)

        def launch() -> CollOp:
            check_reported(engine, impl.context + 1, call)
            gen, finish = build(impl.rank, impl.size, lo, ro)
            return InterCollOp(self, call, gen, sig, finish, union, lo + impl.rank)

        return run_in_mode(engine, launch, mode)

    def _role(self, root: int, call: str) -> tuple[str, int]:
        """``("root" | "idle" | "leaf", root's union rank)`` for a rooted collective.

        The root passes ``ROOT``, the other processes of its group ``PROC_NULL``
        (idle), and the processes of the other group (leaves) the root's rank in
        their remote group.
        """
        impl = self._live()
        root = inter_root(impl, root, call)
        _, lo, ro = layout(impl)
        if root == K.ROOT:
            return "root", lo + impl.rank
        if root == K.PROC_NULL:
            return "idle", 0
        return "leaf", ro + root
