"""The functions of mpi4py's top-level package, as ipympi provides them.

``mpi4py.get_include``, ``get_config`` and ``profile`` exist for programs and build
scripts written for mpi4py. ipympi's MPI is written in Python, which decides what each
can mean here: there is no C API to compile against, no MPI build to describe, and no C
library whose calls a PMPI profiler could intercept.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import warnings
from collections.abc import Iterable
from typing import Union

__all__ = ["get_config", "get_include", "profile"]

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def get_include() -> str:
    """mpi4py's C headers directory: ipympi has no C API, so this raises ``RuntimeError``.

    Extension modules that compile against mpi4py's C API (``mpi4py.h``, ``MPI.pxd``)
    need a real MPI and the real mpi4py; say so at once rather than return a path that
    compiles against nothing.
    """
    raise RuntimeError(
        "mpi4py.get_include(): this is ipympi's mpi4py, an MPI written in Python, which has "
        "no C API or headers; build extensions against the real mpi4py on a real MPI"
    )


def get_config() -> dict[str, str]:
    """Information about the MPI build, as mpi4py returns it: empty, nothing was compiled."""
    return {}


def profile(name: str, *, path: PathLike | Iterable[PathLike] | None = None) -> None:
    """Load the shared library ``name`` for the MPI profiling interface, as mpi4py does.

    The library is looked for in ``path`` (a directory or a sequence of them) as the file
    ``name``, ``lib<name>.so`` or ``<name>.so``, then where the system's loader finds it;
    ``ValueError`` if it is nowhere, ``UserWarning`` if the file cannot be loaded. It is
    loaded with ``RTLD_GLOBAL``, but ipympi's MPI calls are Python calls, not calls into a C
    MPI library: a PMPI profiler sees none of them, which a ``RuntimeWarning`` says.
    """
    filename = _find_library(str(name), _directories(path))
    if filename is None:
        raise ValueError(f"profiler library {name!r} not found")
    try:
        ctypes.CDLL(filename, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        warnings.warn(f"cannot load profiler library {filename!r}: {exc}", UserWarning, 2)
        return
    warnings.warn(
        f"loaded {filename!r}, but ipympi's MPI is written in Python: a PMPI profiler "
        "intercepts none of its calls",
        RuntimeWarning,
        2,
    )


def _directories(path: PathLike | Iterable[PathLike] | None) -> list[str]:
    if path is None:
        return []
    if isinstance(path, (str, bytes, os.PathLike)):
        path = [path]
    return [os.fsdecode(entry) for entry in path]


def _find_library(name: str, directories: list[str]) -> str | None:
    """The file ``name`` stands for: in ``directories`` first, then the system's."""
    if os.sep in name and os.path.isfile(name):
        return name
    for directory in directories:
        for candidate in (name, f"lib{name}.so", f"{name}.so"):
            filename = os.path.join(directory, candidate)
            if os.path.isfile(filename):
                return filename
    return ctypes.util.find_library(name.removeprefix("lib").split(".so")[0]) if name else None
