"""The ranks' input transformation: IPython's result, without tokenizing plain Python."""

from __future__ import annotations

import pytest
from IPython.core import inputtransformer2
from IPython.core.inputtransformer2 import TransformerManager

from ipympi.notebook.engine.inputs import RankTransformerManager, may_hold_special_syntax

CELLS = [
    # plain Python, including characters the special syntax uses elsewhere
    "x = 1\n",
    "pass",
    "left = (rank - 1) % size\nright = (rank + 1) % size\n",
    "if a != b:\n    print('%d items' % n)\n",
    'def f():\n    """100% sure? yes"""\n    return {"a": 1}\n',
    "values = [\n    1,\n    2,\n]\n",
    "print(a / b)\nc = a // b\n",
    "s = 'line one\\n?'\n",
    # IPython syntax, which must still be transformed
    "%time x = 1\n",
    "%%time\nx = 1\n",
    "!ls -l\n",
    "files = !ls\n",
    "t = %time 1 + 1\n",
    "x?\n",
    "len??",
    "?len",
    "for i in range(2):\n    %time i\n",
    "if True:\n    !echo hi\n",
    ",print a b\n",
    ";print a b\n",
    "/print 1 2\n",
    "x = \\\n    %time 1\n",
    ">>> a = 1\n>>> a\n",
    "In [1]: b = 2\n",
    "\n\n   indented = 1\n",
]


@pytest.mark.parametrize("cell", CELLS)
def test_same_result_as_ipython(cell: str) -> None:
    assert RankTransformerManager().transform_cell(cell) == TransformerManager().transform_cell(
        cell
    )


@pytest.fixture
def tokenized(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The cells IPython tokenizes from now on."""
    calls: list[list[str]] = []
    tokenize = inputtransformer2.make_tokens_by_line

    def counting(lines: list[str]) -> object:
        calls.append(lines)
        return tokenize(lines)

    monkeypatch.setattr(inputtransformer2, "make_tokens_by_line", counting)
    return calls


def test_plain_python_is_not_tokenized(tokenized: list[list[str]]) -> None:
    manager = RankTransformerManager()
    manager.transform_cell("left = (rank - 1) % size\nif a != b:\n    pass\n")
    assert tokenized == []
    manager.transform_cell("%time x = 1\n")
    assert tokenized


def test_other_token_transformers_see_every_cell(tokenized: list[list[str]]) -> None:
    manager = RankTransformerManager()
    manager.token_transformers = [*manager.token_transformers, inputtransformer2.HelpEnd]
    assert manager.transform_cell("x = 1\n") == "x = 1\n"
    assert tokenized


def test_special_syntax_is_seen_on_any_line() -> None:
    assert not may_hold_special_syntax("x = 1\ny = x % 2\nz = x != y\n")
    for text in ("y = 1\n%time y\n", "a = !ls\n", "b = %env\n", "x = 1\nhelp?  \n", "  /f 1\n"):
        assert may_hold_special_syntax(text), text
