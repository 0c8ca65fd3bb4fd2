"""numpy, imported when first used: ``from ..core.lazynumpy import np``.

A program that starts with ``from mpi4py import MPI`` and moves Python objects or bytes
never needs numpy, and importing it costs more CPU than the rest of MPI's start. So
MPI's modules name numpy through :data:`np`, which stands for the module: its first
attribute read imports numpy and copies the module's names into it, so that every
later read is a plain attribute read, as on numpy itself. The first buffer, datatype
layout or reduction that needs numpy imports it. Type checkers see numpy.
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING, Any

__all__ = ["np"]


class _Numpy(types.ModuleType):
    """Stands for the numpy module until, and after, its first use."""

    def __getattr__(self, name: str) -> Any:
        numpy = importlib.import_module("numpy")
        for key, value in vars(numpy).items():
            if not key.startswith("__"):
                self.__dict__[key] = value
        value = getattr(numpy, name)  # numpy's own lazy names too (np.linalg, ...)
        if not name.startswith("__"):
            self.__dict__[name] = value
        return value


if TYPE_CHECKING:
    import numpy as np
else:
    np = _Numpy("numpy")
