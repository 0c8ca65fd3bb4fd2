"""Ctrl-C in the controller while it follows a parallel cell: raised only where it waits.

See :class:`InterruptGate`; :func:`interrupts_at_waits` puts one in place, and
:meth:`~ipympi.notebook.controller.cluster.Cluster.pump` opens it for its wait.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["InterruptGate", "current_gate", "interrupts_at_waits"]


class InterruptGate:
    """Ctrl-C while the controller follows a cell, raised only where it waits.

    Python raises KeyboardInterrupt wherever the main thread is when SIGINT
    arrives. Following a cell, the controller passes an interrupt on to the
    ranks, collects their replies and realigns them; a second Ctrl-C, or one
    that comes while the stuck-cell rule stops the ranks, cut that handling
    short at any line and left the cell without a reply. While a gate is in
    place (:func:`interrupts_at_waits`), SIGINT raises only inside the
    wait of :meth:`Cluster.pump`, whose callers handle it; one that arrives
    elsewhere is raised at the next such wait, or dropped with the gate.
    """

    def __init__(self) -> None:
        self.pending = False  # an interrupt arrived outside a wait
        self.open = False  # inside a wait: raise at once

    def on_sigint(self, signum: int, frame: Any) -> None:
        if self.open:
            self.open = False
            raise KeyboardInterrupt
        self.pending = True

    def enter_wait(self) -> None:
        """Open for the wait to come; raise an interrupt that arrived before it."""
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt
        self.open = True


_gate: InterruptGate | None = None  # the gate in place, if any


def current_gate() -> InterruptGate | None:
    """The gate in place (inside :func:`interrupts_at_waits`), else None."""
    return _gate


@contextlib.contextmanager
def interrupts_at_waits() -> Iterator[None]:
    """While the controller runs a parallel cell: Ctrl-C raises only in
    :meth:`Cluster.pump`'s wait (see :class:`InterruptGate`). Only the main thread
    can catch signals; elsewhere, and inside another such block, this changes
    nothing."""
    global _gate
    if _gate is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    gate = InterruptGate()
    previous = signal.signal(signal.SIGINT, gate.on_sigint) or signal.default_int_handler
    _gate = gate
    try:
        yield
    finally:
        _gate = None
        signal.signal(signal.SIGINT, previous)
