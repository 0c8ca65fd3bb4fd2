"""The progress thread: moves messages while the user computes, answers queries.

While a thread is inside an MPI call, that thread drives the data socket and
this thread only listens on the control socket (state queries from the launcher
or controller). Once no thread has been inside MPI for ``IDLE_HANDOFF`` seconds,
this thread takes the engine and drives the data socket until a thread entering
MPI rings the doorbell. Measured on 2 cores, this keeps small-message latency
within ~1.15x of raw zmq while posted receives, synchronous sends and large
transfers still complete during long computations.

Without this thread a rank neither answers queries nor completes what others
wait for, and a frame it dropped may be one they wait for: whatever fails in
it (a broken frame, a state that cannot be encoded, ...) is fatal. The rank
aborts its world with ``ERR_INTERN`` and a reason that names the failure, as
``ERRORS_ARE_FATAL`` does, so the launcher or notebook says which rank broke
and how, instead of a job that hangs.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any, Callable

import zmq

from ..core import control as _control
from ..core.errors import ERR_INTERN
from .engine import IDLE_HANDOFF, Engine
from .introspect import describe_location as describe_location
from .introspect import injected_fault, running
from .introspect import resident_bytes as resident_bytes
from .introspect import signal_self as signal_self
from .transport import RETRY_MS

__all__ = ["ProgressThread", "describe_location", "describe_state", "resident_bytes", "signal_self"]


def _user_location(thread_id: int | None) -> str:
    """Where the main thread is in user code (see :func:`describe_location`)."""
    if thread_id is None:
        return ""
    return describe_location(sys._current_frames().get(thread_id))


def describe_state(
    engine: Engine,
    main_thread_id: int | None,
    main_native_id: int | None = None,
    activity: Callable[[], str] | None = None,
) -> dict[str, Any]:
    """What this rank is doing, as a control-protocol ``state`` message.

    ``activity`` says what the main thread does outside MPI ("idle" or "running"),
    where something above MPI knows (a notebook engine).

    A rank blocked in MPI also says whether its main thread is running
    (``busy``: copying a large message, say) or asleep, waiting for a frame.
    When several of its threads are blocked in MPI, the state's call is the
    first of :meth:`Engine.blocked_calls`, and ``threads`` lists the others.
    """
    state: dict[str, Any] = {
        "type": "state",
        "rank": engine.rank,
        "pid": engine.pid,
        "host": socket.gethostname(),
    }
    calls = engine.blocked_calls()
    if engine.finalized:
        state["state"] = "finalized"
    elif calls:
        state["state"] = "blocked"
        state.update(calls[0].as_dict())
        if len(calls) > 1:
            state["threads"] = [info.as_dict() for info in calls[1:]]
        busy = running(main_native_id)
        if busy is not None:
            state["busy"] = busy
        if engine.connecting or engine.other_jobs:
            state["other_jobs"] = True  # what it waits for may come from another job
    else:
        state["state"] = activity() if activity is not None else "running"
    if state["state"] != "idle":
        state["where"] = _user_location(main_thread_id)
    state.update(engine.statistics())
    state["cpu"] = round(time.process_time(), 4)
    rss = resident_bytes()
    if rss is not None:
        state["rss"] = rss
    return state


class ProgressThread(threading.Thread):
    """Background progress and control for one rank's engine."""

    def __init__(self, engine: Engine, abort: Callable[[int, str], Any] | None = None) -> None:
        super().__init__(name="ipympi-progress", daemon=True)
        self.engine = engine
        self.abort = abort  # (error code, reason): ends the job, as MPI.Abort does
        # What the main thread does outside MPI, when the layer above knows (see
        # describe_state); a notebook engine sets it.
        self.activity: Callable[[], str] | None = None
        self.main_thread_id = threading.main_thread().ident
        # Made by the main thread as MPI starts; after a fork (an engine) the main
        # thread's recorded native id is its parent's.
        main = threading.current_thread() is threading.main_thread()
        self.main_native_id = threading.get_native_id() if main else None
        self._stop_requested = False
        assert engine.transport is not None
        self.transport = engine.transport
        # Answers of the launcher to this rank's requests (``spawned``), by request id.
        self._answers: dict[int, dict[str, Any]] = {}
        self._answered = threading.Condition()

    def stop(self) -> None:
        self._stop_requested = True
        self.transport.ring()
        self.join(timeout=5)

    def ask_launcher(self, msg: dict[str, Any], ident: int, timeout: float) -> dict[str, Any]:
        """Send ``msg`` to the launcher and wait for its answer numbered ``ident`` (this
        thread receives it); ``TimeoutError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        self.transport.send_control(msg)
        with self._answered:
            while ident not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0 or not self.is_alive():
                    raise TimeoutError(f"the launcher did not answer within {timeout:g} s")
                self._answered.wait(min(left, 0.5))
            return self._answers.pop(ident)

    # -- loop ----------------------------------------------------------------
    def run(self) -> None:
        try:
            self._loop()
        except zmq.ContextTerminated:
            pass
        except BaseException as exc:
            if not self._stop_requested:
                self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        """End the rank's world, saying what broke (see the module docstring)."""
        reason = f"the MPI progress thread failed: {type(exc).__name__}: {exc}"
        try:
            if self.abort is not None:
                self.abort(ERR_INTERN, reason)  # tells the launcher, then exits
        finally:  # no abort hook, or it failed: say it here, and end
            os.write(2, f"ipympi: rank {self.engine.rank}: {reason}\n".encode(errors="replace"))
            os._exit(ERR_INTERN)

    def _loop(self) -> None:
        engine = self.engine
        transport = self.transport
        parked = zmq.Poller()
        if transport.ctl is not None:
            parked.register(transport.ctl, zmq.POLLIN)
        parked.register(transport.bell_r, zmq.POLLIN)
        driving = zmq.Poller()
        for source in transport.inputs:
            driving.register(source, zmq.POLLIN)
        driving.register(transport.bell_r, zmq.POLLIN)
        if transport.ctl is not None:
            driving.register(transport.ctl, zmq.POLLIN)
        timeout_ms = max(1, int(IDLE_HANDOFF * 1000))
        while not self._stop_requested:
            events = dict(parked.poll(timeout_ms))
            if transport.ctl is not None and transport.ctl in events:
                self._serve_control()
            if transport.bell_r in events:
                transport.drain_bell()
            if self._stop_requested:
                break
            idle = time.monotonic() - engine.last_exit >= IDLE_HANDOFF
            if engine.depth == 0 and engine.wanted == 0 and idle and engine.lock.acquire(False):
                try:
                    self._drive(driving)
                finally:
                    engine.lock.release()

    def _drive(self, poller: zmq.Poller) -> None:
        """Handle data until a thread wants the engine back."""
        engine = self.engine
        transport = self.transport
        # besides the inputs, what the poller watches
        others = [transport.bell_r] + ([transport.ctl] if transport.ctl is not None else [])
        while not self._stop_requested and engine.wanted == 0:
            if transport.ringed and not transport.may_sleep():  # frames in the rings
                engine.poll_once(False)
                continue
            if transport.has_output:
                # Frames queued for full peers go once a peer has room (its socket is
                # writable again), every few milliseconds at the latest.
                events = dict(transport.room_poller(*others).poll(RETRY_MS))
            else:
                events = dict(poller.poll(1000))
            if transport.bell_r in events:
                transport.drain_bell()
                return
            if transport.ctl is not None and transport.ctl in events:
                self._serve_control()
            if transport.has_output or any(source in events for source in transport.inputs):
                engine.poll_once(False)

    def _serve_control(self) -> None:
        while (msg := self.transport.recv_control()) is not None:
            injected_fault("control")
            kind = msg["type"]
            if kind == _control.QUERY:
                state = describe_state(
                    self.engine, self.main_thread_id, self.main_native_id, self.activity
                )
                self.transport.send_control(_control.answer(msg, state))
            elif kind == _control.PEER_EXIT:
                self.engine.note_peer_exit(int(msg["rank"]), str(msg.get("reason", "")))
            elif kind == _control.SIGNAL:
                signal_self(int(msg["signal"]))
            elif kind == _control.SPAWNED:
                with self._answered:
                    self._answers[int(msg["id"])] = msg
                    self._answered.notify_all()
