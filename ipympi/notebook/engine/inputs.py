"""IPython's input transformation for a rank's shell, without tokenizing plain Python.

Before running a cell IPython tokenizes it whole, to find the special syntax
its token transformers rewrite: ``%magic`` or ``!cmd`` (or ``?``, ``,``, ``;``,
``/``) at the start of a statement, ``x = %magic`` and ``x = !cmd``, and
``obj?`` at the end of one. That tokenizing costs about 3 ms for a 150-line
cell here, three times its compiling, and every rank pays it on the shared
cores. A cell in which no line can hold such syntax (found by one regular
expression that errs on the side of "maybe") is left as it is, which is what
the transformers would do; any other cell is transformed by IPython as
always. Cleanup and line transformers (prompts, indentation, ``%%magic``)
still run on every cell.
"""

from __future__ import annotations

import re

from IPython.core.inputtransformer2 import (
    EscapedCommand,
    HelpEnd,
    MagicAssign,
    SystemAssign,
    TransformerManager,
)

__all__ = ["RankTransformerManager", "may_hold_special_syntax"]

# What the token transformers look for, on physical lines: an escape character
# first on a line (EscapedCommand), "= %" or "= !" (MagicAssign, SystemAssign;
# "!=" does not match), a line ending in "?" (HelpEnd). A match inside a string or
# a bracket only sends the cell the usual way.
_SPECIAL = re.compile(r"^[ \t]*[!?%,;/]|=[\s\\]*[%!]|\?[ \t]*$", re.MULTILINE)
_IPYTHON_TOKEN_TRANSFORMERS = [MagicAssign, SystemAssign, EscapedCommand, HelpEnd]


def may_hold_special_syntax(text: str) -> bool:
    """Whether IPython's token transformers might change ``text`` (False: surely not)."""
    return _SPECIAL.search(text) is not None


class RankTransformerManager(TransformerManager):
    """IPython's transformer manager, skipping the token pass where it has nothing to do."""

    def do_token_transforms(self, lines: list[str]) -> list[str]:
        if self.token_transformers == _IPYTHON_TOKEN_TRANSFORMERS and not (
            may_hold_special_syntax("".join(lines))
        ):
            return lines
        return super().do_token_transforms(lines)
