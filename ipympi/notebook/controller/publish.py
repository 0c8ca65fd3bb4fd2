"""Where a parallel cell's output goes: the notebook's IOPub channel, or a terminal.

In a Jupyter kernel (ipykernel's shell) messages are sent on the kernel's
IOPub socket as children of the request being executed, exactly as the
kernel's own output is: ``stream``, ``display_data``, ``execute_result``...
Anywhere else (terminal IPython, a script) they are written as text.
"""

from __future__ import annotations

import sys
from typing import Any

from .render import Publish

__all__ = ["cell_number", "publisher_for", "request_is_silent"]


def publisher_for(shell: Any) -> Publish:
    """A ``publish(msg_type, content, metadata)`` for ``shell`` (None: plain text)."""
    kernel = getattr(shell, "kernel", None)
    if kernel is not None and getattr(kernel, "iopub_socket", None) is not None:
        return _kernel_publisher(shell, kernel)
    return _text_publish


def cell_number(shell: Any) -> int:
    """The number of the cell being run (``In [n]``), whichever IPython counts it.

    IPython 9 increments ``execution_count`` before running a cell, IPython 8
    after; the display hook's ``prompt_count`` is the running cell's in both.
    """
    displayhook = getattr(shell, "displayhook", None)
    count = getattr(displayhook, "prompt_count", None)
    return int(count if count is not None else shell.execution_count)


def request_is_silent(shell: Any) -> bool:
    """Whether the kernel runs the current cell for a ``silent`` execute request."""
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return False
    try:
        parent = kernel.get_parent("shell")
    except Exception:
        return False
    return bool((parent or {}).get("content", {}).get("silent", False))


def _kernel_publisher(shell: Any, kernel: Any) -> Publish:
    session = kernel.session

    def publish(msg_type: str, content: dict, metadata: dict) -> None:
        # The controller's own prints are buffered by ipykernel: flush them
        # first, so that output appears in the order it was produced.
        for stream in (sys.stdout, sys.stderr):
            flush = getattr(stream, "flush", None)
            if flush is not None:
                flush()
        session.send(
            kernel.iopub_socket,
            msg_type,
            content,
            parent=kernel.get_parent("shell"),
            metadata=metadata,
            ident=kernel._topic(msg_type) if hasattr(kernel, "_topic") else None,
        )

    return publish


def _text_publish(msg_type: str, content: dict, metadata: dict) -> None:
    """Plain-text rendering for terminals and scripts."""
    if content.get("metadata", {}).get("ipympi", {}).get("progress"):
        return  # a terminal cannot update a line in place between other output
    if msg_type == "stream":
        stream = sys.stderr if content.get("name") == "stderr" else sys.stdout
        stream.write(content.get("text", ""))
        stream.flush()
    elif msg_type in ("display_data", "execute_result"):
        text = content.get("data", {}).get("text/plain")
        if text:
            print(text)
