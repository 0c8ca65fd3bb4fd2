"""The ``ipympi`` kernel's own ``sys.stdout``/``sys.stderr``.

ipykernel's ``OutStream.flush`` hands the flush to the IOPub thread and waits
for it, even when nothing was written. The kernel flushes both streams twice
per request, so a parallel cell, which writes nothing in the kernel itself,
paid four thread hand-offs; on a machine whose cores the ranks keep busy each
is a wait for the IOPub thread to be scheduled (about 1 ms a cell in all,
measured with 4 ranks on 2 cores). This stream returns at once when nothing
waits to be sent, and flushes as ipykernel does otherwise.
"""

from __future__ import annotations

from ipykernel import iostream

__all__ = ["OutStream"]


class OutStream(iostream.OutStream):
    """ipykernel's output stream, whose ``flush`` skips the IOPub thread when idle."""

    def flush(self) -> None:
        if self._nothing_to_send():
            return
        super().flush()

    def _nothing_to_send(self) -> bool:
        """No text buffered and no flush scheduled (a write schedules one)."""
        try:
            return not (self._flush_pending or self._subprocess_flush_pending or self._buffers)
        except AttributeError:  # an ipykernel that keeps its buffer otherwise: always flush
            return False
