"""A user's traceback from many ranks: ipympi's own frames hidden, equal ones told once.

Shared by the notebook (a cell's error, :mod:`ipympi.notebook.engine.errors` and
:func:`ipympi.notebook.controller.render.compose_error`) and the command line
(``python -m ipympi.run``: a rank's uncaught exception goes to the launcher,
which prints each distinct traceback once, headed by the ranks that raised it).

- :func:`hide_internal` drops the frames of code inside the ipympi package:
  they say nothing about the user's program. A traceback made only of such
  frames (a fault of ipympi itself) is left whole. The frames of :mod:`runpy`
  before the program's own (``python -m mpi4py prog.py``) go too.
  ``IPYMPI_TRACEBACK=full`` (:func:`wants_full`) keeps every frame.
- :func:`group_identical` groups the tracebacks of several ranks that are the
  same text once colours are taken out, in rank order.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "ENV_TRACEBACK",
    "group_identical",
    "headed",
    "hide_internal",
    "is_internal",
    "strip_ansi",
    "wants_full",
]

ENV_TRACEBACK = "IPYMPI_TRACEBACK"  # "full": keep ipympi's own frames in tracebacks
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (colours, cursor moves)."""
    return _ANSI_RE.sub("", text)


def wants_full(env: Mapping[str, str]) -> bool:
    """Whether ``env`` asks for whole tracebacks (``IPYMPI_TRACEBACK=full``)."""
    return env.get(ENV_TRACEBACK, "").strip().lower() == "full"


def is_internal(filename: str) -> bool:
    """Whether ``filename`` is a module of the ipympi package."""
    return filename.startswith(PACKAGE_DIR)


def hide_internal(tb: Any) -> Any:
    """``tb`` (a traceback object) without the entries of ipympi's own code.

    The entries are unlinked in place; the new head is returned. When every
    entry is ipympi's, ``tb`` is returned unchanged.
    """
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    kept = [e for e in entries if not is_internal(e.tb_frame.f_code.co_filename)]
    while kept and _is_runpy(kept[0].tb_frame.f_code.co_filename):
        kept.pop(0)  # how ``python -m mpi4py prog.py`` started the program
    if not kept:
        return entries[0] if entries else None
    for entry, following in zip(kept, [*kept[1:], None]):
        entry.tb_next = following
    return kept[0]


def _is_runpy(filename: str) -> bool:
    return filename == "<frozen runpy>" or os.path.basename(filename) == "runpy.py"


def group_identical(
    tracebacks: Mapping[int, Sequence[str]],
) -> list[tuple[list[str], list[int]]]:
    """``(lines, ranks)`` for each distinct traceback, in the order of the lowest rank.

    Two tracebacks are the same when their lines are, colours aside; the lines
    kept are those of the lowest rank.
    """
    groups: dict[tuple[str, ...], tuple[list[str], list[int]]] = {}
    for rank in sorted(tracebacks):
        lines = [str(line) for line in tracebacks[rank]]
        key = tuple(strip_ansi(line) for line in lines)
        groups.setdefault(key, (lines, []))[1].append(rank)
    return list(groups.values())


def headed(lines: Iterable[str], head: str) -> list[str]:
    """``lines`` with ``head`` before the first one (``[ranks 0-3] Traceback ...``)."""
    out = list(lines)
    if out:
        out[0] = f"{head} {out[0]}"
    return out
