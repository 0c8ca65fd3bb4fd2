"""A session's engines, seen from the controller: start, run, observe, stop.

A :class:`Cluster` owns one private session directory, one engine-protocol
ROUTER (``ipc://<dir>/engines``, signed messages, see
:mod:`ipympi.engine.protocol`) and one supervisor process
(:mod:`ipympi.engine.supervisor`, driven through
:mod:`ipympi.controller.supervisor`) that forks the engines. Each *world*
(a set of N engines that form one ``COMM_WORLD``) gets its own directory
``<dir>/w<gen>`` holding the ranks' data sockets and the MPI control ROUTER
(``ipc://<dir>/w<gen>/ctl``, see :mod:`ipympi._control`) through which ranks
say hello, abort, and answer state queries even while blocked in MPI.

Everything happens in the calling thread: :meth:`Cluster.pump` polls the two
ROUTERs and the supervisor's event pipe until a condition holds or a
deadline passes, so every wait is bounded and interruptible (Ctrl-C in the
controller interrupts the running ranks, see :meth:`Cluster.wait`).
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import shutil
import signal
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import zmq

from .. import _control as ctl
from .._launcher import _make_session_dir, rank_environment
from ..engine.protocol import Message, ProtocolError, Signer
from .api import ClusterAPI
from .supervisor import SupervisorProcess
from .watch import with_cpu

__all__ = [
    "DEFAULT_NP",
    "Cluster",
    "ClusterError",
    "EngineRecord",
    "Request",
]

DEFAULT_NP = 4
START_TIMEOUT = 60.0  # seconds for a world to say hello (a loaded CI machine is slow)
INTERRUPT_GRACE = 5.0  # seconds interrupted ranks get to reply before they are reported
STOP_GRACE = 3.0  # seconds between the steps of stopping a world
QUERY_TIMEOUT = 1.0
_OUTPUT_TYPES = frozenset(
    {"stream", "display_data", "update_display_data", "clear_output", "execute_result", "error"}
)

Output = Callable[[list[tuple[int, str, dict[str, Any]]]], None]


class ClusterError(RuntimeError):
    """The session cannot do what was asked (no engines, a world that did not start, ...)."""


@dataclass
class EngineRecord:
    """What the controller knows about one rank's engine process."""

    rank: int
    pid: int | None = None
    host: str = ""
    ready: bool = False
    returncode: int | None = None  # Popen style, once the engine has exited
    state: dict[str, Any] = field(default_factory=dict)  # the last MPI state answer

    @property
    def alive(self) -> bool:
        return self.pid is not None and self.returncode is None


@dataclass
class Request:
    """One request sent to some ranks, and everything they said about it."""

    id: str
    kind: str
    targets: list[int]
    replies: dict[int, Message] = field(default_factory=dict)
    messages: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    on_output: Output | None = None
    interrupted: bool = False
    started: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> bool:
        return all(rank in self.replies for rank in self.targets)

    @property
    def pending(self) -> list[int]:
        return [rank for rank in self.targets if rank not in self.replies]

    def errors(self) -> dict[int, dict[str, Any]]:
        """The error content per failed rank (from the ``error`` message, else the reply)."""
        found: dict[int, dict[str, Any]] = {}
        for rank, kind, content in self.messages:
            if kind == "error" and rank not in found:
                found[rank] = content
        for rank, reply in self.replies.items():
            if reply.content.get("status") != "ok" and rank not in found:
                found[rank] = {
                    "ename": reply.content.get("ename", "Error"),
                    "evalue": reply.content.get("evalue", ""),
                    "traceback": reply.content.get("traceback", []),
                }
            if rank in found and reply.content.get("where"):
                found[rank].setdefault("where", reply.content["where"])
        return found


class Cluster(ClusterAPI):
    """N engines (ranks) for one notebook session."""

    def __init__(self, n: int = DEFAULT_NP, *, env: Mapping[str, str] | None = None) -> None:
        if n < 1:
            raise ValueError(f"a session needs at least one rank, not {n}")
        self.n = n
        self.env = dict(os.environ if env is None else env)
        self.session_dir = _make_session_dir()
        self.key = secrets.token_bytes(32)
        self.signer = Signer(self.key)
        self.gen = 0
        self.engines: list[EngineRecord] = []
        self.requests: dict[str, Request] = {}
        self.dropped = 0  # engine messages dropped for a bad signature
        self.aborted: dict[str, Any] | None = None  # the abort message that ended the world
        self.ended: str | None = None  # why the controller ended the world
        self.on_error = "interrupt"  # what to do with a stuck cell: see watch.ON_ERROR
        self.stopped = False  # True after stop(), until the next start()
        self._stopping = False  # engines exit on purpose: no peer_exit notices
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        self._router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._router.bind(f"ipc://{self.session_dir}/engines")
        self._ctl: zmq.Socket[bytes] | None = None
        self._mpi_key = b""  # signs the current world's control messages
        self._world_dir: str | None = None
        self._supervisor: SupervisorProcess | None = None
        self._poller = zmq.Poller()
        self._poller.register(self._router, zmq.POLLIN)
        self._closed = False

    # -- life cycle ------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return any(engine.alive for engine in self.engines)

    def start(self, n: int | None = None, *, wait: bool = True) -> None:
        """Start a world of ``n`` ranks (default: the last size); wait until all are ready."""
        if self._closed:
            raise ClusterError("this session was shut down")
        if self.running:
            raise ClusterError(
                f"{self.n} engines are already running: %mpi restart to replace them"
            )
        if n is not None:
            if n < 1:
                raise ValueError(f"a session needs at least one rank, not {n}")
            self.n = n
        self._close_world()  # what is left of a world whose engines all died
        self._start_supervisor()
        self.gen += 1
        self.aborted = None
        self.ended = None
        self.stopped = False
        self._world_dir = os.path.join(self.session_dir, f"w{self.gen}")
        os.mkdir(self._world_dir, 0o700)
        self._ctl = self._ctx.socket(zmq.ROUTER)
        self._ctl.setsockopt(zmq.LINGER, 0)
        self._ctl.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._ctl.bind(ctl.control_address(self._world_dir))
        self._poller.register(self._ctl, zmq.POLLIN)
        self.engines = [EngineRecord(rank) for rank in range(self.n)]
        self._mpi_key = secrets.token_bytes(16)
        envs = {
            str(rank): {
                k: v
                for k, v in rank_environment(
                    {}, rank, self.n, self._world_dir, self._mpi_key.hex(), os.cpu_count()
                ).items()
            }
            for rank in range(self.n)
        }
        assert self._supervisor is not None
        self._supervisor.command(
            {
                "type": "spawn",
                "ranks": list(range(self.n)),
                "address": f"ipc://{self.session_dir}/engines",
                "gen": self.gen,
                "key": self.key.hex(),
                "env": envs,
            }
        )
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Wait until every engine of the current world has said hello."""
        ok = self.pump(time.monotonic() + timeout, self._world_settled)
        dead = [e for e in self.engines if e.returncode is not None]
        if dead or not ok:
            problems = [
                f"rank {e.rank} {ctl.describe_exit(e.returncode)}" for e in dead if e.returncode
            ] or [f"no hello from rank(s) {[e.rank for e in self.engines if not e.ready]}"]
            self._kill_world()
            raise ClusterError("the engines did not start: " + "; ".join(problems))

    def _world_settled(self) -> bool:
        return all(e.ready or e.returncode is not None for e in self.engines)

    @property
    def ready(self) -> bool:
        return bool(self.engines) and all(e.ready and e.alive for e in self.engines)

    def stop(self, grace: float = STOP_GRACE) -> None:
        """End the world: ask every engine to finalize and exit, then TERM, then KILL."""
        alive = [e for e in self.engines if e.alive]
        self._stopping = True
        broken = any(e.returncode is not None for e in self.engines)
        if alive:
            # A world with a dead rank cannot finalize (its barrier would wait
            # for the dead one): it gets SIGTERM at once.
            if all(e.ready for e in alive) and not self._busy() and not broken:
                req = self.submit("shutdown", {}, [e.rank for e in alive])
                self.pump(time.monotonic() + grace, lambda: not self.running)
                self.requests.pop(req.id, None)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if not self.running:
                    break
                self.signal([e.rank for e in self.engines if e.alive], sig)
                self.pump(time.monotonic() + grace, lambda: not self.running)
        for req in self.requests.values():
            self._fail_pending(req, "EngineStopped", "the engines were stopped")
        self.requests.clear()
        self._close_world()
        self.stopped = True
        self._stopping = False

    def restart(self, n: int | None = None) -> None:
        self.stop()
        self.start(n)

    def close(self) -> None:
        """Stop the engines and the supervisor; remove the session directory."""
        if self._closed:
            return
        try:
            self.stop()
        finally:
            self._closed = True
            if self._supervisor is not None:
                self._supervisor.stop(STOP_GRACE)
                self._supervisor = None
            self._router.close(0)
            self._ctx.term()
            shutil.rmtree(self.session_dir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _kill_world(self) -> None:
        self.signal([e.rank for e in self.engines if e.alive], signal.SIGKILL)
        self.pump(time.monotonic() + STOP_GRACE, lambda: not self.running)
        self._close_world()

    def _close_world(self) -> None:
        if self._ctl is not None:
            self._poller.unregister(self._ctl)
            self._ctl.close(0)
            self._ctl = None
        if self._world_dir is not None:
            shutil.rmtree(self._world_dir, ignore_errors=True)
            self._world_dir = None

    # -- the supervisor ----------------------------------------------------------------
    def _start_supervisor(self) -> None:
        """Start a supervisor unless one is running, and watch its event pipe."""
        if self._supervisor is not None and self._supervisor.alive:
            return
        if self._supervisor is not None:
            self._poller.unregister(self._supervisor.fd)
        self._supervisor = SupervisorProcess(self.env, self.n)
        self._poller.register(self._supervisor.fd, zmq.POLLIN)

    def _read_supervisor(self) -> None:
        """Record the engines' pids and exits; a dead supervisor killed every engine."""
        sup = self._supervisor
        assert sup is not None
        events = sup.read()
        if events is None:  # the supervisor died: so did its engines (PDEATHSIG)
            self._poller.unregister(sup.fd)
            for engine in self.engines:
                if engine.returncode is None and engine.pid is not None:
                    self._on_exit(engine.rank, -int(signal.SIGKILL))
            self._supervisor = None
            return
        for event in events:
            kind = event.get("type")
            rank = event.get("rank")
            if kind == "spawned" and rank is not None and rank < len(self.engines):
                self.engines[rank].pid = int(event["pid"])
            elif (
                kind == "exited"
                and rank is not None
                and rank < len(self.engines)
                and self.engines[rank].pid == event.get("pid")
            ):
                self._on_exit(rank, int(event["returncode"]))

    def _on_exit(self, rank: int, returncode: int) -> None:
        engine = self.engines[rank]
        engine.returncode = returncode
        if not self._stopping and self.aborted is None and not self.ended:
            self._tell_peers(rank, ctl.describe_exit(returncode) if returncode else "exited")
        for req in self.requests.values():
            if rank in req.targets and rank not in req.replies:
                if self.aborted is not None:
                    # The same words for every rank: the cell's error shows them once.
                    self._synthesize_reply(req, rank, "MPIAbort", self.world_ended())
                    continue
                what = ctl.describe_exit(returncode) if returncode else "exited"
                self._synthesize_reply(req, rank, "EngineDied", f"rank {rank} {what}")

    def _tell_peers(self, rank: int, reason: str) -> None:
        """Tell every live rank that ``rank`` died: what waits on it fails at once."""
        if self._ctl is None:
            return
        frame = ctl.encode({"type": ctl.PEER_EXIT, "rank": rank, "reason": reason}, self._mpi_key)
        for engine in self.engines:
            if engine.alive and engine.rank != rank:
                with contextlib.suppress(zmq.ZMQError):
                    self._ctl.send_multipart([ctl.identity(engine.rank), frame], zmq.NOBLOCK)

    def world_ended(self) -> str:
        """Why the current world is over (an abort, or dead ranks), in one line."""
        if self.aborted is not None:
            return f"{ctl.format_abort(self.aborted)}; every rank of the world was ended"
        if self.ended:
            return self.ended
        dead = [e for e in self.engines if e.returncode is not None]
        return "; ".join(f"rank {e.rank} {ctl.describe_exit(e.returncode or 0)}" for e in dead)

    # -- requests --------------------------------------------------------------------
    def submit(
        self,
        kind: str,
        content: dict[str, Any],
        targets: Iterable[int],
        buffers: Sequence[bytes] = (),
        on_output: Output | None = None,
    ) -> Request:
        """Send one request to ``targets``; its replies and output collect in the Request."""
        msg = Message(kind, content, buffers=tuple(buffers))
        req = Request(msg.id, kind, sorted(set(targets)), on_output=on_output)
        frames = self.signer.encode(msg)
        self.requests[req.id] = req
        for rank in req.targets:
            engine = self.engines[rank] if rank < len(self.engines) else None
            if engine is None or not engine.alive or not engine.ready:
                self._synthesize_reply(req, rank, "EngineDied", f"rank {rank} is not running")
                continue
            try:
                self._router.send_multipart([b"in%d.%d" % (self.gen, rank), *frames])
            except zmq.ZMQError as exc:
                self._synthesize_reply(req, rank, "EngineDied", f"rank {rank}: {exc}")
        return req

    def _synthesize_reply(self, req: Request, rank: int, ename: str, evalue: str) -> None:
        content = {"status": "error", "ename": ename, "evalue": evalue, "traceback": []}
        req.messages.append((rank, "error", content))
        if req.on_output is not None:
            req.on_output([(rank, "error", content)])
        req.replies[rank] = Message("reply", content, req.id)

    def _fail_pending(self, req: Request, ename: str, evalue: str) -> None:
        for rank in req.pending:
            self._synthesize_reply(req, rank, ename, evalue)

    def _busy(self) -> bool:
        return any(not req.done for req in self.requests.values())

    def wait(self, req: Request, timeout: float | None = None) -> bool:
        """Pump until ``req`` is done; False when ``timeout`` passes first.

        KeyboardInterrupt (the notebook's interrupt) is passed on to the ranks
        still running ``req``; they get ``INTERRUPT_GRACE`` seconds to reply,
        after which they are reported as not responding. The interrupt is then
        re-raised only if the ranks did not answer.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            return self.pump(deadline, lambda: req.done)
        except KeyboardInterrupt:
            self.interrupt(req)
            return True

    def interrupt(self, req: Request, resynchronize: bool = True) -> None:
        """Interrupt the ranks still running ``req``, collect their replies, realign them.

        A second Ctrl-C while waiting stops waiting: the silent ranks are
        reported as not responding.
        """
        req.interrupted = True
        self.signal(req.pending, signal.SIGINT)
        self._pump_through_interrupts(time.monotonic() + INTERRUPT_GRACE, lambda: req.done)
        for rank in req.pending:
            self._synthesize_reply(
                req, rank, "KeyboardInterrupt", f"rank {rank} did not respond to the interrupt"
            )
        if resynchronize:
            self.resynchronize()

    def _pump_through_interrupts(self, deadline: float, done: Callable[[], bool]) -> bool:
        """``pump``, where a Ctrl-C (the user asking to interrupt) does not cut the wait."""
        while True:
            try:
                return self.pump(deadline, done)
            except KeyboardInterrupt:
                continue

    def end_world(self, reason: str) -> None:
        """Kill every engine of the world now; the next cell starts a fresh one."""
        self.ended = reason
        self.signal([e.rank for e in self.engines if e.alive], signal.SIGKILL)
        with contextlib.suppress(KeyboardInterrupt):
            self.pump(time.monotonic() + STOP_GRACE, lambda: not self.running)

    def resynchronize(self, timeout: float = INTERRUPT_GRACE) -> bool:
        """Realign the ranks' collectives after an interrupt; False if a rank did not answer.

        Interrupted ranks may have stopped in different collectives (rank 0 in
        its 3rd, rank 1 in its 4th): every rank abandons what it was in, then
        all continue from the largest sequence number any rank reached, so the
        next cell's collectives match again.
        """
        ranks = [e.rank for e in self.engines if e.alive and e.ready]
        first = self.submit("recover", {}, ranks)
        ok = self._pump_through_interrupts(time.monotonic() + timeout, lambda: first.done)
        self.forget(first)
        bases: dict[str, int] = {}
        for reply in first.replies.values():
            for context, position in reply.content.get("positions", {}).items():
                bases[context] = max(bases.get(context, 0), int(position))
        second = self.submit("recover", {"bases": bases}, ranks)
        ok = self._pump_through_interrupts(time.monotonic() + timeout, lambda: second.done) and ok
        self.forget(second)
        return ok

    def signal(self, ranks: Iterable[int], sig: int) -> None:
        """Send ``sig`` to each rank's engine and its children (its process group)."""
        for rank in ranks:
            pid = self.engines[rank].pid
            if pid is not None and self.engines[rank].returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, sig)

    def forget(self, req: Request) -> None:
        self.requests.pop(req.id, None)

    # -- the event loop ----------------------------------------------------------------
    def pump(self, deadline: float | None, done: Callable[[], bool]) -> bool:
        """Handle events until ``done()`` (True) or ``deadline`` passes (False)."""
        while True:
            if done():
                return True
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return False
            ms = -1 if wait is None else max(1, math.ceil(wait * 1000))
            events = dict(self._poller.poll(ms))
            if self._router in events:
                self._read_engines()
            if self._ctl is not None and self._ctl in events:
                self._read_control()
            if self._supervisor is not None and self._supervisor.fd in events:
                self._read_supervisor()

    def _read_engines(self) -> None:
        batches: dict[str, list[tuple[int, str, dict[str, Any]]]] = {}
        for _ in range(10000):
            try:
                frames = self._router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            ident, frames = frames[0], frames[1:]
            try:
                msg = self.signer.decode(frames)
                rank = _rank_of(ident, self.gen)
            except ProtocolError:
                self.dropped += 1
                continue
            if rank is None or rank >= len(self.engines):
                continue  # a message from an engine of an earlier world
            if msg.type == "hello":
                engine = self.engines[rank]
                engine.ready = True
                engine.pid = int(msg.content.get("pid", engine.pid or 0)) or engine.pid
                engine.host = str(msg.content.get("host", ""))
                continue
            req = self.requests.get(msg.parent or "")
            if req is None:
                continue
            if msg.type == "reply":
                self._flush_batch(req, batches.pop(req.id, []))
                req.replies[rank] = msg
            elif msg.type in _OUTPUT_TYPES:
                item = (rank, msg.type, msg.content)
                req.messages.append(item)
                batches.setdefault(req.id, []).append(item)
        for req_id, batch in batches.items():
            req = self.requests.get(req_id)
            if req is not None:
                self._flush_batch(req, batch)

    @staticmethod
    def _flush_batch(req: Request, batch: list[tuple[int, str, dict[str, Any]]]) -> None:
        if batch and req.on_output is not None:
            req.on_output(batch)

    def _read_control(self) -> None:
        assert self._ctl is not None
        while True:
            try:
                ident, data = self._ctl.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except ValueError:
                continue
            try:
                rank = ctl.rank_of(ident)
                msg = ctl.decode(data, self._mpi_key)
            except ctl.ControlProtocolError:
                continue
            if not 0 <= rank < len(self.engines):
                continue
            if msg["type"] == ctl.STATE:
                self.engines[rank].state = msg
            elif msg["type"] == ctl.ABORT and self.aborted is None:
                self.aborted = msg
                self.signal([e.rank for e in self.engines], signal.SIGKILL)

    # -- observation -------------------------------------------------------------------
    def query_states(self, timeout: float = QUERY_TIMEOUT, wait: bool = True) -> list[dict]:
        """Ask every live rank what it is doing; one state dict per rank, in rank order."""
        asked = []
        for engine in self.engines:
            engine.state = {}
            if engine.alive and self._ctl is not None:
                try:
                    self._ctl.send_multipart(
                        [ctl.identity(engine.rank), ctl.encode({"type": ctl.QUERY}, self._mpi_key)],
                        zmq.NOBLOCK,
                    )
                    asked.append(engine)
                except zmq.ZMQError:
                    pass
        if wait:
            self.pump(time.monotonic() + timeout, lambda: all(e.state for e in asked))
        return [self.state_of(engine) for engine in self.engines]

    def state_of(self, engine: EngineRecord) -> dict[str, Any]:
        """The rank's last state answer, with the CPU time its process has used."""
        if engine.returncode is not None:
            return ctl.launcher_state(engine.rank, engine.pid, engine.returncode)
        if engine.state:
            return with_cpu(engine.state, engine.pid)
        return ctl.launcher_state(engine.rank, engine.pid, None)

    def status(self) -> list[dict[str, Any]]:
        """One row per rank: rank, pid, host, state, call (what it waits for), memory."""
        rows = []
        for engine, state in zip(self.engines, self.query_states()):
            call = ctl.format_call(state) if state.get("state") == "blocked" else ""
            memory = state.get("rss") or _rss_bytes(engine.pid) if engine.alive else None
            rows.append(
                {
                    "rank": engine.rank,
                    "pid": engine.pid,
                    "host": engine.host or socket.gethostname(),
                    "state": _state_word(state),
                    "call": call,
                    "where": state.get("where", ""),
                    "memory": memory,
                }
            )
        return rows


def _rank_of(ident: bytes, gen: int) -> int | None:
    """The rank of an engine's ``out``/``in`` identity of world ``gen``, else None."""
    for prefix in (b"out", b"in"):
        if ident.startswith(prefix):
            world, _, rank = ident[len(prefix) :].partition(b".")
            try:
                return int(rank) if int(world) == gen else None
            except ValueError:
                return None
    return None


def _state_word(state: Mapping[str, Any]) -> str:
    word = str(state.get("state", ctl.NO_ANSWER))
    if word == ctl.EXITED:
        if state.get("signal"):
            return f"killed ({state['signal']})"
        return f"exited ({state.get('status', '?')})"
    return word


def _rss_bytes(pid: int | None) -> int | None:
    """Resident memory of ``pid`` (Linux /proc), else None."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
