"""``%autopx``: every cell runs on the ranks, through IPython's input transformers.

A cleanup transformer (the first stage of IPython's input transformation)
turns a cell into a ``%%px`` cell, except cells that talk to the controller
(``%mpi``, ``%px``/``%%px``, ``%pxresult``, ``%pxconfig``, ``%autopx``) and
``%%local`` cells, whose first line it removes so they run in the controller.
This is IPython's own hook for rewriting cells: nothing is monkeypatched, and
the transformer is marked as having side effects so IPython leaves it out of
"is this input complete?" checks (multi-line input in consoles still works).
The ``ipympi`` kernel asks :meth:`AutoParallel.straight_body` for the ``%%px``
body of a cell and, when IPython would do nothing else with it, hands that body
to the magic's runner itself instead of running the one-line ``%%px`` call.
"""

from __future__ import annotations

from typing import Any

from IPython.core.inputtransformer2 import cell_magic

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
        body = self.body_for_ranks(lines)
        if body is not None:
            return ["%%px\n", *body]
        if _first_word(lines) == LOCAL:
            index = next(i for i, line in enumerate(lines) if line.strip())
            return lines[:index] + lines[index + 1 :]
        return lines

    @staticmethod
    def body_for_ranks(lines: list[str]) -> list[str] | None:
        """The ``%%px`` body parallel mode makes of a cell's lines, or None for a cell
        that runs here: an empty one, a ``%%local`` one or a controller magic."""
        word = _first_word(lines)
        if not word or word == LOCAL or word in CONTROLLER_MAGICS:
            return None
        if not lines[-1].endswith("\n"):
            lines = [*lines[:-1], lines[-1] + "\n"]
        return lines

    def straight_body(self, code: str) -> list[str] | None:
        """The ``%%px`` body of ``code`` when IPython would do nothing with the cell
        but run that ``%%px`` cell; else None.

        Lets the ``ipympi`` kernel send a parallel cell to the ranks without
        running IPython's ``run_cell`` on the one-line ``%%px`` call. It holds
        when this transformer is on and is the last cleanup transformer (those
        before it are applied here, in IPython's order), the line transformers
        are IPython's cell-magic one only, and no post-input or AST
        transformer is set: with any other, the cell takes IPython's way.
        """
        shell = self.shell
        manager = shell.input_transformer_manager
        cleanup = manager.cleanup_transforms
        if (
            not self.enabled
            or not cleanup
            or cleanup[-1] is not self
            or manager.line_transforms != [cell_magic]
            or shell.input_transformers_post
            or shell.ast_transformers
        ):
            return None
        lines = (code if code.endswith("\n") else code + "\n").splitlines(keepends=True)
        try:
            for transform in cleanup[:-1]:
                lines = transform(lines)
        except Exception:
            return None  # IPython's own run reports it
        return self.body_for_ranks(lines)
