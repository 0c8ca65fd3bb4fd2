"""ipympi's IPython extension: ``%load_ext ipympi``, then ``%mpi start -n N`` and ``%%px``.

The ``ipympi`` kernel loads it too, starts a session of ``IPYMPI_NP`` ranks
and turns parallel mode on, so every cell runs on the ranks there.
"""

from __future__ import annotations

import atexit
from typing import Any

from ._autopx import AutoParallel
from ._parallel import ParallelMagics

__all__ = ["load_ipython_extension", "unload_ipython_extension"]

_loaded: dict[int, tuple[AutoParallel, ParallelMagics]] = {}


def load_ipython_extension(shell: Any) -> ParallelMagics:
    """Register the magics and the ``%autopx`` transformer with ``shell``."""
    if id(shell) in _loaded:
        return _loaded[id(shell)][1]
    autopx = AutoParallel(shell)
    magics = ParallelMagics(shell, autopx)
    shell.register_magics(magics)
    _loaded[id(shell)] = (autopx, magics)
    atexit.register(_close_session)
    return magics


def unload_ipython_extension(shell: Any) -> None:
    """Stop the session and remove the transformer (the magics stay registered)."""
    entry = _loaded.pop(id(shell), None)
    if entry is not None:
        entry[0].remove()
    _close_session()


def _close_session() -> None:
    from ipympi.notebook.controller import session

    try:
        cluster = session.current()
    except Exception:
        return
    session.set_current(None)
    cluster.close()
