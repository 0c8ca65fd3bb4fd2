"""``MPI.Pickle``: how lower-case methods turn Python objects into bytes.

Users may swap the serializer (``MPI.pickle.__init__(dill.dumps, dill.loads)``)
as with mpi4py. Protocol 5 keeps large numpy arrays to a single copy.
``dumps_oob``/``loads_oob`` keep large buffers out of the stream (pickle protocol 5's
out-of-band buffers), for :mod:`ipympi.mpi4py.util.pkl5`. The default protocol and out-of-band
threshold are ``MPI4PY_PICKLE_PROTOCOL`` and ``MPI4PY_PICKLE_THRESHOLD`` as set when MPI
is imported (else the highest protocol and 256 KiB), as with mpi4py.
"""

from __future__ import annotations

import os
import pickle as _stdlib_pickle
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

from ..core.constants import PROC_NULL

if TYPE_CHECKING:
    from .memory import buffer

__all__ = ["Pickle", "pickle"]

# The defaults, read when MPI is imported (read_environment), as mpi4py reads them.
_DEFAULT_PROTOCOL = _stdlib_pickle.HIGHEST_PROTOCOL
_DEFAULT_THRESHOLD = 256 * 1024  # bytes from which a buffer goes out of band


def read_environment() -> None:
    """Take the defaults from ``MPI4PY_PICKLE_PROTOCOL`` and ``MPI4PY_PICKLE_THRESHOLD``
    now, and give them to ``MPI.pickle``: ``ipympi.MPI`` calls it when it is imported
    (in a rank forked from a template that imported this module before the program set
    its environment, too)."""
    global _DEFAULT_PROTOCOL, _DEFAULT_THRESHOLD
    env = os.environ
    _DEFAULT_PROTOCOL = int(env.get("MPI4PY_PICKLE_PROTOCOL", _stdlib_pickle.HIGHEST_PROTOCOL))
    _DEFAULT_THRESHOLD = int(env.get("MPI4PY_PICKLE_THRESHOLD", 256 * 1024))
    pickle.PROTOCOL = _DEFAULT_PROTOCOL
    pickle.THRESHOLD = None


class Pickle:
    """Serializer used by the lower-case (object) communication methods."""

    def __init__(
        self,
        dumps: Callable[..., bytes] = _stdlib_pickle.dumps,
        loads: Callable[..., Any] = _stdlib_pickle.loads,
        protocol: int | None = None,
        threshold: int | None = None,
    ) -> None:
        self._dumps = dumps
        self._loads = loads
        self.PROTOCOL = _DEFAULT_PROTOCOL if protocol is None else protocol
        self.THRESHOLD = threshold

    @property
    def THRESHOLD(self) -> int:
        """Out-of-band threshold: buffers of at least this many bytes go out of band.

        ``None`` restores the default (``MPI4PY_PICKLE_THRESHOLD`` when MPI was imported,
        else 256 KiB); a negative value sends every buffer out of band.
        """
        return self._threshold

    @THRESHOLD.setter
    def THRESHOLD(self, value: int | None) -> None:
        self._threshold = _DEFAULT_THRESHOLD if value is None else int(value)

    def dumps(self, obj: Any) -> bytes:
        if self._dumps is _stdlib_pickle.dumps:
            return _stdlib_pickle.dumps(obj, self.PROTOCOL)
        return self._dumps(obj)

    def loads(self, data: Any) -> Any:
        return self._loads(data)

    def dumps_oob(self, obj: Any) -> tuple[bytes, list[buffer]]:
        """Serialize ``obj`` to a pickle stream and its out-of-band buffers.

        Protocol 5 at least is used (out-of-band buffers need it). A buffer that is not
        contiguous, or smaller than ``THRESHOLD``, stays in the stream.
        """
        threshold = self._threshold
        from .memory import buffer  # numpy's: imported for out-of-band buffers only

        buffers: list[buffer] = []

        def in_band(picklebuffer: _stdlib_pickle.PickleBuffer) -> bool:
            try:
                raw = picklebuffer.raw()
            except BufferError:  # not contiguous: pickled in band
                return True
            if raw.nbytes < threshold:
                return True
            buffers.append(buffer(raw))
            return False

        protocol = self.PROTOCOL
        if protocol is None or protocol < 0:
            protocol = _stdlib_pickle.HIGHEST_PROTOCOL
        data = self._dumps(obj, max(protocol, 5), buffer_callback=in_band)
        return data, buffers

    def loads_oob(self, data: Any, buffers: Sequence[Any]) -> Any:
        """Deserialize an object from a pickle stream and its out-of-band buffers."""
        return self._loads(data, buffers=buffers)


pickle = Pickle()


def object_items(sendobj: Any, size: int) -> list[Any]:
    """The objects a lower-case scatter or alltoall sends, one per destination.

    As in mpi4py: None stands for None to every destination, and a sequence of another
    length is a ``ValueError``.
    """
    if sendobj is None:
        return [None] * size
    items = list(sendobj)
    if len(items) != size:
        raise ValueError(f"expecting {size} items, got {len(items)}")
    return items


def dumps_message(obj: Any, dest: int) -> bytes:
    """The bytes of a lower-case send of ``obj`` to ``dest`` (none to ``PROC_NULL``)."""
    if dest == PROC_NULL:
        return b""
    return pickle.dumps(obj)


def loads_message(op: Any) -> Any:
    """The object a lower-case receive ``op`` got; an empty message (``Send`` of no
    bytes) is ``None``."""
    if not op.data:
        return None
    return pickle.loads(op.data)
