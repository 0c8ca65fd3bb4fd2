"""``%autopx``'s input transformer, without a kernel: which cells go to the ranks."""

from __future__ import annotations

import pytest
from ipympi.magics._autopx import AutoParallel
from IPython.core.inputtransformer2 import TransformerManager, cell_magic


class FakeShell:
    def __init__(self) -> None:
        self.manager = self.input_transformer_manager = TransformerManager()
        self.input_transformers_cleanup = self.manager.cleanup_transforms
        self.input_transformers_post: list = []
        self.ast_transformers: list = []


@pytest.fixture
def shell() -> FakeShell:
    return FakeShell()


def transform(shell: FakeShell, cell: str) -> str:
    return shell.manager.transform_cell(cell)


def test_disabled_transformer_changes_nothing(shell: FakeShell) -> None:
    AutoParallel(shell)
    assert transform(shell, "x = 1\n") == "x = 1\n"


def test_enabled_transformer_sends_cells_to_the_ranks(shell: FakeShell) -> None:
    AutoParallel(shell).enabled = True
    out = transform(shell, "x = rank\nprint(x)")
    assert out == "get_ipython().run_cell_magic('px', '', 'x = rank\\nprint(x)\\n')\n"


def test_local_cells_lose_their_first_line_and_run_here(shell: FakeShell) -> None:
    AutoParallel(shell).enabled = True
    assert transform(shell, "%%local\ny = 2\n") == "y = 2\n"
    assert transform(shell, "\n\n%%local\ny = 2\n") == "y = 2\n"


@pytest.mark.parametrize(
    "cell", ["%mpi status", "%mpi start -n 2", "%%px -t 0\nx", "%px x=1", "%pxresult", "%autopx"]
)
def test_controller_magics_stay_in_the_controller(shell: FakeShell, cell: str) -> None:
    auto = AutoParallel(shell)
    plain = transform(shell, cell)
    auto.enabled = True
    assert transform(shell, cell) == plain


def test_empty_cells_are_left_alone(shell: FakeShell) -> None:
    auto = AutoParallel(shell)
    plain = [transform(shell, cell) for cell in ("", "\n  \n")]
    auto.enabled = True
    assert [transform(shell, cell) for cell in ("", "\n  \n")] == plain


def test_completeness_checks_ignore_the_transformer(shell: FakeShell) -> None:
    AutoParallel(shell).enabled = True
    assert shell.manager.check_complete("for i in range(3):\n")[0] == "incomplete"
    assert shell.manager.check_complete("x = 1\n")[0] == "complete"


def test_remove_unregisters(shell: FakeShell) -> None:
    auto = AutoParallel(shell)
    auto.enabled = True
    auto.remove()
    assert transform(shell, "x = 1\n") == "x = 1\n"


# -- the kernel's straight path: the same %%px body as IPython's transformation --------------
STRAIGHT_CELLS = [
    "x = rank",
    "x = rank\nprint(x)\n",
    "\n\n  y = 1\n  print(y)",  # leading blank lines and indentation are cleaned first
    ">>> a = 1\n>>> a",  # a pasted prompt is stripped first
    "In [1]: b = 2\n",
    "x?",
    "!ls\nz = 3",
    "s = '%%local'",
]


@pytest.mark.parametrize("cell", STRAIGHT_CELLS)
def test_straight_body_is_what_ipython_would_run(shell: FakeShell, cell: str) -> None:
    auto = AutoParallel(shell)
    auto.enabled = True
    body = auto.straight_body(cell)
    assert body is not None
    assert "".join(cell_magic(["%%px\n", *body])) == transform(shell, cell)


@pytest.mark.parametrize("cell", ["", " \n", "%%local\nx", "\n%mpi status", "%%px -t 0\nx"])
def test_cells_of_the_controller_take_ipythons_way(shell: FakeShell, cell: str) -> None:
    auto = AutoParallel(shell)
    auto.enabled = True
    assert auto.straight_body(cell) is None


def test_other_transformers_send_cells_ipythons_way(shell: FakeShell) -> None:
    auto = AutoParallel(shell)
    assert auto.straight_body("x = 1") is None  # parallel mode is off
    auto.enabled = True
    assert auto.straight_body("x = 1") == ["x = 1\n"]
    shell.input_transformers_post.append(lambda lines: lines)
    assert auto.straight_body("x = 1") is None
    shell.input_transformers_post.clear()
    shell.input_transformers_cleanup.append(lambda lines: lines)  # runs after %autopx
    assert auto.straight_body("x = 1") is None
