"""``MPI.Pickle``: how lower-case methods turn Python objects into bytes.

Users may swap the serializer (``MPI.pickle.__init__(dill.dumps, dill.loads)``)
as with mpi4py. Protocol 5 keeps large numpy arrays to a single copy.
"""

from __future__ import annotations

import pickle as _stdlib_pickle
from typing import Any, Callable

__all__ = ["Pickle", "pickle"]


class Pickle:
    """Serializer used by the lower-case (object) communication methods."""

    def __init__(
        self,
        dumps: Callable[..., bytes] = _stdlib_pickle.dumps,
        loads: Callable[..., Any] = _stdlib_pickle.loads,
        protocol: int | None = None,
    ) -> None:
        self._dumps = dumps
        self._loads = loads
        self.PROTOCOL = _stdlib_pickle.HIGHEST_PROTOCOL if protocol is None else protocol

    def dumps(self, obj: Any) -> bytes:
        if self._dumps is _stdlib_pickle.dumps:
            return _stdlib_pickle.dumps(obj, self.PROTOCOL)
        return self._dumps(obj)

    def loads(self, data: Any) -> Any:
        return self._loads(data)


pickle = Pickle()
