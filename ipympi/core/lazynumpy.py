"""numpy, imported when first used: ``from ..core.lazynumpy import np``.

A program that starts with ``from mpi4py import MPI`` and moves Python objects or bytes
never needs numpy, and importing it costs more CPU than the rest of MPI's start. So
MPI's modules name numpy through :data:`np`, which stands for the module: its first
attribute read imports numpy, copies the module's names into it and turns it into a
plain module, so that every later read is as fast as on numpy itself. The first buffer,
datatype layout or reduction that needs numpy imports it. Type checkers see numpy.
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING, Any

__all__ = ["np"]


class _Numpy(types.ModuleType):
    """Stands for the numpy module until its first use; a plain module after it."""

    def __getattr__(self, name: str) -> Any:
        numpy = importlib.import_module("numpy")
        for key, value in vars(numpy).items():
            if not key.startswith("__") or key in ("__getattr__", "__dir__", "__version__"):
                self.__dict__[key] = value  # numpy's own __getattr__ finds its lazy names
        # A plain module from now on: later reads skip this hook, as fast as numpy's own.
        self.__class__ = types.ModuleType  # type: ignore[assignment]
        return getattr(numpy, name)


if TYPE_CHECKING:
    import numpy as np
else:
    np = _Numpy("numpy")
