"""Windows whose ranks span several hosts: one-sided operations served by the target.

A window whose communicator spans hosts cannot map one segment on every rank, nor
read another host's memory, so every operation of such a window, to every target
(same-host ones included, and this rank itself), is applied by the target's engine:
the origin sends an ``RMA`` frame (``core.wire``) and whichever thread of the target
drives its socket applies it: the rank's own thread inside an MPI call, or its
progress thread while the rank computes or idles. A target busy in numpy therefore
never stalls an origin's ``Lock``/``Get``/``Unlock`` (passive target progress).

One path for every target keeps the rules simple and correct: the target applies the
requests one at a time, holding its engine, so accumulates are atomic per element
against every other origin (and against this rank's own accumulates, which take the
engine too), and requests of one origin to one target are applied in the order they
were made (frames between two ranks keep their order), which gives the default
ordering of accumulates.

Requests (``tag`` of the frame) and what the target answers:

* ``PUT`` (target bytes, data), ``ACC`` (the same, an operation and its basic
  datatype): applied; no answer unless the origin waits (``wait``: dynamic windows,
  where only the target knows whether the address is attached), else an error is kept
  for the origin's next ``FLUSH``.
* ``GET``, ``ACC`` with a fetch, ``CAS``: answered with the target's old bytes.
* ``LOCK`` (shared or exclusive): answered once granted; the target's lock manager
  queues requests in arrival order and grants the first ones that fit.
  ``UNLOCK``: releases (answered when the origin has operations to complete).
  ``CANCEL``: the origin gave up waiting for its ``LOCK`` request ``msgid`` (an
  interrupt, a dead target among those of ``Lock_all``): withdrawn if still queued,
  released if already granted, so that nobody waits for a lock nobody holds.

Requests that reach a rank while it is still creating the window (during its last
barrier) are kept until the call has returned, and applied at its next MPI call (or
by its progress thread, once it has left MPI for a moment): the program may still set
its memory's first contents then, as with MPI libraries that progress only inside
calls (``RESUME``, a frame to itself, applies them).
* ``FLUSH``: answered once every earlier request of that origin is applied (they
  came before it), with the first error one of them met.

The target bytes travel as an offset in the window and, for a derived target
datatype, the byte runs the origin computed from it (``core.typemap_copy.runs``).
Payloads are pickled; a payload larger than a frame goes in chunks that the receiver
joins. Puts and accumulates return once the data is on its way (the origin's buffer
is copied), and the calls that complete an epoch (``Fence``, ``Complete``,
``Unlock``, ``Unlock_all``, ``Flush*``, ``Free``) flush the targets written to.

``Allocate_shared`` is refused across hosts (``ERR_RMA_SHARED``, as the standard
allows shared windows only on shared-memory communicators): see ``win``.
"""

from __future__ import annotations

import ctypes
import itertools
import pickle
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from ..core import constants as K
from ..core import wire
from ..core.errors import ERR_OTHER, ERR_RMA_RANGE
from ..core.errors import Exception as MPIException
from ..core.lazynumpy import np
from ..core.typemap_copy import runs
from ..progress.engine import Engine, WaitInfo
from .process import PROCESS
from .win_ops import WinOperations

if TYPE_CHECKING:
    from .win_ops import _Region
    from .winimpl import WinImpl

__all__ = ["Remote"]

PUT, GET, ACC, CAS, LOCK, UNLOCK, FLUSH, REPLY, CANCEL, RESUME = range(1, 11)
_DEFERRED = object()  # a request answered later (a lock not yet granted)
_pack_header = wire.HEADER.pack
_unpack_header = wire.HEADER.unpack_from
_EXTRA = wire.RMA_EXTRA
_HEAD = wire.HEADER_SIZE + _EXTRA.size

# Windows of this process by their communicator's context id (the service looks here).
_WINDOWS: dict[int, Remote] = {}
# Payloads arriving in chunks: (sender, reply?, context, msgid) -> (buffer, bytes so far).
_PARTS: dict[tuple[int, bool, int, int], tuple[bytearray, int]] = {}
_COMBINER = WinOperations()  # its read-combine-write, on memory this rank serves


class _Span:
    """The bytes of this rank's window memory ``mem`` that an origin described: one
    dense run at ``start``, or byte runs ``(offset, length, packed position)``. It
    reads and writes like ``win_ops._Region`` does, so that accumulates combine the
    same way."""

    __slots__ = ("index", "mem", "nbytes", "start")

    def __init__(self, mem: Any, start: int, nbytes: int, spans: Any) -> None:
        self.mem = mem
        self.start = start
        self.nbytes = nbytes
        self.index: Any = None
        if spans is not None:
            off, length, pos = spans
            rel = np.arange(int(length.sum()), dtype=np.int64) - np.repeat(
                np.cumsum(length) - length, length
            )
            self.index = (np.repeat(off + start, length) + rel, np.repeat(pos, length) + rel)

    def direct(self) -> Any:
        if self.index is not None:
            return None
        return self.mem[self.start : self.start + self.nbytes]

    def read(self, out: Any) -> None:
        if self.index is None:
            out[: self.nbytes] = self.mem[self.start : self.start + self.nbytes]
        elif len(self.index[0]):
            out[self.index[1]] = self.mem[self.index[0]]

    def write(self, packed: Any) -> None:
        if self.index is None:
            self.mem[self.start : self.start + self.nbytes] = packed[: self.nbytes]
        elif len(self.index[0]):
            self.mem[self.index[0]] = packed[self.index[1]]


class _LockManager:
    """The lock of one target of one window: holders, and requests in arrival order."""

    __slots__ = ("exclusive", "queue", "shared")

    def __init__(self) -> None:
        self.exclusive = False
        self.shared = 0
        self.queue: deque[tuple[bool, Callable[[], None], Any]] = deque()

    def _fits(self, exclusive: bool) -> bool:
        return not self.exclusive and not (exclusive and self.shared)

    def request(self, exclusive: bool, grant: Callable[[], None], key: Any = None) -> bool:
        """Take the lock now (True) or queue ``grant`` for when it is free."""
        if not self.queue and self._fits(exclusive):
            self._take(exclusive)
            return True
        self.queue.append((exclusive, grant, key))
        return False

    def cancel(self, key: Any) -> None:
        """Withdraw the request ``key`` if it still waits, else release it (granted)."""
        for entry in self.queue:
            if entry[2] == key:
                self.queue.remove(entry)
                self.release(0)  # a request that waited may fit now
                return
        self.release()

    def _take(self, exclusive: bool) -> None:
        if exclusive:
            self.exclusive = True
        else:
            self.shared += 1

    def release(self, holders: int = 1) -> None:
        """One holder lets go (none: only grant what fits now)."""
        if not holders:
            pass
        elif self.exclusive:
            self.exclusive = False
        elif self.shared:
            self.shared -= 1
        while self.queue and self._fits(self.queue[0][0]):
            exclusive, grant, _ = self.queue.popleft()
            self._take(exclusive)
            grant()


class Remote:
    """One rank's side of a window that spans hosts: its requests as origin, and the
    service of the others' requests to its memory (see the module docstring)."""

    def __init__(self, impl: WinImpl) -> None:
        self.impl = impl
        self.engine: Engine | None = None
        self.context = 0
        self.wranks: list[int] = []
        self.mem: Any = None  # this rank's window memory (uint8), None for dynamic
        self.ids = itertools.count(1)
        self.replies: dict[int, Any] = {}  # msgid -> answer that came
        self.dirty: set[int] = set()  # targets with puts/accumulates not flushed yet
        self.errors: dict[int, tuple[int, str]] = {}  # origin -> first error of its puts
        self.manager = _LockManager()
        self.ready = False  # the window's creation has returned here
        self.held: list[tuple[int, int, Any, int, bool]] = []  # requests kept till then

    # -- life -------------------------------------------------------------------------
    def open(self) -> None:
        """Start serving (collective over the window, after its memory is known)."""
        impl = self.impl
        comm = impl.comm._live()
        self.engine = PROCESS.live_engine("Win")
        self.context = comm.context
        self.wranks = [int(w) for w in comm.world_ranks]
        own = impl.targets[impl.rank]
        if impl.flavor != K.WIN_FLAVOR_DYNAMIC:
            self.mem = own.array if own.array is not None else np.zeros(0, np.uint8)
        for target in impl.targets:
            target.array = None  # every target is reached through its engine
        self.engine.services[wire.RMA] = _serve_frame
        _WINDOWS[self.context] = self
        impl.comm.Barrier()  # every rank serves before any origin sends
        self.ready = True
        if self.held:  # requests that came during the barrier: after this call
            resume = memoryview(pickle.dumps(None))
            _send_blob(self.engine, self.engine.rank, (RESUME, self.context, impl.rank, 0), resume)

    def close(self) -> None:
        """Stop serving (after the window's last barrier)."""
        _WINDOWS.pop(self.context, None)

    # -- as origin --------------------------------------------------------------------
    def _send(self, target: int, code: int, msgid: int, payload: Any) -> None:
        engine = self.engine
        assert engine is not None and engine.transport is not None
        blob = memoryview(pickle.dumps(payload, protocol=5))
        header = (code, self.context, self.impl.rank, msgid)
        _send_blob(engine, self.wranks[target], header, blob)

    def request(self, target: int, code: int, payload: Any, wait: bool, call: str) -> Any:
        """Send request ``code`` to ``target`` (applied here for this rank itself); with
        ``wait``, the answer (``MPIException`` for an error)."""
        engine = self.engine
        assert engine is not None
        msgid = next(self.ids)
        engine.enter()
        try:
            # Serve what others asked of this rank first: a rank busy with its own
            # memory (calls that wait for nobody) still answers them.
            engine.poll_once(False)
            if target == self.impl.rank:
                answer = self.serve(target, code, payload, msgid, wait)
                if answer is not _DEFERRED and wait:
                    self.replies[msgid] = answer
            else:
                self._send(target, code, msgid, (wait, payload))
            if not wait:
                if code in (PUT, ACC) and target != self.impl.rank:  # (here: applied)
                    self.dirty.add(target)
                return None
            self._await([msgid], [target], call)
        finally:
            engine.leave()
        return _unwrap(self.replies.pop(msgid), call)

    def _await(self, msgids: list[int], targets: list[int], call: str) -> None:
        """Drive progress until every answer of ``msgids`` came (caller holds the
        engine); a target that died is reported rather than waited for."""
        engine = self.engine
        assert engine is not None
        replies, wranks = self.replies, [self.wranks[t] for t in targets]
        name = self.impl.comm._live().name
        peer = targets[0] if len(targets) == 1 else -1

        def ready() -> bool:
            if all(m in replies for m in msgids):
                return True
            return any(w in engine.dead_peers for w in wranks)

        def info() -> WaitInfo:
            return WaitInfo(f"Win.{call}", name, peer, None)  # type: ignore[arg-type]

        engine.wait_until(ready, info)
        for msgid, wrank in zip(msgids, wranks):
            if msgid not in replies:
                raise MPIException(ERR_OTHER, f"{call}: {engine.dead_peers[wrank]}")

    def many(self, targets: list[int], code: int, payload: Any, call: str) -> None:
        """Send ``code`` to every target of ``targets`` at once, then wait for them all."""
        if not targets:
            return
        engine = self.engine
        assert engine is not None
        msgids = []
        engine.enter()
        try:
            for target in targets:
                msgid = next(self.ids)
                msgids.append(msgid)
                if target == self.impl.rank:
                    answer = self.serve(target, code, payload, msgid, True)
                    if answer is not _DEFERRED:
                        self.replies[msgid] = answer
                else:
                    self._send(target, code, msgid, (True, payload))
            try:
                self._await(msgids, targets, call)
            except BaseException:
                if code == LOCK:
                    self._withdraw(targets, msgids)
                raise
        finally:
            engine.leave()
        answers = [self.replies.pop(m) for m in msgids]
        if code == FLUSH:  # the targets applied what came before, and said how it went
            self.dirty.difference_update(targets)
        for answer in answers:
            _unwrap(answer, call)

    def _withdraw(self, targets: list[int], msgids: list[int]) -> None:
        """Give up lock requests ``msgids`` (caller holds the engine): those granted are
        released, the others withdrawn (``CANCEL``)."""
        for target, msgid in zip(targets, msgids):
            if self.wranks[target] in self.engine.dead_peers:  # type: ignore[union-attr]
                continue
            if msgid in self.replies:  # granted
                self.replies.pop(msgid)
                code = UNLOCK
            else:
                code = CANCEL
            if target == self.impl.rank:
                self.serve(target, code, msgid, msgid, False)
            else:
                self._send(target, code, next(self.ids), (False, msgid))

    # -- the calls of win_ops and win_sync --------------------------------------------
    @staticmethod
    def _where(region: _Region) -> tuple[int, int, Any]:
        """Where ``region`` is in its target's memory: start byte, size, byte runs."""
        layout = region.layout
        if layout.raw:
            return region.offset + layout.lb, region.nbytes, None
        return region.offset, region.nbytes, runs(layout, region.count)

    def _waits(self) -> bool:
        return self.impl.flavor == K.WIN_FLAVOR_DYNAMIC

    def put(self, region: _Region, packed: Any, call: str) -> None:
        if not region.nbytes:
            return
        data = bytes(packed[: region.nbytes])
        self.request(region.target.rank, PUT, (self._where(region), data), self._waits(), call)

    def get(self, region: _Region, out: Any, call: str) -> None:
        if not region.nbytes:
            return
        data = self.request(region.target.rank, GET, self._where(region), True, call)
        out[: region.nbytes] = np.frombuffer(data, np.uint8)

    def combine(
        self, region: _Region, basic: Any, op: Any, origin: Any, fetch: Any, call: str
    ) -> None:
        """An accumulate applied atomically by the target; ``fetch`` gets the old bytes."""
        if not region.nbytes:
            return
        data = bytes(origin[: region.nbytes])
        wait = fetch is not None or self._waits()
        payload = (self._where(region), data, op, basic, fetch is not None)
        old = self.request(region.target.rank, ACC, payload, wait, call)
        if fetch is not None:
            fetch[: region.nbytes] = np.frombuffer(old, np.uint8)

    def compare_and_swap(
        self, region: _Region, compare: Any, origin: Any, fetch: Any, call: str
    ) -> None:
        n = region.nbytes
        payload = (self._where(region), bytes(compare[:n]), bytes(origin[:n]))
        old = self.request(region.target.rank, CAS, payload, True, call)
        fetch[:n] = np.frombuffer(old, np.uint8)

    def lock(self, targets: list[int], exclusive: bool, call: str) -> None:
        self.many(targets, LOCK, exclusive, call)

    def unlock(self, target: int, call: str) -> None:
        """Release ``target``'s lock, once this rank's operations on it are complete."""
        if target in self.dirty:
            self.dirty.discard(target)
            self.request(target, UNLOCK, None, True, call)
        else:
            self.request(target, UNLOCK, None, False, call)

    def flush(self, targets: Any, call: str) -> None:
        """Complete this rank's operations on ``targets`` at the targets."""
        self.many(sorted(t for t in targets if t in self.dirty), FLUSH, None, call)

    def flush_all(self, call: str) -> None:
        self.flush(list(self.dirty), call)

    # -- as target --------------------------------------------------------------------
    def _memory(self, start: int, nbytes: int, spans: Any) -> _Span:
        """The bytes a request names in this rank's memory (``ERR_RMA_RANGE`` outside)."""
        if self.mem is not None:
            return _Span(self.mem, start, nbytes, spans)
        low, high = start, start + nbytes
        if spans is not None and len(spans[0]):
            off, length, _ = spans
            low, high = start + int(off.min()), start + int((off + length).max())
        for begin, size, _ in self.impl.attached:
            if begin <= low and high <= begin + size:
                region = (ctypes.c_uint8 * size).from_address(begin)
                memory = np.frombuffer(memoryview(region).cast("B"), np.uint8)
                return _Span(memory, start - begin, nbytes, spans)
        raise MPIException(
            ERR_RMA_RANGE, f"address {low:#x} is not in a region rank {self.impl.rank} attached"
        )

    def serve(self, origin: int, code: int, payload: Any, msgid: int, wait: bool) -> Any:
        """Apply one request of rank ``origin`` (the caller holds the engine); the
        answer, ``_DEFERRED`` for one sent later, None for none."""
        try:
            if code == PUT:
                (start, nbytes, spans), data = payload
                self._memory(start, nbytes, spans).write(np.frombuffer(data, np.uint8))
                return None
            if code == GET:
                span = self._memory(*payload)
                out = np.empty(span.nbytes, np.uint8)
                span.read(out)
                return out.tobytes()
            if code == ACC:
                (start, nbytes, spans), data, op, basic, fetch = payload
                span = self._memory(start, nbytes, spans)
                old = np.empty(nbytes, np.uint8) if fetch else None
                origin_bytes = np.frombuffer(data, np.uint8)
                _COMBINER._combine(span, basic, op, origin_bytes, old)  # type: ignore[arg-type]
                return None if old is None else old.tobytes()
            if code == CAS:
                (start, nbytes, spans), compare, data = payload
                span = self._memory(start, nbytes, spans)
                old = np.empty(nbytes, np.uint8)
                span.read(old)
                if old.tobytes() == compare:
                    span.write(np.frombuffer(data, np.uint8))
                return old.tobytes()
            if code == LOCK:
                grant = lambda: self._answer(origin, msgid, None)  # noqa: E731
                if self.manager.request(bool(payload), grant, (origin, msgid)):
                    return None
                return _DEFERRED
            if code == CANCEL:  # payload: the msgid of the origin's lock request
                self.manager.cancel((origin, payload))
                return None
            if code == UNLOCK:
                self.manager.release()
            if code in (FLUSH, UNLOCK):
                if not wait:
                    return None
                error = self.errors.pop(origin, None)
                if error is not None:
                    return ("error", *error)
                return None
        except Exception as exc:  # the origin's error, not this rank's: never fatal here
            if isinstance(exc, MPIException):  # its own words (the origin adds the class's)
                error = (exc.Get_error_class(), exc._message or "")
            else:
                error = (ERR_OTHER, f"rank {self.impl.rank} failed: {type(exc).__name__}: {exc}")
            if not wait:  # nobody waits for this one: its origin's next flush says it
                self.errors.setdefault(origin, error)
                return None
            return ("error", *error)
        raise MPIException(ERR_OTHER, f"unknown one-sided request {code} from rank {origin}")

    def apply(self, origin: int, code: int, body: Any, msgid: int, wait: bool) -> None:
        """Serve a request that came in a frame, and answer it (caller holds the engine)."""
        answer = self.serve(origin, code, body, msgid, wait)
        if wait and answer is not _DEFERRED:
            self._answer(origin, msgid, answer)

    def _answer(self, origin: int, msgid: int, answer: Any) -> None:
        """Send ``answer`` to request ``msgid`` of ``origin`` (caller holds the engine)."""
        if origin == self.impl.rank:
            self.replies[msgid] = answer
            return
        blob = memoryview(pickle.dumps(answer, protocol=5))
        assert self.engine is not None
        _send_blob(
            self.engine, self.wranks[origin], (REPLY, self.context, self.impl.rank, msgid), blob
        )


def _unwrap(answer: Any, call: str) -> Any:
    if type(answer) is tuple and len(answer) == 3 and answer[0] == "error":
        _, error_class, text = answer
        raise MPIException(error_class, f"{call}: {text}")
    return answer


def _send_blob(engine: Engine, wdest: int, header: tuple[int, int, int, int], blob: Any) -> None:
    """Send a pickled payload as ``RMA`` frames, in chunks when it does not fit one."""
    code, context, source, msgid = header
    me, pid, total = engine.rank, engine.pid, blob.nbytes
    extra = _EXTRA.pack(total)

    def header_at(offset: int) -> bytes:
        return _pack_header(wire.RMA, 0, 0, context, source, code, me, pid, msgid, offset) + extra

    assert engine.transport is not None
    engine.transport.send_chunked(wdest, header_at, blob)


def _serve_frame(frame: bytes, data: memoryview | None) -> None:
    """The engine's service for ``RMA`` frames (the caller holds the engine)."""
    _, _, _, context, source, code, wsource, _, msgid, offset = _unpack_header(frame)
    (total,) = _EXTRA.unpack_from(frame, wire.HEADER_SIZE)
    chunk = memoryview(frame)[_HEAD:] if data is None else data
    reply = code == REPLY
    if offset or chunk.nbytes < total:  # a payload in chunks: join them
        key = (wsource, reply, context, msgid)
        buf, got = _PARTS.get(key) or (bytearray(total), 0)
        buf[offset : offset + chunk.nbytes] = chunk
        got += chunk.nbytes
        if got < total:
            _PARTS[key] = (buf, got)
            return
        _PARTS.pop(key, None)
        chunk = memoryview(buf)
    window = _WINDOWS.get(context)
    if window is None:  # a window already freed here (a late unlock): nothing to do
        return
    payload = pickle.loads(chunk)
    if reply:
        window.replies[msgid] = payload
        return
    if code == RESUME:
        held, window.held = window.held, []
        for request in held:
            window.apply(*request)
        return
    wait, body = payload
    if window.held or not window.ready:  # keep the order of the requests kept
        window.held.append((source, code, body, msgid, wait))
        return
    window.apply(source, code, body, msgid, wait)
