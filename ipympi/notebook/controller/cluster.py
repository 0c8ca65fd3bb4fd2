"""A session's engines, seen from the controller: start, run, observe, stop.

A :class:`Cluster` owns one private session directory, one engine-protocol
ROUTER (``ipc://<dir>/engines``, signed messages, see
:mod:`ipympi.notebook.engine.protocol`) and one launcher
(:mod:`ipympi.notebook.controller.launchers`) that starts the engines: by default a
supervisor process that forks engines of the built-in MPI
(:mod:`ipympi.notebook.engine.supervisor`), or ``mpiexec``/``srun`` starting engines
on mpi4py (``backend="mpi4py"``). Each *world* (a set of N engines that form
one ``COMM_WORLD``) gets its own directory ``<dir>/w<gen>`` holding the
ranks' data sockets and the MPI control ROUTER (``ipc://<dir>/w<gen>/ctl``,
see :mod:`ipympi.core.control`) through which ranks say hello, abort, and answer
state queries even while blocked in MPI. When the launcher may start engines
on other hosts, both ROUTERs are also bound to a tcp address on one
interface.

Everything happens in the calling thread: :meth:`Cluster.pump` polls the two
ROUTERs and the launcher's file descriptors until a condition holds or a
deadline passes, so every wait is bounded and interruptible (Ctrl-C in the
controller interrupts the running ranks, see :meth:`Cluster.wait`). Other
threads hand it work through :attr:`Cluster.errands`, run at its next wait.

The cluster is the transport to the engines: it sends requests, records what
comes back (:mod:`~ipympi.notebook.controller.inbox`) and watches the processes;
it calls back into nothing. A cell's run (:mod:`~ipympi.notebook.controller.cellrun`),
the interrupts (:mod:`~ipympi.notebook.controller.interrupting`) and the data API
(:mod:`~ipympi.notebook.controller.api`) drive it through what they need of it
(:class:`~ipympi.notebook.controller.contracts.CellCluster`).
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Callable

import zmq

from ...core import control as ctl
from ...core.control import QUERY_TIMEOUT
from ...launch.ctlserver import ControlServer
from ...launch.sessiondir import make_session_dir, remove_on_signals, remove_session_dir
from ...launch.watch import with_cpu
from ..engine.protocol import EngineMessage, ProtocolError, Signer
from . import interrupting
from .api import ClusterAPI
from .children import Children, Item, ServesSpawn
from .errands import Errands
from .inbox import engine_of, log_bad_control, rank_of, record
from .interrupting import INTERRUPT_GRACE
from .interrupts import current_gate
from .launchers import ClusterError, Launcher, World
from .placement import make_launcher
from .realwatch import DEADLOCK_AFTER
from .records import (
    EngineRecord,
    Submission,
)
from .render import WORLD_ENDED
from .status import status_rows

__all__ = [
    "DEFAULT_NP",
    "Cluster",
    "ClusterError",
    "EngineRecord",
    "Submission",
]

DEFAULT_NP = 4
START_TIMEOUT = 60.0  # seconds for a world to say hello (a loaded CI machine is slow)
STOP_GRACE = 3.0  # seconds between the steps of stopping a world
ABORT_GRACE = 2.0  # seconds an abort message may lag behind the end of an MPI launcher's job
STOPPED = "the engines were stopped"  # the error of requests a stop ends


class Cluster(ClusterAPI, ServesSpawn):
    """N engines (ranks) for one notebook session.

    ``backend`` is ``"builtin"`` (ipympi's own MPI, the default) or
    ``"mpi4py"`` (a real MPI, started by ``launcher``: ``"mpiexec"``, the
    default, or ``"srun"``). ``placement`` (``hosts``, ``launcher_exec``,
    ``iface``) puts the ranks on several hosts; see
    :func:`~ipympi.notebook.controller.placement.make_launcher`.
    """

    def __init__(
        self,
        n: int = DEFAULT_NP,
        *,
        env: Mapping[str, str] | None = None,
        backend: str = "builtin",
        launcher: str | None = None,
        **placement: Any,
    ) -> None:
        if n < 1:
            raise ValueError(f"a session needs at least one rank, not {n}")
        self.n = n
        self.env = dict(os.environ if env is None else env)
        self.launcher: Launcher = make_launcher(backend, launcher, self.env, **placement)
        self.session_dir = make_session_dir()
        if threading.current_thread() is threading.main_thread():
            remove_on_signals()  # SIGTERM (Jupyter's, after a shutdown request) leaves nothing
        self.key = secrets.token_bytes(32)
        self.signer = Signer(self.key)
        self.gen = 0
        self.engines: list[EngineRecord] = []
        self.requests: dict[str, Submission] = {}
        self.dropped = 0  # engine messages dropped for a bad signature
        self.aborted: dict[str, Any] | None = None  # the abort message that ended the world
        self.ended: str | None = None  # why the controller ended the world
        self.on_error = "interrupt"  # what to do with a stuck cell: see watch.ON_ERROR
        # whether a failed or interrupted cell's unreceived messages stay receivable
        self.keep_messages = False
        # seconds without visible progress that make a probable deadlock on a real MPI
        self.deadlock_after = DEADLOCK_AFTER
        self.stopped = False  # True after stop(), until the next start()
        self._stopping = False  # engines exit on purpose: no peer_exit notices
        self._ctx: zmq.Context[Any] = zmq.Context()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        self._router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._router.bind(f"ipc://{self.session_dir}/engines")
        self._tcp_engines: str | None = None  # the ROUTER's tcp address, once bound
        self._ctl: ControlServer | None = None  # the current world's control socket
        self._mpi_key = b""  # signs the current world's control messages
        self._endpoints: dict[int, str] = {}  # rank -> tcp endpoint (a world on several hosts)
        self._world_dir: str | None = None
        self._poller = zmq.Poller()
        self._poller.register(self._router, zmq.POLLIN)
        self.errands = Errands()  # work other threads hand to the one that drives this
        self._poller.register(self.errands.fd, zmq.POLLIN)
        self._watched: set[int] = set()  # the launcher's file descriptors in the poller
        self.children = Children()  # the processes the world's ranks spawned
        self._poller.register(self.children.fd, zmq.POLLIN)  # what they said
        self._held: list[Item] = []  # their output no running cell has taken yet
        self._closed = False

    # -- life cycle ------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return any(engine.alive for engine in self.engines)

    @property
    def backend(self) -> str:
        """The MPI the engines run: ``"builtin"`` or ``"mpi4py"``."""
        return self.launcher.backend

    def use(self, backend: str, launcher: str | None = None, **placement: Any) -> None:
        """Run the next worlds on ``backend`` (started by ``launcher``, on the hosts of
        ``placement``: see :func:`~ipympi.notebook.controller.placement.make_launcher`); no world
        may be running."""
        if self.running:
            raise ClusterError("stop the engines first (%mpi restart does)")
        chosen = make_launcher(backend, launcher, self.env, **placement)
        self.launcher.close(STOP_GRACE)
        self.launcher = chosen
        self._watch_launcher()

    def describe(self) -> str:
        """The backend, its MPI library and how the engines were started, in words.

        ``mpi4py backend (MPICH 5.0.2), started by mpiexec``
        """
        library = ", ".join(sorted({e.mpi for e in self.engines if e.mpi})) or (
            self.launcher.library
        )
        return f"{self.backend} backend ({library}), {self.launcher.started_by}"

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
        self.gen += 1
        self.aborted = None
        self.ended = None
        self.stopped = False
        self._world_dir = os.path.join(self.session_dir, f"w{self.gen}")
        os.mkdir(self._world_dir, 0o700)
        self._mpi_key = secrets.token_bytes(16)
        # A rank's last word (an abort) may come on a new socket of its own, while its
        # old one is still being closed: the new one takes the rank's identity over.
        self._ctl = ControlServer(
            self._ctx, self._mpi_key, self.n, handover=True, on_bad=log_bad_control
        )
        self._poller.register(self._ctl.socket, zmq.POLLIN)
        self.engines = [EngineRecord(rank) for rank in range(self.n)]
        self.children.reset(self.n)
        self._endpoints = {}
        try:
            world = World(
                n=self.n,
                gen=self.gen,
                directory=self._world_dir,
                address=self._engine_address(),
                control=self._bind_control(),
                key=self.key,
                control_key=self._mpi_key,
                env=self.env,
            )
            events = self.launcher.start(world)
        except BaseException:
            self._close_world()
            raise
        finally:
            self._watch_launcher()
        self._handle_launcher_events(events)
        if wait:
            self.wait_ready()

    def _engine_address(self) -> str:
        """Where this world's engines connect: the session's ipc socket, or tcp."""
        if not self.launcher.remote:
            return f"ipc://{self.session_dir}/engines"
        if self._tcp_engines is None:
            self._router.bind(f"tcp://{self.launcher.address()}:0")
            self._tcp_engines = self._router.getsockopt_string(zmq.LAST_ENDPOINT)
        return self._tcp_engines

    def _bind_control(self) -> str:
        """Bind the world's control ROUTER (ipc in the world's directory, or tcp)."""
        assert self._ctl is not None and self._world_dir is not None
        if not self.launcher.remote:
            return self._ctl.bind(ctl.control_address(self._world_dir))
        return self._ctl.bind(f"tcp://{self.launcher.address()}:0")

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Wait until every engine of the current world has said hello."""
        ok = self.pump(time.monotonic() + timeout, self._world_settled)
        dead = [e for e in self.engines if e.returncode is not None]
        if dead or not ok:
            failed = [
                f"rank {e.rank} {ctl.describe_exit(e.returncode)}"
                for e in dead
                if e.returncode and not e.ended_by
            ]
            ended = sorted({e.ended_by for e in dead if e.ended_by})
            problems = failed + ended or [
                f"no hello from rank(s) {[e.rank for e in self.engines if not e.ready]}"
            ]
            said = self.launcher.diagnosis()
            self._kill_world()
            said = f"\n{self.launcher.name} said:\n{said}" if said else ""
            raise ClusterError("the engines did not start: " + "; ".join(problems) + said)

    def _world_settled(self) -> bool:
        return all(e.ready or e.returncode is not None for e in self.engines)

    @property
    def ready(self) -> bool:
        return bool(self.engines) and all(e.ready and e.alive for e in self.engines)

    @property
    def ending(self) -> bool:
        """Whether the world is being stopped (by ``stop``, maybe from another thread, such
        as a kernel subshell's ``%mpi stop``) or has been: no more requests to its ranks."""
        return self._stopping or self.stopped

    def stop(self, grace: float = STOP_GRACE) -> None:
        """End the world: ask every engine to finalize and exit, then TERM, then KILL."""
        alive = [e for e in self.engines if e.alive]
        self._stopping = True
        broken = any(e.returncode is not None for e in self.engines)

        def gone() -> bool:  # the engines, and the launcher process that started them
            return not self.running and not self.launcher.active

        if alive and all(e.ready for e in alive) and not self._busy() and not broken:
            # A world with a dead rank cannot finalize (its barrier would wait
            # for the dead one): it gets SIGTERM at once.
            req = self.submit("shutdown", {}, [e.rank for e in alive])
            self.pump(time.monotonic() + grace, gone)
            self.requests.pop(req.id, None)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if gone():
                break
            self.launcher.end(sig)
            self.pump(time.monotonic() + grace, gone)
        for req in self.requests.values():
            self._fail_pending(req, "EngineStopped", STOPPED)
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
            self.launcher.close(STOP_GRACE)
            self._watch_launcher()
            self._router.close(0)
            self._poller.unregister(self.errands.fd)
            self.errands.close()
            self._poller.unregister(self.children.fd)
            self.children.output.close()
            self._ctx.term()
            remove_session_dir(self.session_dir)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _kill_world(self) -> None:
        self.launcher.end(signal.SIGKILL)
        self.pump(time.monotonic() + STOP_GRACE, lambda: not self.running)
        self._close_world()

    def _close_world(self) -> None:
        self.children.close(STOP_GRACE)  # children never outlive their world
        self._held = []
        if self._ctl is not None:
            self._poller.unregister(self._ctl.socket)
            self._ctl.close()
            self._ctl = None
        if self._world_dir is not None:
            remove_session_dir(self._world_dir)
            self._world_dir = None

    # -- the launcher ------------------------------------------------------------------
    def _watch_launcher(self) -> None:
        """Poll exactly the file descriptors the launcher has now."""
        self._watched = self._poll_exactly(self._watched, self.launcher.fds())

    def _poll_exactly(self, polled: set[int], fds: Iterable[int]) -> set[int]:
        """Make the poller watch ``fds`` where it watched ``polled`` (both the
        launcher's); the new set."""
        wanted = set(fds)
        for fd in polled - wanted:
            self._poller.unregister(fd)
        for fd in wanted - polled:
            self._poller.register(fd, zmq.POLLIN)
        return wanted

    def _read_launcher(self, fd: int) -> None:
        events = self.launcher.read(fd)
        self._watch_launcher()
        self._handle_launcher_events(events)

    def _handle_launcher_events(self, events: list[dict[str, Any]]) -> None:
        """Record what the launcher says about the engines' processes (see launchers)."""
        for event in events:
            kind = event.get("type")
            if kind == "ended":
                self._on_world_end(event)
                continue
            if kind == "output":  # a spawned process's, forwarded by a real MPI's launcher
                text = {"name": event["name"], "text": event["text"]}
                self._children_said([(int(event["index"]), "stream", text)], [])
                continue
            engine = engine_of(self.engines, event)
            if engine is None:
                continue
            if kind == "spawned":
                engine.launched = True
                engine.pid = event.get("pid") or engine.pid
            elif kind == "exited" and engine.returncode is None:
                pid = event.get("pid")
                if pid is None or engine.pid is None or engine.pid == pid:
                    self._on_exit(engine.rank, int(event["returncode"]))

    def _on_world_end(self, event: Mapping[str, Any]) -> None:
        """The launcher ended every engine still running (a failed rank ends an MPI job)."""
        if event.get("abort") and self.aborted is None and not self._stopping:
            self.aborted = dict(event["abort"])
        # "known": the launcher knows why (a host was lost); no abort can be on its way.
        unexplained = not event.get("known") and all(e.returncode is None for e in self.engines)
        if unexplained and not self._stopping and self.aborted is None and not self.ended:
            # No rank said how it ended: an Abort ends every process at once, and
            # the aborting rank's message may still be on its way.
            self.pump(time.monotonic() + ABORT_GRACE, lambda: self.aborted is not None)
        reason = str(event.get("reason", ""))
        if event.get("said"):
            reason += f" ({self.launcher.name}: {event['said']})"
        if not self._stopping and self.aborted is None and not self.ended:
            failed = [
                f"rank {e.rank} {ctl.describe_exit(e.returncode)}"
                for e in self.engines
                if e.returncode is not None
            ]
            self.ended = "; ".join([*failed, reason])
        for engine in self.engines:
            if engine.returncode is None:  # running, or never started: it will not now
                engine.ended_by = reason
                ended_by = None if self._stopping else reason
                self._on_exit(engine.rank, -int(signal.SIGKILL), ended_by=ended_by)

    def _on_exit(self, rank: int, returncode: int, ended_by: str | None = None) -> None:
        """Rank ``rank``'s engine has exited (``ended_by``: the launcher ended it, saying so)."""
        engine = self.engines[rank]
        engine.returncode = returncode
        if not self._stopping and self.aborted is None and not self.ended:
            self._tell_peers(rank, ctl.describe_exit(returncode) if returncode else "exited")
        for req in self.requests.values():
            if rank in req.targets and rank not in req.replies:
                if self._stopping:
                    self.fail_rank(req, rank, "EngineStopped", STOPPED)
                elif self.aborted is not None:
                    # The same words for every rank: the cell's error shows them once.
                    self.fail_rank(req, rank, "MPIAbort", self.world_ended())
                elif ended_by is not None:
                    self.fail_rank(req, rank, WORLD_ENDED, ended_by)
                else:
                    what = ctl.describe_exit(returncode) if returncode else "exited"
                    died = f"rank {rank} has died ({what})"
                    self.fail_rank(req, rank, "EngineDied", died)

    def _tell_peers(self, rank: int, reason: str) -> None:
        """Tell every live rank that ``rank`` died: what waits on it fails at once."""
        if self._ctl is None:
            return
        others = [e.rank for e in self.engines if e.alive and e.rank != rank]
        self._ctl.send_all(others, {"type": ctl.PEER_EXIT, "rank": rank, "reason": reason})

    def variables(self) -> list[str]:
        """The names the user defined on any rank of the current world, sorted."""
        return sorted({name for engine in self.engines for name in engine.names})

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
    ) -> Submission:
        """Send one request to ``targets``; its replies and output collect in the Submission."""
        msg = EngineMessage(kind, content, buffers=tuple(buffers))
        req = Submission(msg.id, kind, sorted(set(targets)))
        frames = self.signer.encode(msg)
        if kind == "execute" and self.children.procs:
            # what spawned processes wrote before this cell, also what the reading thread
            # has not handed over yet: shown by this cell, not the one after
            self._children_said(*self.children.take(now=True))
        self.requests[req.id] = req
        if kind == "execute" and self._held:  # children's output since the last cell
            req.add_output(*self._held)
            self._held = []
        for rank in req.targets:
            engine = self.engines[rank] if rank < len(self.engines) else None
            if engine is None or not engine.alive or not engine.ready:
                self.fail_rank(req, rank, "EngineDied", f"rank {rank} is not running")
                continue
            try:
                self._router.send_multipart([b"in%d.%d" % (self.gen, rank), *frames])
            except zmq.ZMQError as exc:
                self.fail_rank(req, rank, "EngineDied", f"rank {rank}: {exc}")
        return req

    def fail_rank(
        self, req: Submission, rank: int, ename: str, evalue: str, where: str | None = None
    ) -> None:
        content: dict[str, Any] = {
            "status": "error",
            "ename": ename,
            "evalue": evalue,
            "traceback": [],
        }
        if where is not None:
            content["where"] = where
        req.add_output((rank, "error", content))
        req.replies[rank] = EngineMessage("reply", content, req.id)

    def _fail_pending(self, req: Submission, ename: str, evalue: str) -> None:
        for rank in req.pending:
            self.fail_rank(req, rank, ename, evalue)

    def _busy(self) -> bool:
        return any(not req.done for req in self.requests.values())

    def wait(self, req: Submission, timeout: float | None = None) -> bool:
        """Pump until ``req`` is done; False when ``timeout`` passes first (see
        :func:`~ipympi.notebook.controller.interrupting.wait`: Ctrl-C interrupts ``req``)."""
        return interrupting.wait(self, req, timeout)

    def interrupt(self, req: Submission, resynchronize: bool = True) -> None:
        """Interrupt the ranks still running ``req`` (see
        :func:`~ipympi.notebook.controller.interrupting.interrupt`)."""
        interrupting.interrupt(self, req, realign=resynchronize)

    def resynchronize(self, timeout: float = INTERRUPT_GRACE) -> bool:
        """Realign the ranks' collectives after an interrupt (see
        :func:`~ipympi.notebook.controller.interrupting.resynchronize`)."""
        return interrupting.resynchronize(self, timeout)

    def end_world(self, reason: str) -> None:
        """Kill every engine of the world now; the next cell starts a fresh one."""
        self.ended = reason
        self.launcher.end(signal.SIGKILL)
        self.children.end(signal.SIGKILL)
        with contextlib.suppress(KeyboardInterrupt):
            self.pump(time.monotonic() + STOP_GRACE, lambda: not self.running)

    def signal(self, ranks: Iterable[int], sig: int) -> None:
        """Send ``sig`` to each rank's engine and its children (its process group).

        The launcher delivers it where it can (an engine it forked on this
        host); any other engine is asked to send it to itself, through the
        control channel (:func:`ipympi.progress.introspect.signal_self`).
        """
        for rank in ranks:
            engine = self.engines[rank]
            if not engine.alive or self.launcher.signal(rank, engine.pid, sig):
                continue
            if self._ctl is not None:
                self._ctl.send(rank, {"type": ctl.SIGNAL, "signal": int(sig)})

    def forget(self, req: Submission) -> None:
        self.requests.pop(req.id, None)

    # -- the event loop ----------------------------------------------------------------
    def pump(self, deadline: float | None, done: Callable[[], bool]) -> bool:
        """Handle events until ``done()`` (True) or ``deadline`` passes (False)."""
        while True:
            if done():
                if self.children.procs:  # what they wrote before the ranks finished
                    self._children_said(*self.children.take(now=True))
                return True
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return False
            ms = -1 if wait is None else max(1, math.ceil(wait * 1000))
            gate = current_gate()
            if gate is None:
                events = dict(self._poller.poll(ms))
            else:
                gate.enter_wait()
                try:
                    events = dict(self._poller.poll(ms))
                finally:
                    gate.open = False
            if self._router in events:
                self._read_engines()
            if self._ctl is not None and self._ctl.socket in events:
                self._read_control()
            for fd in self._watched & events.keys():
                if fd in self._watched:  # an earlier read may have closed it
                    self._read_launcher(fd)
            if self.children.fd in events:
                self._children_said(*self.children.take())
            if self.errands.fd in events:
                self.errands.run()

    def _read_engines(self) -> None:
        for _ in range(10000):
            try:
                frames = self._router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            ident, frames = frames[0], frames[1:]
            try:
                msg = self.signer.decode(frames)
                rank = rank_of(ident, self.gen)
            except ProtocolError:
                self.dropped += 1
                continue
            if rank is not None:  # else a message from an engine of an earlier world
                record(self.engines, self.requests, rank, msg)

    def _read_control(self) -> None:
        assert self._ctl is not None
        for rank, msg in self._ctl.receive():
            if msg["type"] == ctl.STATE:
                if not self._ctl.is_answer(msg):  # a late answer to an earlier query
                    continue
                if rank < len(self.engines):
                    self.engines[rank].state = msg
                else:
                    self.children.note_state(rank, msg)
            elif msg["type"] == ctl.SPAWN:
                self._on_spawn(rank, msg)
            elif msg["type"] == ctl.ERROR:  # a spawned process's uncaught exception
                self._on_child_error(rank, msg)
            elif msg["type"] == ctl.HELLO and rank >= len(self.engines):
                self._on_child_hello(rank)
            elif msg["type"] == ctl.HELLO and msg.get("data"):
                self._note_endpoint(rank, str(msg["data"]))
            elif msg["type"] == ctl.ABORT and self.aborted is None:
                self.aborted = msg
                self.signal([e.rank for e in self.engines], signal.SIGKILL)
                self.children.end(signal.SIGKILL)

    def _note_endpoint(self, rank: int, endpoint: str) -> None:
        """A rank of a world on several hosts announced its tcp endpoint; once every
        rank has, each gets the table (``peers``) and its ``MPI.Init`` returns."""
        self._endpoints[rank] = endpoint
        if len(self._endpoints) < len(self.engines) or self._ctl is None:
            return
        table = [self._endpoints[r] for r in range(len(self.engines))]
        self._ctl.send_all(range(len(self.engines)), {"type": ctl.PEERS, "endpoints": table})

    # -- observation -------------------------------------------------------------------
    def query_states(self, timeout: float = QUERY_TIMEOUT, wait: bool = True) -> list[dict]:
        """Ask every live rank what it is doing; one state dict per rank, in rank order."""
        answered = self.ask_states()
        if wait:
            self.pump(time.monotonic() + timeout, answered)
        return self.states()

    def ask_states(self) -> Callable[[], bool]:
        """Ask every live rank, and every process they spawned, what it is doing
        (earlier answers are dropped); the test of whether all asked have answered."""
        for engine in self.engines:
            engine.state = {}
        live = [engine.rank for engine in self.engines if engine.alive]
        self.children.states = {}  # the spawned processes are asked too
        answering = self._ctl.ask(live + list(self.children.procs)) if self._ctl else []
        asked = [self.engines[r] for r in answering if r < len(self.engines)]
        kids = [r for r in answering if r >= len(self.engines)]

        def answered() -> bool:
            return all(e.state for e in asked) and all(k in self.children.states for k in kids)

        return answered

    def states(self) -> list[dict[str, Any]]:
        """Each rank's last answer (see :meth:`state_of`), in rank order."""
        return [self.state_of(engine) for engine in self.engines]

    def state_of(self, engine: EngineRecord) -> dict[str, Any]:
        """The rank's last state answer, with the CPU time its process has used."""
        if engine.returncode is not None:
            return ctl.launcher_state(engine.rank, engine.pid, engine.returncode)
        if engine.state:
            return with_cpu(engine.state, self.local_pid(engine))
        return ctl.launcher_state(engine.rank, engine.pid, None)

    def local_pid(self, engine: EngineRecord) -> int | None:
        """The engine's pid where ``/proc`` may be read about it: never on another host."""
        return None if self.launcher.remote else engine.pid

    def status(self) -> list[dict[str, Any]]:
        """One row per rank: rank, pid, host, state, call (what it waits for), memory."""
        return status_rows(self)
