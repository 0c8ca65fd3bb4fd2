"""One engine: an IPython shell that is also one MPI rank.

The engine's main thread receives requests on its ``in`` socket and runs
them; everything it says goes out on its ``out`` socket (see
:mod:`ipympi.notebook.engine.protocol`). A cell runs in an ``InteractiveShell``
subclass whose display hook and display publisher turn results and rich
displays into protocol messages, and whose traceback hook turns an exception
into one ``error`` message; stdout and stderr are captured at both the Python
and the file-descriptor level (:mod:`ipympi.notebook.engine.capture`). Input is
transformed as IPython does, minus the token pass on plain Python
(:mod:`ipympi.notebook.engine.inputs`).

SIGINT raises ``KeyboardInterrupt`` in a running cell only; the handler first
records where the rank was (its MPI call, if blocked in one, and the cell
line), which the controller shows in the interrupted cell's error. An idle
engine ignores SIGINT.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any, Callable

import zmq
from IPython.core import page
from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.interactiveshell import InteractiveShell
from traitlets import Type, default

from ...core.control import format_call
from ...core.errors import ERR_NOT_SAME
from ...core.errors import Exception as MPIException
from ...mpi import byvalue
from ...mpi.process import PROCESS
from ...progress import tracing as _trace
from ...progress.introspect import describe_location
from .capture import FLUSH_INTERVAL, FdCapture, RankStream
from .errors import (
    MPI_EXCEPTION,
    error_content,
    is_mpi_exception,
    up_to_mpi_call,
    without_frames_of,
)
from .inputs import RankTransformerManager
from .leftovers import LATE_ARRIVALS, Leftovers, discard
from .names import UserNames
from .protocol import EngineMessage, ProtocolError, Signer

__all__ = [
    "EngineIO",
    "RankEngine",
    "RankShell",
    "UserNames",
    "close_io",
    "make_shell",
    "open_io",
    "run_engine",
    "say_hello",
    "serve_until_shutdown",
]


class EngineIO:
    """The engine's two sockets and its captured streams.

    ``send`` may be called from any thread: it flushes nothing, so callers
    that need ordering after captured output call :meth:`send_after_output`.
    """

    def __init__(self, ctx: zmq.Context[Any], address: str, rank: int, gen: int, key: bytes):
        self.rank = rank
        self.signer = Signer(key)
        self.inbox = ctx.socket(zmq.DEALER)
        self.inbox.setsockopt(zmq.IDENTITY, b"in%d.%d" % (gen, rank))
        self.inbox.setsockopt(zmq.LINGER, 0)
        self.inbox.connect(address)
        self.outbox = ctx.socket(zmq.DEALER)
        self.outbox.setsockopt(zmq.IDENTITY, b"out%d.%d" % (gen, rank))
        self.outbox.setsockopt(zmq.LINGER, 2000)
        self.outbox.connect(address)
        self._lock = threading.Lock()
        self.parent: str | None = None  # the request being served
        self.dropped = 0  # messages refused for a bad signature
        self.streams: dict[str, RankStream] = {
            "stdout": RankStream("stdout", self.send, 1),
            "stderr": RankStream("stderr", self.send, 2),
        }
        self.fd_capture: FdCapture | None = None

    def send(
        self,
        kind: str,
        content: Mapping[str, Any],
        buffers: tuple[bytes, ...] = (),
        parent: str | None = None,
    ) -> None:
        msg = EngineMessage(kind, dict(content), parent or self.parent, buffers=buffers)
        frames = self.signer.encode(msg)
        with self._lock:
            self.outbox.send_multipart(frames, copy=len(frames[-1]) < 65536)

    def flush_output(self) -> None:
        """Send every captured byte written so far, before whatever comes next."""
        if self.fd_capture is not None:
            self.fd_capture.sync()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        for stream in self.streams.values():
            stream.flush()

    def send_after_output(self, kind: str, content: Mapping[str, Any], **kw: Any) -> None:
        self.flush_output()
        self.send(kind, content, **kw)

    def receive(self, timeout_ms: int) -> EngineMessage | None:
        """The next well-signed request, or None after ``timeout_ms``."""
        if not self.inbox.poll(timeout_ms):
            return None
        frames = self.inbox.recv_multipart()
        try:
            return self.signer.decode(frames)
        except ProtocolError:
            self.dropped += 1
            return None


# -- the shell ---------------------------------------------------------------------------
class RankDisplayPublisher(DisplayPublisher):
    """Rich displays (``display()``, inline figures) become ``display_data`` messages."""

    def publish(
        self,
        data: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        source: Any = None,
        *,
        transient: dict[str, Any] | None = None,
        update: bool = False,
        **kwargs: Any,
    ) -> None:
        io: EngineIO = self.shell.engine_io
        content = {"data": data, "metadata": metadata or {}, "transient": transient or {}}
        io.send_after_output("update_display_data" if update else "display_data", content)

    def clear_output(self, wait: bool = False) -> None:
        io: EngineIO = self.shell.engine_io
        io.send_after_output("clear_output", {"wait": bool(wait)})


class RankDisplayHook(DisplayHook):
    """The value of a cell's last expression becomes an ``execute_result`` message."""

    def start_displayhook(self) -> None:
        self._content: dict[str, Any] = {"data": {}, "metadata": {}}

    def write_output_prompt(self) -> None:
        self._content["execution_count"] = self.prompt_count

    def write_format_data(self, format_dict: dict, md_dict: dict | None = None) -> None:
        self._content["data"] = format_dict
        self._content["metadata"] = md_dict or {}

    def finish_displayhook(self) -> None:
        io: EngineIO = self.shell.engine_io  # type: ignore[union-attr]
        io.send_after_output("execute_result", self._content)


class RankShell(InteractiveShell):
    """The IPython shell of one rank."""

    displayhook_class = Type(RankDisplayHook)
    display_pub_class = Type(RankDisplayPublisher)
    engine_io: EngineIO | None = None
    interrupted_at: str = ""

    @default("input_transformer_manager")
    def _default_input_transformer_manager(self) -> RankTransformerManager:
        """IPython's, without tokenizing cells of plain Python (see :mod:`.inputs`)."""
        return RankTransformerManager()

    def init_hooks(self) -> None:
        """IPython's hooks, with text for the pager (``obj?``, ``%pdoc``) kept as a
        payload of the cell's reply, as ipykernel does: the front end opens its pager."""
        super().init_hooks()
        self.set_hook("show_in_pager", page.as_hook(self._page), 99)

    def _page(self, text: Any, start: int = 0, **unused: Any) -> None:
        data = text if isinstance(text, dict) else {"text/plain": text}
        payloads = self.payload_manager
        assert payloads is not None  # made at the shell's start
        payloads.write_payload({"source": "page", "data": data, "start": max(0, start)})

    def _showtraceback(self, etype: Any, evalue: Any, stb: list[str]) -> None:
        io = self.engine_io
        engine = PROCESS.engine  # the built-in MPI's, where it runs (None on a real MPI)
        content = error_content(etype, evalue, stb, engine.dead_peers.values() if engine else ())
        if etype is KeyboardInterrupt and self.interrupted_at:
            content["where"] = self.interrupted_at
        if io is None:
            super()._showtraceback(etype, evalue, stb)
            return
        io.send_after_output("error", content)

    def _get_exc_info(self, exc_tuple: Any = None) -> Any:
        etype, value, tb = super()._get_exc_info(exc_tuple)
        if etype is KeyboardInterrupt:
            tb = without_frames_of(tb, RankEngine.on_sigint.__code__)
        # As on the command line, ipympi's own frames are left out (unless
        # IPYMPI_TRACEBACK=full): they say nothing about the user's code.
        return etype, value, up_to_mpi_call(tb)

    def enable_gui(self, gui: str | None = None) -> None:
        if gui not in (None, "inline"):
            raise NotImplementedError(f"an engine has no GUI event loop for {gui!r}")


# -- where was a rank interrupted ----------------------------------------------------------
def describe_interruption(frame: Any) -> str:
    """Where the main thread is, in words: its MPI call (if blocked) and its line."""
    parts = []
    with contextlib.suppress(Exception):
        engine = PROCESS.engine
        info = engine.waiting_info() if engine is not None else None
        if info is not None:
            parts.append(f"in {format_call(info.as_dict())}")
    location = describe_location(frame)
    if location:
        parts.append(f"at {location}")
    return " ".join(parts) or "running"


# -- the engine's life ---------------------------------------------------------------------
class RankEngine:
    """Serves requests until told to shut down."""

    def __init__(self, io: EngineIO, shell: RankShell) -> None:
        self.io = io
        self.shell = shell
        self.executing = False
        self.state = "idle"
        self.handlers: dict[str, Callable[[EngineMessage], None]] = {
            "execute": self.on_execute,
            "push": self.on_push,
            "pull": self.on_pull,
            "apply": self.on_apply,
            "complete": self.on_complete,
            "inspect": self.on_inspect,
            "shutdown": self.on_shutdown,
            "recover": self.on_recover,
            "leftovers": self.on_leftovers,
            "discard": self.on_discard,
        }
        self.running = True
        self.leftovers = Leftovers()
        self._user_names = UserNames()
        self._names: frozenset[str] = frozenset()  # the user's variables the controller knows
        self._traffic: tuple[tuple[int, ...], ...] = ((), ())  # the message counts it knows

    def on_sigint(self, signum: int, frame: Any) -> None:
        if not self.executing:
            return  # idle: nothing to interrupt
        self.shell.interrupted_at = self.describe_interruption(frame)
        raise KeyboardInterrupt

    describe_interruption = staticmethod(describe_interruption)

    def serve(self) -> None:
        while self.running:
            try:
                msg = self.io.receive(1000)
            except KeyboardInterrupt:
                continue
            if msg is None:
                continue
            handler = self.handlers.get(msg.type)
            if handler is None:
                self.io.send(
                    "reply", {"status": "error", "evalue": f"unknown {msg.type!r}"}, parent=msg.id
                )
                continue
            self.io.parent = msg.id
            try:
                handler(msg)
            except KeyboardInterrupt:
                self.reply_error(KeyboardInterrupt("interrupted"))
            except BaseException as exc:  # a broken request must not end the engine
                self.reply_error(exc)
            finally:
                self.io.parent = None

    def reply(self, content: dict[str, Any], buffers: tuple[bytes, ...] = ()) -> None:
        content.setdefault("status", "ok")
        self.io.send_after_output("reply", content, buffers=buffers)

    def reply_error(self, exc: BaseException) -> None:
        self.reply(
            {
                "status": "error",
                "ename": type(exc).__name__,
                "evalue": str(exc),
                "traceback": traceback.format_exception(type(exc), exc, exc.__traceback__),
            }
        )

    # -- requests ----------------------------------------------------------------------
    def on_execute(self, msg: EngineMessage) -> None:
        code = str(msg.content.get("code", ""))
        silent = bool(msg.content.get("silent", False))
        store_history = bool(msg.content.get("store_history", not silent))
        shell = self.shell
        shell.interrupted_at = ""
        count = msg.content.get("execution_count")
        if isinstance(count, int) and count > shell.execution_count:
            # Tracebacks say "Cell In[7]" and locations "cell [7]" as the notebook does.
            shell.execution_count = count
        trace = bool(msg.content.get("trace", False))
        if trace:
            _trace.start()
        self.state = "running"
        self.executing = True
        try:
            result = shell.run_cell(code, store_history=store_history, silent=silent)
        finally:
            self.executing = False
            self.state = "idle"
            # The cell's messages travel back with the reply (``%%px --trace``).
            buffers = (pickle.dumps(_trace.stop(), pickle.HIGHEST_PROTOCOL),) if trace else ()
        if isinstance(result.error_in_exec, KeyboardInterrupt):
            # Point-to-point leftovers are this cell's; collectives are realigned
            # by the controller, and a mismatch is not news after an interrupt.
            self.check_after_cell(take_mismatch=False, interrupted=True)
            mismatch = None
        else:
            mismatch = self.check_after_cell(take_mismatch=result.error_in_exec is None)
        content: dict[str, Any] = {"execution_count": shell.execution_count - 1}
        if not store_history:
            content["execution_count"] = shell.execution_count
        payloads = shell.payload_manager
        assert payloads is not None  # made at the shell's start
        payload = payloads.read_payload()
        if payload:
            payloads.clear_payload()
            content["payload"] = payload
        error = result.error_before_exec or result.error_in_exec or mismatch
        if mismatch is not None:
            self.io.send_after_output(
                "error", error_content(type(mismatch), mismatch, [f"Exception: {mismatch}"])
            )
        if error is not None:
            ename = MPI_EXCEPTION if is_mpi_exception(type(error)) else type(error).__name__
            content.update(status="error", ename=ename, evalue=str(error))
            if isinstance(error, KeyboardInterrupt) and shell.interrupted_at:
                content["where"] = shell.interrupted_at
        self.note_names(content)
        self.note_traffic(content)
        self.reply(content, buffers)

    def note_traffic(self, content: dict[str, Any]) -> None:
        """Add the counts of messages sent and arrived that the cell's leftover check
        saw (:mod:`.leftovers`) to a reply's ``content`` when they have changed."""
        counts = self.leftovers.traffic
        if counts != self._traffic:
            self._traffic = counts
            content["p2p"] = {"sent": list(counts[0]), "arrived": list(counts[1])}

    def note_names(self, content: dict[str, Any]) -> None:
        """Add the user's variables to a reply's ``content`` when they have changed.

        The controller names them when the world they live in ends.
        """
        names = self._user_names.look(self.shell)
        if names != self._names:
            self._names = names
            content["names"] = sorted(names)

    def check_after_cell(
        self, take_mismatch: bool, interrupted: bool = False
    ) -> MPIException | None:
        """Warn (stderr) about what the cell left behind; return a late mismatch error.

        A collective mismatch this rank learned of after leaving the collective
        belongs to the cell that just ran: it is reported now, not by the next
        cell's first collective.
        """

        try:
            lines, mismatch = self.leftovers.check(PROCESS.engine, take_mismatch, interrupted)
        except Exception as exc:  # a report must never fail the cell
            lines, mismatch = [f"ipympi warning: cannot check for leftover messages: {exc}"], None
        if lines:
            self.io.streams["stderr"].write("".join(line + "\n" for line in lines))
        if mismatch is None:
            return None
        return MPIException(ERR_NOT_SAME, f"found at the end of the cell: {mismatch}")

    def on_push(self, msg: EngineMessage) -> None:
        values = byvalue.loads(msg.buffers[0], self.shell.user_ns) if msg.buffers else {}
        if not isinstance(values, dict):
            raise TypeError("push needs a dict of names to values")
        self.shell.user_ns.update(values)
        content: dict[str, Any] = {}
        self.note_names(content)
        self.reply(content)

    def on_pull(self, msg: EngineMessage) -> None:
        names = list(msg.content.get("names", []))
        ns = self.shell.user_ns
        missing = [name for name in names if name not in ns]
        if missing:
            raise NameError(f"name {missing[0]!r} is not defined on rank {self.io.rank}")
        data = pickle.dumps([ns[name] for name in names], protocol=pickle.HIGHEST_PROTOCOL)
        self.reply({"names": names}, (data,))

    def on_apply(self, msg: EngineMessage) -> None:
        func, args, kwargs = _loads_callable(msg.buffers[0], self.shell.user_ns)
        self.executing = True
        self.state = "running"
        try:
            value = func(*args, **kwargs)
        except Exception as exc:  # the traceback starts in the function, not in the engine
            if exc.__traceback__ is not None:
                exc.__traceback__ = exc.__traceback__.tb_next
            self.reply_error(exc)
            return
        finally:
            self.executing = False
            self.state = "idle"
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self.reply({}, (data,))

    def on_complete(self, msg: EngineMessage) -> None:
        code = str(msg.content.get("code", ""))
        pos = int(msg.content.get("cursor_pos", len(code)))
        from IPython.core.completer import provisionalcompleter

        completer = self.shell.Completer
        with provisionalcompleter():
            completions = list(completer.completions(code, pos))
            if not completions and completer.use_jedi:
                # IPython drops jedi's failures silently (its caches, shared by every
                # kernel of the user, being written by another one, say): the
                # namespace's own matchers then answer ("zi" -> "zip").
                completer.use_jedi = False
                try:
                    completions = list(completer.completions(code, pos))
                finally:
                    completer.use_jedi = True
        if completions:
            start = min(c.start for c in completions)
            end = max(c.end for c in completions)
            matches = [code[start : c.start] + c.text + code[c.end : end] for c in completions]
        else:
            start = end = pos
            matches = []
        self.reply(
            {"matches": list(dict.fromkeys(matches)), "cursor_start": start, "cursor_end": end}
        )

    def on_inspect(self, msg: EngineMessage) -> None:
        from IPython.utils.tokenutil import token_at_cursor

        code = str(msg.content.get("code", ""))
        pos = int(msg.content.get("cursor_pos", len(code)))
        level = int(msg.content.get("detail_level", 0))
        name = token_at_cursor(code, pos)
        data: dict[str, Any] = {}
        found = False
        with contextlib.suppress(KeyError):
            bundle = self.shell.object_inspect_mime(name, detail_level=level)
            data = dict(bundle)
            found = True
        self.reply({"found": found, "data": data, "metadata": {}})

    def on_recover(self, msg: EngineMessage) -> None:
        """Realign collectives after an interrupt (two steps, driven by the controller)."""
        engine = PROCESS.engine
        if engine is None or engine.finalized:
            self.reply({"positions": {}})
            return
        engine.enter()
        try:
            if msg.content.get("bases") is None:
                positions = engine.abandon_collectives()
            else:
                engine.resynchronize({int(k): int(v) for k, v in msg.content["bases"].items()})
                positions = dict(engine.ledger.next)
        finally:
            engine.leave()
        self.reply({"positions": {str(k): v for k, v in positions.items()}})

    def on_leftovers(self, msg: EngineMessage) -> None:
        """Wait for messages still on their way to this rank, then report what the
        cell left (``expect``: per rank, the messages each sender has sent it)."""
        expect = dict(msg.content.get("expect") or {}).get(str(self.io.rank)) or {}
        expected = {int(sender): int(count) for sender, count in expect.items()}
        self.leftovers.await_arrivals(PROCESS.engine, expected, LATE_ARRIVALS)
        self.check_after_cell(take_mismatch=False)
        self.reply({})

    def on_discard(self, msg: EngineMessage) -> None:
        """After a failed or interrupted cell: wait for the messages still on their way
        here (``expect``, as for ``leftovers``), then drop every point-to-point leftover."""
        expect = dict(msg.content.get("expect") or {}).get(str(self.io.rank)) or {}
        expected = {int(sender): int(count) for sender, count in expect.items()}
        engine = PROCESS.engine
        all_came = self.leftovers.await_arrivals(engine, expected, LATE_ARRIVALS)
        counts = discard(engine)
        if not all_came and engine is not None and not engine.finalized:
            arrived = engine.arrived
            late = [n - arrived[s] for s, n in expected.items() if s < len(arrived)]
            counts["missing"] = sum(n for n in late if n > 0)
        self.reply({"discarded": counts})

    def on_shutdown(self, msg: EngineMessage) -> None:
        self.reply({})
        self.running = False


def _loads_callable(data: bytes, namespace: dict[str, Any]) -> tuple[Callable, tuple, dict]:
    """Unpickle ``(function, args, kwargs)``; a notebook's function (sent by value,
    see :mod:`ipympi.mpi.byvalue`) takes ``namespace`` as its globals."""
    func, args, kwargs = byvalue.loads(data, namespace)
    return func, tuple(args), dict(kwargs)


def _die_with_parent() -> None:
    """SIGKILL this engine when the supervisor dies (Linux), else poll the parent."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent:
                os._exit(1)
            return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="ipympi-parent-watch", daemon=True).start()


def open_io(
    ctx: zmq.Context[Any],
    address: str,
    rank: int,
    gen: int,
    key: bytes,
    pipes: Mapping[int, tuple[int, int]] | None = None,
    watch: Callable[[int, bytes], None] | None = None,
) -> EngineIO:
    """Connect an engine's sockets and capture its output (``sys`` streams and fds 1, 2).

    ``pipes`` and ``watch``: see :class:`FdCapture`.
    """
    io = EngineIO(ctx, address, rank, gen, key)
    sys.stdout = io.streams["stdout"]
    sys.stderr = io.streams["stderr"]
    streams = {1: io.streams["stdout"], 2: io.streams["stderr"]}
    io.fd_capture = FdCapture(streams, pipes, watch)
    flusher = threading.Thread(target=_flush_forever, args=(io,), name="ipympi-flush", daemon=True)
    flusher.start()
    return io


def make_shell(io: EngineIO, names: Mapping[str, Any]) -> RankShell:
    """The rank's shell, with ``names`` (``MPI``, ``comm``, ``rank``, ``size``) predefined."""
    from traitlets.config import Config

    config = Config()
    # One history database per engine, in memory: N ranks writing one sqlite
    # file would serialise every cell on its lock (measured: +15-35 ms a cell).
    config.HistoryManager.hist_file = ":memory:"
    shell = RankShell.instance(config=config)
    shell.engine_io = io
    shell.user_ns.update(names)
    shell.user_ns_hidden.update(names)
    return shell


def say_hello(io: EngineIO, rank: int, extra: Mapping[str, Any] | None = None) -> None:
    """Tell the controller that requests can reach this engine now (``extra``: more about it)."""
    content = {"rank": rank, "pid": os.getpid(), "host": socket.gethostname(), **(extra or {})}
    # What start-up wrote (an import's warning, say) goes out now, belonging to no
    # request: left pending, it would be sent as the first cell's output, or not,
    # depending on when the flusher thread last ran.
    io.flush_output()
    # Sent on the inbox: once the controller has it, requests can reach this engine.
    io.inbox.send_multipart(io.signer.encode(EngineMessage("hello", content)))


def close_io(io: EngineIO, ctx: zmq.Context[Any]) -> None:
    """Send what is left of the output, close the sockets and end the context."""
    io.flush_output()
    io.inbox.close(0)
    io.outbox.close()
    ctx.term()


def run_engine(rank: int, spec: Mapping[str, Any], key: bytes) -> int:
    """Body of a forked engine process: set up, announce, serve; returns the exit status."""
    _die_with_parent()
    ctx: zmq.Context[Any] = zmq.Context()
    io = open_io(ctx, spec["address"], rank, int(spec["gen"]), key)

    from ... import MPI
    from ...mpi.rc import rc

    # MPI's names are made when it is imported (MPI._collect): untyped here.
    mpi: Any = MPI
    mpi.Init()
    rc.initialize = True
    comm = mpi.COMM_WORLD
    shell = make_shell(io, {"MPI": MPI, "comm": comm, "rank": rank, "size": comm.Get_size()})
    engine = RankEngine(io, shell)
    if PROCESS.progress is not None:
        PROCESS.progress.activity = lambda: engine.state
    signal.signal(signal.SIGINT, engine.on_sigint)
    say_hello(io, rank, {"host": PROCESS.host_name()})  # the host's name as the host list gives it
    status = serve_until_shutdown(engine, MPI.Finalize)
    close_io(io, ctx)
    return status


def serve_until_shutdown(engine: RankEngine, finalize: Callable[[], Any]) -> int:
    """Serve requests until told to shut down, then ``finalize`` MPI; the exit status."""
    io = engine.io
    try:
        engine.serve()
    finally:
        io.flush_output()
    try:
        finalize()
    except BaseException as exc:
        assert io.fd_capture is not None
        text = f"rank {io.rank}: Finalize failed: {exc}\n"
        os.write(io.fd_capture.original_stderr, text.encode())
        return 1
    return 0


def _flush_forever(io: EngineIO) -> None:
    while True:
        time.sleep(FLUSH_INTERVAL)
        for stream in io.streams.values():
            if stream.pending:
                with contextlib.suppress(Exception):
                    stream.flush()
