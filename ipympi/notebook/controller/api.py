"""The Python API of a session's cluster: ``ipympi.current().push(...)`` and friends.

A mixin of :class:`~ipympi.notebook.controller.cluster.Cluster`; each method delegates
to the plain functions of :mod:`ipympi.notebook.controller.session` and
:mod:`ipympi.notebook.controller.execute`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Callable

__all__ = ["ClusterAPI"]


class ClusterAPI:
    """``push``, ``pull``, ``scatter``, ``gather``, ``execute``, ``apply``."""

    def push(self, namespace: Mapping[str, Any], targets: Any = None) -> None:
        """Define each name of ``namespace`` on the target ranks (default: all)."""
        from .session import push

        push(self, namespace, targets)  # type: ignore[arg-type]

    def pull(self, names: str | Sequence[str], targets: Any = None) -> list[Any]:
        """Each target rank's value of ``names`` (a tuple per rank for several names)."""
        from .session import pull

        return pull(self, names, targets)  # type: ignore[arg-type]

    def scatter(self, name: str, seq: Any, targets: Any = None) -> None:
        """Split ``seq`` (list, tuple, array) in rank order; each part becomes ``name``."""
        from .session import scatter

        scatter(self, name, seq, targets)  # type: ignore[arg-type]

    def gather(self, name: str, targets: Any = None) -> Any:
        """Concatenate each target rank's ``name`` in rank order."""
        from .session import gather

        return gather(self, name, targets)  # type: ignore[arg-type]

    def apply(
        self, func: Callable[..., Any], *args: Any, targets: Any = None, **kwargs: Any
    ) -> list[Any]:
        """``func(*args, **kwargs)`` on each target rank; the return values in rank order."""
        from .session import apply

        return apply(self, func, *args, targets=targets, **kwargs)  # type: ignore[arg-type]

    def execute(
        self,
        code: str,
        targets: Any = None,
        *,
        block: bool = True,
        display: bool = True,
        timeout: float | None = None,
    ) -> Any:
        """Run ``code`` on the target ranks; returns a CellResult.

        With ``display`` the ranks' output is shown as in a ``%%px`` cell;
        with ``block`` a failure raises the cell's RankError.
        """
        from .execute import CellOptions, run_cell
        from .publish import publisher_for

        publish = None
        if display:
            try:
                from IPython import get_ipython

                shell = get_ipython()
            except ImportError:
                shell = None
            publish = publisher_for(shell)
        options = CellOptions(targets=targets, block=block, timeout=timeout, store_history=False)
        result = run_cell(self, code, options, publish, 0)  # type: ignore[arg-type]
        if block:
            result.raise_for_error()
        return result
