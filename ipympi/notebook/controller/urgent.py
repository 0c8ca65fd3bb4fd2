"""The magics that get through while a parallel cell runs: ``%mpi status``, ``stop``, ``restart``.

A Jupyter kernel runs the requests of its shell channel one at a time, so a
cell that waits for its ranks holds up every cell sent after it, ``%mpi
stop`` included. The ``ipympi`` kernel reads its shell channel in a thread of
its own (ipykernel 7 does, and hands each request to the main thread); there
:meth:`UrgentMagics.take` looks at each execute request while a parallel
cell runs. A cell that is only ``%mpi status``, ``%mpi stop`` or ``%mpi
restart [options]`` (:func:`urgent_line`) is handed to the main thread as an
errand of the cluster (:mod:`ipympi.notebook.controller.errands`), which runs it at its
next wait for the ranks: output and reply go out as for any cell (``busy``,
``execute_input``, its output, ``execute_reply``, ``idle``, all with the
request as parent), and a stopped or replaced world ends the running cell
with an error that says so. Every other request waits its turn. The
notebook's interrupt needs none of this: it is a signal, taken where the
controller waits.
"""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

from . import session

__all__ = ["UrgentMagics", "urgent_line"]

_URGENT = re.compile(r"%mpi[ \t]+(status|stop|restart)([ \t].*)?")


def urgent_line(code: str) -> str | None:
    """The ``%mpi`` line to run at once when ``code`` is nothing but one of those
    magics (``"restart -n 2"``), else None."""
    text = code.strip()
    if "\n" in text or _URGENT.fullmatch(text) is None:
        return None
    return text[len("%mpi") :].strip()


class UrgentMagics:
    """The ``ipympi`` kernel's way for the urgent magics past a running cell."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def take(self, frames: list[Any]) -> bool:
        """In the shell-channel thread: take the request in ``frames`` if it is urgent
        and a parallel cell is running; False leaves it to the usual way."""
        try:
            cluster = session.current()
        except Exception:
            return False
        if not cluster.errands.open:
            return False
        kernel = self.kernel
        try:
            idents, rest = kernel.session.feed_identities(frames, copy=False)
            msg = kernel.session.deserialize(rest, content=False, copy=False)
            header = msg["header"]
            if header.get("msg_type") != "execute_request" or header.get("subshell_id"):
                return False
            content = kernel.session.unpack(msg["content"])
            line = urgent_line(str(content.get("code", "")))
        except Exception:
            return False  # the usual way reports a bad message
        if line is None:
            return False
        msg["content"] = content
        return cluster.errands.hand(lambda: self.run(idents, msg, line))

    def run(self, idents: list[bytes], msg: dict[str, Any], line: str) -> None:
        """In the main thread: run the magic of request ``msg`` and answer it."""
        kernel, shell = self.kernel, self.kernel.shell
        count = shell.execution_count
        self._publish(msg, "status", {"execution_state": "busy"})
        code = msg["content"]["code"]
        self._publish(msg, "execute_input", {"code": code, "execution_count": count})
        out = io.StringIO()
        reply: dict[str, Any] = {"status": "ok", "execution_count": count}
        try:
            with contextlib.redirect_stdout(out):
                value = shell.find_line_magic("mpi")(line)
        except BaseException as exc:  # a UsageError, a failure of the session, a Ctrl-C
            ename = type(exc).__name__
            self._stream(msg, "stdout", out.getvalue())
            self._stream(msg, "stderr", f"{ename}: {exc}\n")
            reply.update(status="error", ename=ename, evalue=str(exc), traceback=[])
            if not isinstance(exc, Exception):
                raise  # the interrupt is the running cell's, once this request is answered
        else:
            self._stream(msg, "stdout", out.getvalue())
            if value is not None:
                data, metadata = shell.display_formatter.format(value)
                result = {"data": data, "metadata": metadata, "execution_count": count}
                self._publish(msg, "execute_result", result)
            reply.update(user_expressions={}, payload=[])
        finally:
            manager = kernel.shell_channel_thread.manager
            channel = manager.get_subshell_to_shell_channel_socket(None)
            kernel.session.send(channel, "execute_reply", reply, msg, ident=idents)
            self._publish(msg, "status", {"execution_state": "idle"})

    def _stream(self, msg: dict[str, Any], name: str, text: str) -> None:
        if text:
            self._publish(msg, "stream", {"name": name, "text": text})

    def _publish(self, msg: dict[str, Any], kind: str, content: dict[str, Any]) -> None:
        kernel = self.kernel
        kernel.session.send(
            kernel.iopub_socket, kind, content, parent=msg, ident=kernel._topic(kind)
        )
