"""Callbacks that ``Finalize`` runs first, before anything is shut down.

The standard has ``Finalize`` free ``COMM_SELF`` first, so the delete callbacks
of its attributes run while MPI is still fully usable (``Is_finalized()`` is
false inside them). Modules that need this register a callable here.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["register", "run"]

_hooks: list[Callable[[], None]] = []


def register(fn: Callable[[], None]) -> None:
    _hooks.append(fn)


def run() -> None:
    for fn in list(_hooks):
        fn()
