"""Intercommunicator collectives: the :class:`InterCollectives` mixin of ``MPI.Intercomm``.

Each intercommunicator collective runs as *one* collective operation (one
sequence number) of the engine, on the intercommunicator's collective context,
in a *union* rank space that numbers both groups together: the group whose
first member has the lower world rank comes first, so every process of both
groups numbers every process the same way. That lets each call reuse the
one-group (intracommunicator) algorithms of :mod:`ipympi._algorithms` and
:mod:`ipympi._reductions`, with their ranks shifted into the union, composed
with messages between the groups, rather than needing machinery of its own.

Rooted calls follow the standard's rules: the root passes ``ROOT``, the other
processes of its group ``PROC_NULL``, and the processes of the other group the
root's rank in their remote group. ``IN_PLACE`` is not allowed
(``ERR_BUFFER``), and ``Scan``/``Exscan`` are not defined (``ERR_COMM``).
Nonblocking forms (``Ibcast``...) start the same operation and return its
request, progressed while the process is in any MPI call; the signature carries
the form, so blocking and nonblocking calls never match (``ERR_NOT_SAME``).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable

from . import _algorithms as algo
from . import _constants as K
from . import _reductions as red
from ._buffers import IN_PLACE, recv_buffer, send_buffer
from ._coll import _per_rank, _unpack_after, _vspec
from ._coll_reduce import _object_op, _Reduction
from ._collsched import Algorithm, CollOp, Round, check_reported, run_blocking, signature
from ._commcreate import _int
from ._errhandling import mpi_call
from ._errors import ERR_BUFFER, ERR_COMM, ERR_COUNT, ERR_ROOT
from ._errors import Exception as MPIException
from ._op import SUM
from ._pickle import pickle
from ._request import Request

if TYPE_CHECKING:
    from ._comm import CommImpl

__all__ = ["InterCollectives"]

# -- the union rank space ------------------------------------------------------------------


def _layout(impl: CommImpl) -> tuple[list[int], int, int]:
    """(union world ranks, offset of the local group, offset of the remote group)."""
    local, remote = impl.world_ranks, impl.remote_world_ranks
    if local[0] < remote[0]:
        return list(local) + list(remote), 0, len(local)
    return list(remote) + list(local), len(remote), 0


def _shifted(gen: Algorithm, base: int) -> Algorithm:
    """Run a one-group algorithm with its ranks shifted by ``base`` into the union."""
    try:
        rnd = next(gen)
        while True:
            moved = Round(
                rnd.label,
                sends=[(base + peer, data) for peer, data in rnd.sends],
                recvs=[(base + peer, target) for peer, target in rnd.recvs],
            )
            received = yield moved
            rnd = gen.send(received)
    except StopIteration as stop:
        return stop.value


def _nothing() -> Algorithm:
    return None
    yield  # a generator with no rounds


def _once(rnd: Round) -> Algorithm:
    """An algorithm of one round; returns the round's completed receives."""
    received = yield rnd
    return received


class _InterCollOp(CollOp):
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
                rank=me,
                name=impl.name,
            )
        )
        super().__init__(shadow, call, algorithm, sig, finish)
        self.comm = comm


Build = Callable[[int, int, int, int], "tuple[Algorithm, Callable[[Any], Any] | None]"]


def _no_in_place(call: str, *bufs: Any) -> None:
    if any(buf is IN_PLACE for buf in bufs):
        raise MPIException(
            ERR_BUFFER, f"{call}: MPI.IN_PLACE is not allowed on an intercommunicator"
        )


class InterCollectives:
    """Collectives of ``MPI.Intercomm``, over both groups in the union rank space."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _live(self) -> CommImpl: ...

        def Get_remote_size(self) -> int: ...

    # -- machinery ------------------------------------------------------------------
    def _inter(self, call: str, kind: str, root: int, build: Build, mode: str = "blocking") -> Any:
        """Run a collective over both groups: blocking, or return its request.

        ``build(rank, n, lo, ro)`` gets this process's local rank, the local
        group's size and the union offsets of the local and remote groups.
        ``root`` is the root's union rank (0 when there is none or it is unknown).
        """
        impl = self._live()
        engine = impl.engine
        union, lo, ro = _layout(impl)
        sig = signature(kind, root, mode)
        engine.enter()
        try:
            check_reported(engine, impl.context + 1, call)
            gen, finish = build(impl.rank, impl.size, lo, ro)
            coll = _InterCollOp(self, call, gen, sig, finish, union, lo + impl.rank)
            if mode == "blocking":
                return run_blocking(coll)
            coll.start()
            return Request._of(coll)
        finally:
            engine.leave()

    def _role(self, root: int, call: str) -> tuple[str, int]:
        """``("root" | "idle" | "leaf", root's union rank)`` for a rooted collective."""
        impl = self._live()
        root = _int(root, call, "root")
        _, lo, ro = _layout(impl)
        if root == K.ROOT:
            return "root", lo + impl.rank
        if root == K.PROC_NULL:
            return "idle", 0
        if 0 <= root < len(impl.remote_world_ranks):
            return "leaf", ro + root
        raise MPIException(
            ERR_ROOT,
            f"{call}: root {root} must be ROOT, PROC_NULL or a rank of the remote group "
            f"(size {len(impl.remote_world_ranks)})",
        )

    # -- barrier -----------------------------------------------------------------------
    @mpi_call
    def Barrier(self) -> None:
        """Every process waits until every process of both groups has called it."""
        self._barrier("Barrier")

    @mpi_call
    def barrier(self) -> None:
        self._barrier("barrier")

    @mpi_call
    def Ibarrier(self) -> Request:
        return self._barrier("Ibarrier", "nonblocking")

    def _barrier(self, call: str, mode: str = "blocking") -> Any:
        total = len(_layout(self._live())[0])

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, None]:
            return algo.barrier_dissemination(lo + rank, total), None

        return self._inter(call, "Barrier", 0, build, mode)

    # -- bcast -------------------------------------------------------------------------
    @mpi_call
    def Bcast(self, buf: Any, root: int = 0) -> None:
        """Broadcast from the ``ROOT`` process to every process of the other group."""
        self._bcast("Bcast", buf, root)

    @mpi_call
    def Ibcast(self, buf: Any, root: int = 0) -> Request:
        return self._bcast("Ibcast", buf, root, "nonblocking")

    def _bcast(self, call: str, buf: Any, root: int, mode: str = "blocking") -> Any:
        _no_in_place(call, buf)
        role, uroot = self._role(root, call)
        spec = None
        if role == "root":
            spec = send_buffer(buf)
        elif role == "leaf":
            spec = recv_buffer(buf)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "idle":
                return _nothing(), None
            assert spec is not None
            mem = spec.mem
            if role == "root":
                return _once(Round("send to the remote group", sends=[(ro, mem)])), None

            def run() -> Algorithm:
                if rank == 0:
                    yield Round("receive from the root", recvs=[(uroot, mem)])
                yield from _shifted(algo.bcast_binomial(rank, n, 0, mem), lo)

            return run(), _unpack_after(spec)

        return self._inter(call, "Bcast", uroot, build, mode)

    @mpi_call
    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        """Lower-case Bcast: the receiving group returns the object, the root's group None."""
        role, uroot = self._role(root, "bcast")
        data = pickle.dumps(obj) if role == "root" else None

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "idle":
                return _nothing(), None
            if role == "root":
                return _once(Round("send to the remote group", sends=[(ro, data)])), None

            def run() -> Algorithm:
                wire = None
                if rank == 0:
                    (op,) = yield Round("receive from the root", recvs=[(uroot, None)])
                    wire = bytes(op.data)
                return (yield from _shifted(algo.bcast_objects(rank, n, 0, wire), lo))

            return run(), None

        wire = self._inter("bcast", "bcast", uroot, build)
        return None if role != "leaf" else pickle.loads(wire)

    # -- gather ------------------------------------------------------------------------
    def _gather(self, call: str, sendbuf: Any, recvbuf: Any, root: int, v: bool, mode: str) -> Any:
        _no_in_place(call, sendbuf, recvbuf)
        role, uroot = self._role(root, call)
        m = self.Get_remote_size()
        views: list[memoryview] = []
        finish = None
        block = None
        if role == "root":
            if v:
                whole, views = _vspec(recvbuf, m, call, writable=True)
                finish = _unpack_after(whole)
            else:
                whole, views, finish = _per_rank(recvbuf, m, call, writable=True)
        elif role == "leaf":
            block = send_buffer(sendbuf).mem

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "root":
                recvs = [(ro + j, views[j]) for j in range(m)]
                return _once(Round("receive every block", recvs=recvs)), finish
            if role == "leaf":
                return _once(Round("send to the root", sends=[(uroot, block)])), None
            return _nothing(), None

        return self._inter(call, "Gatherv" if v else "Gather", uroot, build, mode)

    @mpi_call
    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """The ``ROOT`` process receives one block from each process of the other group."""
        self._gather("Gather", sendbuf, recvbuf, root, False, "blocking")

    @mpi_call
    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        self._gather("Gatherv", sendbuf, recvbuf, root, True, "blocking")

    @mpi_call
    def Igather(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._gather("Igather", sendbuf, recvbuf, root, False, "nonblocking")

    @mpi_call
    def Igatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._gather("Igatherv", sendbuf, recvbuf, root, True, "nonblocking")

    @mpi_call
    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """The ``ROOT`` process returns the other group's objects in rank order."""
        role, uroot = self._role(root, "gather")
        m = self.Get_remote_size()
        data = pickle.dumps(sendobj) if role == "leaf" else b""

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "root":

                def run() -> Algorithm:
                    ops = yield Round("receive", recvs=[(ro + j, None) for j in range(m)])
                    return [pickle.loads(op.data) for op in ops]

                return run(), None
            if role == "leaf":
                return _once(Round("send to the root", sends=[(uroot, data)])), None
            return _nothing(), None

        result = self._inter("gather", "gather", uroot, build)
        return result if role == "root" else None

    # -- scatter -----------------------------------------------------------------------
    def _scatter(self, call: str, sendbuf: Any, recvbuf: Any, root: int, v: bool, mode: str) -> Any:
        _no_in_place(call, sendbuf, recvbuf)
        role, uroot = self._role(root, call)
        m = self.Get_remote_size()
        views: list[memoryview] = []
        spec = None
        if role == "root":
            if v:
                _, views = _vspec(sendbuf, m, call, writable=False)
            else:
                _, views, _ = _per_rank(sendbuf, m, call, writable=False)
        elif role == "leaf":
            spec = recv_buffer(recvbuf)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "root":
                sends = [(ro + j, views[j]) for j in range(m)]
                return _once(Round("send every block", sends=sends)), None
            if role == "leaf":
                assert spec is not None
                rnd = Round("receive from the root", recvs=[(uroot, spec.mem)])
                return _once(rnd), _unpack_after(spec)
            return _nothing(), None

        return self._inter(call, "Scatterv" if v else "Scatter", uroot, build, mode)

    @mpi_call
    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        """The ``ROOT`` process sends block j to process j of the other group."""
        self._scatter("Scatter", sendbuf, recvbuf, root, False, "blocking")

    @mpi_call
    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
        self._scatter("Scatterv", sendbuf, recvbuf, root, True, "blocking")

    @mpi_call
    def Iscatter(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._scatter("Iscatter", sendbuf, recvbuf, root, False, "nonblocking")

    @mpi_call
    def Iscatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0) -> Request:
        return self._scatter("Iscatterv", sendbuf, recvbuf, root, True, "nonblocking")

    @mpi_call
    def scatter(self, sendobj: Sequence[Any] | None = None, root: int = 0) -> Any:
        """Object j of the ``ROOT`` process's sequence goes to process j of the other group."""
        role, uroot = self._role(root, "scatter")
        m = self.Get_remote_size()
        pickles: list[bytes] = []
        if role == "root":
            items = list(sendobj) if sendobj is not None else []
            if len(items) != m:
                raise MPIException(
                    ERR_COUNT, f"scatter: expected {m} objects (the remote size), got {len(items)}"
                )
            pickles = [pickle.dumps(item) for item in items]

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "root":
                sends = [(ro + j, pickles[j]) for j in range(m)]
                return _once(Round("send every object", sends=sends)), None
            if role == "leaf":

                def run() -> Algorithm:
                    (op,) = yield Round("receive from the root", recvs=[(uroot, None)])
                    return pickle.loads(op.data)

                return run(), None
            return _nothing(), None

        result = self._inter("scatter", "scatter", uroot, build)
        return result if role == "leaf" else None

    # -- allgather / alltoall ----------------------------------------------------------
    def _exchange(
        self, call: str, kind: str, sends: list[Any], recvs: list[Any], finish: Any, mode: str
    ) -> Any:
        """Every process sends ``sends[j]`` to and receives ``recvs[j]`` from remote j."""

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            rnd = Round(
                "exchange with the remote group",
                sends=[(ro + j, data) for j, data in enumerate(sends)],
                recvs=[(ro + j, target) for j, target in enumerate(recvs)],
            )
            return _once(rnd), finish

        return self._inter(call, kind, 0, build, mode)

    def _allgather(self, call: str, sendbuf: Any, recvbuf: Any, v: bool, mode: str) -> Any:
        _no_in_place(call, sendbuf, recvbuf)
        m = self.Get_remote_size()
        if v:
            whole, views = _vspec(recvbuf, m, call, writable=True)
            finish = _unpack_after(whole)
        else:
            whole, views, finish = _per_rank(recvbuf, m, call, writable=True)
        block = send_buffer(sendbuf).mem
        kind = "Allgatherv" if v else "Allgather"
        return self._exchange(call, kind, [block] * m, views, finish, mode)

    @mpi_call
    def Allgather(self, sendbuf: Any, recvbuf: Any) -> None:
        """Every process receives one block from each process of the other group."""
        self._allgather("Allgather", sendbuf, recvbuf, False, "blocking")

    @mpi_call
    def Allgatherv(self, sendbuf: Any, recvbuf: Any) -> None:
        self._allgather("Allgatherv", sendbuf, recvbuf, True, "blocking")

    @mpi_call
    def Iallgather(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._allgather("Iallgather", sendbuf, recvbuf, False, "nonblocking")

    @mpi_call
    def Iallgatherv(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._allgather("Iallgatherv", sendbuf, recvbuf, True, "nonblocking")

    @mpi_call
    def allgather(self, sendobj: Any) -> list[Any]:
        """Every process returns the other group's objects in rank order."""
        m = self.Get_remote_size()
        data = pickle.dumps(sendobj)
        ops = self._exchange("allgather", "allgather", [data] * m, [None] * m, _datas, "blocking")
        return [pickle.loads(w) for w in ops]

    def _alltoall(self, call: str, kind: str, sendbuf: Any, recvbuf: Any, mode: str) -> Any:
        _no_in_place(call, sendbuf, recvbuf)
        m = self.Get_remote_size()
        if kind == "Alltoall":
            _, sends, _ = _per_rank(sendbuf, m, call, writable=False)
            _, recvs, finish = _per_rank(recvbuf, m, call, writable=True)
        else:
            whole, recvs = _vspec(recvbuf, m, call, writable=True)
            _, sends = _vspec(sendbuf, m, call, writable=False)
            finish = _unpack_after(whole)
        return self._exchange(call, kind, sends, recvs, finish, mode)

    @mpi_call
    def Alltoall(self, sendbuf: Any, recvbuf: Any) -> None:
        """Block j goes to process j of the other group; block j comes from it."""
        self._alltoall("Alltoall", "Alltoall", sendbuf, recvbuf, "blocking")

    @mpi_call
    def Alltoallv(self, sendbuf: Any, recvbuf: Any) -> None:
        self._alltoall("Alltoallv", "Alltoallv", sendbuf, recvbuf, "blocking")

    @mpi_call
    def Ialltoall(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall("Ialltoall", "Alltoall", sendbuf, recvbuf, "nonblocking")

    @mpi_call
    def Ialltoallv(self, sendbuf: Any, recvbuf: Any) -> Request:
        return self._alltoall("Ialltoallv", "Alltoallv", sendbuf, recvbuf, "nonblocking")

    @mpi_call
    def alltoall(self, sendobj: Sequence[Any]) -> list[Any]:
        m = self.Get_remote_size()
        items = list(sendobj)
        if len(items) != m:
            raise MPIException(
                ERR_COUNT, f"alltoall: expected {m} objects (the remote size), got {len(items)}"
            )
        sends = [pickle.dumps(item) for item in items]
        wires = self._exchange("alltoall", "alltoall", sends, [None] * m, _datas, "blocking")
        return [pickle.loads(w) for w in wires]

    # -- reductions ----------------------------------------------------------------------
    @mpi_call
    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0) -> None:
        """The ``ROOT`` process receives the reduction of the other group's buffers."""
        self._reduce("Reduce", sendbuf, recvbuf, op, root, "blocking")

    @mpi_call
    def Ireduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0) -> Request:
        return self._reduce("Ireduce", sendbuf, recvbuf, op, root, "nonblocking")

    def _reduce(self, call: str, sendbuf: Any, recvbuf: Any, op: Any, root: int, mode: str) -> Any:
        _no_in_place(call, sendbuf, recvbuf)
        role, uroot = self._role(root, call)
        if role == "root":
            out = recv_buffer(recvbuf)
            args = _Reduction(call, recvbuf, None, op, in_place_ok=False, needs_output=False)
            args.out = out
        elif role == "leaf":
            args = _Reduction(call, sendbuf, None, op, in_place_ok=False, needs_output=False)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "idle":
                return _nothing(), None
            if role == "root":
                holder, target = args.values.target(args.source)

                def receive() -> Algorithm:
                    yield Round("receive the result", recvs=[(ro, target)])
                    return holder

                return receive(), args.store
            return self._reduce_to(args.values, args.fresh(), args.op._commutative, uroot)(
                rank, n, lo, ro
            ), None

        return self._inter(call, "Reduce", uroot, build, mode)

    @staticmethod
    def _reduce_to(
        values: Any, value: Any, commutative: bool, dest: int
    ) -> Callable[[int, int, int, int], Algorithm]:
        """Reduce within the local group to its rank 0, which sends to ``dest``."""

        def build(rank: int, n: int, lo: int, ro: int) -> Algorithm:
            result = yield from _shifted(
                red.reduce_binomial(rank, n, 0, values, value, commutative), lo
            )
            if rank == 0:
                yield Round("send the result", sends=[(dest, values.wire(result))])

        return build

    @mpi_call
    def reduce(self, sendobj: Any, op: Any = SUM, root: int = 0) -> Any:
        """Lower-case Reduce: the ``ROOT`` process returns the other group's reduction."""
        role, uroot = self._role(root, "reduce")
        combine = _object_op(op, "reduce")
        values = red.ObjectValues(combine)
        commutative = getattr(combine, "_commutative", False)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            if role == "idle":
                return _nothing(), None
            if role == "root":

                def receive() -> Algorithm:
                    (got,) = yield Round("receive the result", recvs=[(ro, None)])
                    return pickle.loads(got.data)

                return receive(), None
            return self._reduce_to(values, sendobj, commutative, uroot)(rank, n, lo, ro), None

        result = self._inter("reduce", "reduce", uroot, build)
        return result if role == "root" else None

    @mpi_call
    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
        """Each group receives the reduction of the other group's buffers."""
        self._allreduce("Allreduce", sendbuf, recvbuf, op, "blocking")

    @mpi_call
    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> Request:
        return self._allreduce("Iallreduce", sendbuf, recvbuf, op, "nonblocking")

    def _allreduce(self, call: str, sendbuf: Any, recvbuf: Any, op: Any, mode: str) -> Any:
        _no_in_place(call, sendbuf, recvbuf)
        args = _Reduction(call, sendbuf, recvbuf, op, in_place_ok=False, needs_output=True)
        commutative = args.op._commutative

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            values = args.values
            holder, target = values.target(args.source)

            def run() -> Algorithm:
                mine = yield from _shifted(
                    red.reduce_binomial(rank, n, 0, values, args.fresh(), commutative), lo
                )
                if rank == 0:
                    yield Round(
                        "exchange results with the remote leader",
                        sends=[(ro, values.wire(mine))],
                        recvs=[(ro, target)],
                    )
                yield from _shifted(algo.bcast_binomial(rank, n, 0, target), lo)
                return holder

            return run(), args.store

        return self._inter(call, "Allreduce", 0, build, mode)

    @mpi_call
    def allreduce(self, sendobj: Any, op: Any = SUM) -> Any:
        """Lower-case Allreduce: each group returns the other group's reduction."""
        combine = _object_op(op, "allreduce")
        values = red.ObjectValues(combine)
        commutative = getattr(combine, "_commutative", False)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, Any]:
            def run() -> Algorithm:
                mine = yield from _shifted(
                    red.reduce_binomial(rank, n, 0, values, sendobj, commutative), lo
                )
                wire = None
                if rank == 0:
                    (got,) = yield Round(
                        "exchange results with the remote leader",
                        sends=[(ro, values.wire(mine))],
                        recvs=[(ro, None)],
                    )
                    wire = bytes(got.data)
                return (yield from _shifted(algo.bcast_objects(rank, n, 0, wire), lo))

            return run(), None

        return pickle.loads(self._inter("allreduce", "allreduce", 0, build))

    # -- not defined on intercommunicators --------------------------------------------------
    def _undefined(self, call: str) -> Any:
        self._live()
        raise MPIException(ERR_COMM, f"{call}: not defined on an intercommunicator")

    @mpi_call
    def Scan(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
        self._undefined("Scan")

    @mpi_call
    def Exscan(self, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
        self._undefined("Exscan")

    @mpi_call
    def scan(self, sendobj: Any, op: Any = SUM) -> Any:
        return self._undefined("scan")

    @mpi_call
    def exscan(self, sendobj: Any, op: Any = SUM) -> Any:
        return self._undefined("exscan")


def _datas(ops: Any) -> list[Any]:
    """The finishing step of an object exchange: the received pickles."""
    return [op.data for op in ops]
