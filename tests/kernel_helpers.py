"""Helpers for tests that drive real Jupyter kernels over the messaging protocol.

The kernel tests start the ``ipympi`` kernel (and, for the extension, a stock
IPython kernel) exactly as a notebook server would: from a kernel spec found
through ``JUPYTER_PATH``, talked to by a ``jupyter_client`` client. The specs
go into a temporary prefix (never the user's or the environment's Jupyter
directories), the stock ``python3`` spec included, so that it runs this
interpreter, where ipympi is installed.

Each test module wraps :func:`kernel_specs_installed` in a module-scoped
fixture and starts its kernels with :class:`KernelSession`. Every wait is
bounded, and every kernel started is shut down, forcibly if it does not go
quietly, so that a failing test leaves no kernel, supervisor or engine behind.
Processes are found through ``/proc`` (Linux), the platform the engines'
death-with-parent guarantees are made for, and only among a kernel's own
descendants, so that other sessions running meanwhile do not count.
"""

from __future__ import annotations

import ast
import contextlib
import os
import queue
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import alive, wait_gone
from jupyter_client.manager import KernelManager

from ipympi.notebook import kernelspec as _kernelspec
from ipympi.notebook.controller.render import strip_ansi

__all__ = [
    "ENGINE_MODULE",
    "KernelSession",
    "alive",
    "children",
    "cmdline",
    "descendants",
    "error_text",
    "execute_headers",
    "failing_cell",
    "install_kernel_specs",
    "kernel_env",
    "kernel_specs_installed",
    "outputs",
    "session_processes",
    "stream_text",
    "strip_ansi",
    "wait_gone",
]

ROOT = Path(__file__).resolve().parent.parent
ENGINE_MODULE = "ipympi.notebook.engine"  # the command line of the supervisor and of every engine
STARTUP_TIMEOUT = 60.0  # seconds for a kernel to answer kernel_info (a loaded CI machine)


# -- kernel specs -------------------------------------------------------------------------
def install_kernel_specs(prefix: Path) -> Path:
    """Install the ``ipympi`` and ``python3`` specs under ``prefix``; return the data dir.

    The data dir (``PREFIX/share/jupyter``) is what ``JUPYTER_PATH`` must name.
    """
    from ipykernel.kernelspec import install as install_ipykernel

    _kernelspec.install(prefix=str(prefix))
    install_ipykernel(prefix=str(prefix))
    return prefix / "share" / "jupyter"


@contextlib.contextmanager
def kernel_specs_installed(prefix: Path) -> Iterator[Path]:
    """Install the specs under ``prefix`` and put them first on ``JUPYTER_PATH`` meanwhile.

    A test module's fixture wraps it, e.g. (module scope: one install per module)::

        @pytest.fixture(scope="module")
        def kernel_specs(tmp_path_factory):
            with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
                yield data_dir
    """
    data_dir = install_kernel_specs(prefix)
    with pytest.MonkeyPatch.context() as mp:
        path = [str(data_dir), os.environ.get("JUPYTER_PATH", "")]
        mp.setenv("JUPYTER_PATH", os.pathsep.join(filter(None, path)))
        yield data_dir


def kernel_env(np: int | None = None, **extra: str) -> dict[str, str]:
    """The environment of a kernel: ours, ipympi importable, ``IPYMPI_NP=np`` if given.

    Other ``IPYMPI_*`` settings of the caller's environment are left out so
    that they cannot change what the tests see.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("IPYMPI_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    if np is not None:
        env[_kernelspec.NP_ENV] = str(np)
    env.update(extra)
    return env


# -- a kernel and a client ----------------------------------------------------------------
class KernelSession:
    """A kernel started from its spec and a blocking client connected to it.

    ``execute`` sends one cell and returns its ``execute_reply`` together with
    every IOPub message the kernel sent in answer to that request, from
    ``status: busy`` to ``status: idle`` inclusive. Use it as a context
    manager, or call :meth:`shutdown`.
    """

    def __init__(self, kernel_name: str, env: dict[str, str], stderr: Any = None) -> None:
        """``stderr``: a file for the kernel process's own stderr (default: ours)."""
        self.km = KernelManager(kernel_name=kernel_name)
        self.km.start_kernel(env=env, **({} if stderr is None else {"stderr": stderr}))
        # Shell replies read while waiting for another's (requests of two subshells, or a
        # cell's reply that comes while a subshell's request is followed), by request id.
        self._replies: dict[str, dict] = {}
        try:
            self.kc = self.km.client()
            self.kc.start_channels()
            self.kc.wait_for_ready(timeout=STARTUP_TIMEOUT)
        except BaseException:
            self._stop(now=True)
            raise

    @property
    def pid(self) -> int:
        """The kernel process."""
        return self.km.provisioner.process.pid  # type: ignore[union-attr]

    def __enter__(self) -> KernelSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- requests --------------------------------------------------------------------------
    def send(self, code: str, **kwargs: Any) -> str:
        """Send an execute request without waiting; return its message id."""
        kwargs.setdefault("allow_stdin", False)
        return self.kc.execute(code, **kwargs)

    def collect(self, msg_id: str, timeout: float = 30.0) -> tuple[dict, list[dict]]:
        """The reply to request ``msg_id`` and its IOPub messages, up to ``status: idle``."""
        deadline = time.monotonic() + timeout
        messages = self.iopub_until_idle(msg_id, deadline)
        reply = self.shell_reply(msg_id, deadline)
        return reply, messages

    def execute(self, code: str, timeout: float = 30.0, **kwargs: Any) -> tuple[dict, list[dict]]:
        """Run ``code``; its ``execute_reply`` and IOPub messages (see the class docstring).

        After a cell that failed, ipykernel aborts the execute requests queued behind it
        until its shell thread has handled a "stop aborting" message it posts to itself; a
        request sent the moment the failure's reply arrives can get there first and be
        answered ``aborted`` (more often on a loaded machine). A person's next cell, or
        a notebook's, comes later: such a request is sent once more.
        """
        reply, messages = self.collect(self.send(code, **kwargs), timeout)
        if reply["content"]["status"] == "aborted":
            reply, messages = self.collect(self.send(code, **kwargs), timeout)
        return reply, messages

    def iopub_until_idle(self, msg_id: str, deadline: float) -> list[dict]:
        messages: list[dict] = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=_left(deadline, f"IOPub idle for {msg_id}"))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            messages.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return messages

    def shell_reply(self, msg_id: str, deadline: float) -> dict:
        if msg_id in self._replies:
            return self._replies.pop(msg_id)
        while True:
            msg = self.kc.get_shell_msg(timeout=_left(deadline, f"the reply to {msg_id}"))
            parent = msg["parent_header"].get("msg_id")
            if parent == msg_id:
                return msg
            self._replies[parent] = msg

    def request(self, method: str, *args: Any, timeout: float = 15.0, **kwargs: Any) -> dict:
        """Send a shell request (``complete``, ``inspect``, ...); return its reply's content."""
        msg_id = getattr(self.kc, method)(*args, **kwargs)
        return self.shell_reply(msg_id, time.monotonic() + timeout)["content"]

    def ok(self, code: str, timeout: float = 30.0) -> list[dict]:
        """Run ``code``, which must succeed; its output messages (no status/execute_input)."""
        reply, messages = self.execute(code, timeout)
        content = reply["content"]
        detail = "\n".join(strip_ansi(line) for line in content.get("traceback", []))
        assert content["status"] == "ok", f"{code!r} failed: {detail}"
        return outputs(messages)

    def value(self, code: str, timeout: float = 30.0) -> Any:
        """The literal value of the one ``execute_result`` of ``code`` (run where it runs)."""
        results = [m for m in self.ok(code, timeout) if m["msg_type"] == "execute_result"]
        assert len(results) == 1, f"{code!r} gave {len(results)} results"
        return ast.literal_eval(results[0]["content"]["data"]["text/plain"])

    def drain_iopub(self) -> None:
        """Drop IOPub messages already sent (left over by an abandoned request)."""
        with contextlib.suppress(queue.Empty):
            while True:
                self.kc.get_iopub_msg(timeout=0.2)

    # -- the end ---------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Shut the kernel down politely; kill it if that fails. Safe to call twice."""
        try:
            self._stop(now=False)
        except Exception:
            self._stop(now=True)

    def _stop(self, now: bool) -> None:
        with contextlib.suppress(Exception):
            self.kc.stop_channels()
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=now)


def _left(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"timed out waiting for {what}")
    return left


# -- messages -----------------------------------------------------------------------------
def outputs(messages: list[dict]) -> list[dict]:
    """The output messages among ``messages``: not ``status`` and not ``execute_input``."""
    return [m for m in messages if m["msg_type"] not in ("status", "execute_input")]


def stream_text(messages: list[dict], name: str = "stdout") -> str:
    """All text of stream ``name`` in ``messages``, concatenated."""
    return "".join(
        m["content"]["text"]
        for m in messages
        if m["msg_type"] == "stream" and m["content"]["name"] == name
    )


def error_text(message: dict) -> list[str]:
    """The lines of an ``error`` message's (or error reply's) traceback, ANSI codes removed
    (a reply without one, such as ``aborted``, gives its whole content)."""
    content = message["content"]
    if "traceback" not in content:
        return [repr(content)]
    return [strip_ansi(line) for line in content["traceback"]]


def failing_cell(
    kernel: KernelSession, code: str, interrupt_after: float | None = None, timeout: float = 35.0
) -> tuple[dict, list[str], float]:
    """Run a cell that must fail: its reply, its one error's text lines, seconds to report.

    With ``interrupt_after``, the kernel is interrupted that many seconds after
    the cell was sent, and the time is counted from the interrupt.
    """
    msg_id = kernel.send(code)
    started = time.monotonic()
    if interrupt_after is not None:
        time.sleep(interrupt_after)
        kernel.km.interrupt_kernel()
        started = time.monotonic()
    reply, messages = kernel.collect(msg_id, timeout=timeout)
    took = time.monotonic() - started
    content = reply["content"]
    assert content["status"] == "error", f"{code!r} did not fail"
    errors = [m for m in messages if m["msg_type"] == "error"]
    assert len(errors) == 1, [m["msg_type"] for m in messages]
    assert errors[0]["content"]["ename"] == content["ename"]
    assert errors[0]["content"]["evalue"] == content["evalue"]
    lines = [line for entry in error_text(errors[0]) for line in entry.splitlines()]
    return reply, lines, took


def execute_headers(lines: list[str]) -> list[str]:
    """The ``[R:execute]`` headers among a composed traceback's lines."""
    return [line for line in lines if re.fullmatch(r"\[[0-9,\-]+:execute\]", line)]


# -- processes ----------------------------------------------------------------------------
def cmdline(pid: int) -> str:
    """The command line of ``pid``, its words joined by spaces ("" if it has gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def children(pid: int) -> list[int]:
    """The direct children of ``pid``."""
    return [p for p in _pids() if _ppid(p) == pid]


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid``: its children, theirs, and so on."""
    found: list[int] = []
    level = [pid]
    while level:
        level = [c for p in level for c in children(p) if alive(c)]
        found += level
    return found


def session_processes(kernel_pid: int) -> tuple[list[int], list[int]]:
    """The supervisors a kernel started and the engines they forked: (supervisors, engines)."""
    supervisors = [p for p in children(kernel_pid) if ENGINE_MODULE in cmdline(p).split()]
    engines = [c for s in supervisors for c in children(s) if alive(c)]
    return supervisors, engines
