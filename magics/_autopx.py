"""``%autopx``: every cell runs on the ranks, through IPython's input transformers.

A cleanup transformer (the first stage of IPython's input transformation)
turns a cell into a ``%%px`` cell, except cells that talk to the controller
(``%mpi``, ``%px``/``%%px``, ``%pxresult``, ``%pxconfig``, ``%autopx``) and
``%%local`` cells, whose first line it removes so they run in the controller.
This is IPython's own hook for rewriting cells: nothing is monkeypatched, and
the transformer is marked as having side effects so IPython leaves it out of
"is this input complete?" checks (multi-line input in consoles still works).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CONTROLLER_MAGICS", "AutoParallel"]

# Cells starting with one of these always run in the controller.
CONTROLLER_MAGICS = ("%mpi", "%%mpi", "%px", "%%px", "%pxresult", "%pxconfig", "%autopx")
LOCAL = "%%local"


def _first_word(lines: list[str]) -> str:
    for line in lines:
        if line.strip():
            return line.split(None, 1)[0]
    return ""


class AutoParallel:
    """The transformer; ``enabled`` switches it (``%autopx``, or always on in the kernel)."""

    has_side_effects = True  # IPython: skip me when checking whether input is complete

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.enabled = False
        shell.input_transformers_cleanup.append(self)

    def remove(self) -> None:
        cleanup = self.shell.input_transformers_cleanup
        if self in cleanup:
            cleanup.remove(self)

    def __call__(self, lines: list[str]) -> list[str]:
        if not self.enabled:
            return lines
        word = _first_word(lines)
        if not word:
            return lines
        if word == LOCAL:
            index = next(i for i, line in enumerate(lines) if line.strip())
            return lines[:index] + lines[index + 1 :]
        if word in CONTROLLER_MAGICS:
            return lines
        if lines and not lines[-1].endswith("\n"):
            lines = [*lines[:-1], lines[-1] + "\n"]
        return ["%%px\n", *lines]
