"""The errors a view's results raise, named and shaped as IPython Parallel's.

:class:`RemoteError` is one rank's exception (``ename``, ``evalue``,
``traceback``, ``engine_info``); :class:`CompositeError` gathers every failed
rank's, as ``ipyparallel.error.CompositeError`` does (``elist``,
``raise_exception``, ``render_traceback``), and shows in a notebook as ipympi's
own report of the failure: one summary line (which ranks failed, what the
others were waiting for, a deadlock's wait-for graph), then each distinct
traceback once. :class:`TimeoutError` is raised by ``get(timeout=...)``
when the result is not ready. IPython Parallel itself is not needed.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CompositeError", "RemoteError", "TimeoutError", "composite_error"]


class TimeoutError(builtins.TimeoutError):  # IPython Parallel's name
    """A result was not ready within the time asked for."""


class RemoteError(Exception):
    """An exception raised on one rank (an engine)."""

    def __init__(
        self,
        ename: str,
        evalue: str,
        traceback: Sequence[str] = (),
        engine_info: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(ename, evalue)
        self.ename = ename
        self.evalue = evalue
        self.traceback = "\n".join(traceback)
        self.engine_info = dict(engine_info or {})

    def __repr__(self) -> str:
        engine = self.engine_info.get("engine_id", " ")
        return f"<Remote[{engine}]:{self.ename}({self.evalue})>"

    def __str__(self) -> str:
        return f"{self.ename}({self.evalue})"

    def render_traceback(self) -> list[str]:
        """The rank's traceback, as lines (what IPython shows)."""
        return (self.traceback or str(self)).splitlines()

    def _render_traceback_(self) -> list[str]:
        return self.render_traceback()


class CompositeError(RemoteError):
    """Exceptions raised on several ranks: ``elist`` holds one
    ``(ename, evalue, traceback, engine_info)`` per failed rank, in rank order."""

    tb_limit = 4  # distinct tracebacks shown by render_traceback() (None: all)

    def __init__(
        self,
        message: str,
        elist: Sequence[tuple[str, str, str, Mapping[str, Any]]],
        report: Sequence[str] = (),
    ) -> None:
        first = elist[0] if elist else ("Error", message, "", {})
        super().__init__(first[0], first[1], str(first[2]).splitlines(), first[3])
        self.msg = message
        self.elist = list(elist)
        self.args = (message, *self.elist)
        self.report = list(report)  # ipympi's composed report: summary, tracebacks

    def __str__(self) -> str:
        lines = [f"one or more exceptions raised in: {self.msg}"]
        for ename, evalue, _tb, info in self.elist:
            lines.append(
                f"[{info.get('engine_id', '-')}:{info.get('method', '')}] {ename}: {evalue}"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"CompositeError({len(self.elist)})"

    def render_traceback(self, excid: int | None = None) -> list[str]:
        """ipympi's report of the failure (``excid``: the traceback of that failure only)."""
        if excid is not None:
            ename, evalue, tb, info = self.elist[excid]
            header = f"[{info.get('engine_id', '-')}:{info.get('method', '')}]: "
            return [
                header + (tb.splitlines()[0] if tb else f"{ename}: {evalue}"),
                *tb.splitlines()[1:],
            ]
        if self.report:
            return self.report
        lines: list[str] = []
        for index in range(len(self.elist))[: self.tb_limit]:
            lines.extend(self.render_traceback(index))
        return lines

    def _render_traceback_(self) -> list[str]:
        return self.render_traceback()

    def print_traceback(self, excid: int | None = None) -> None:
        print("\n".join(self.render_traceback(excid)))

    def raise_exception(self, excid: int = 0) -> None:
        """Raise failure ``excid`` as a :class:`RemoteError`."""
        try:
            ename, evalue, tb, info = self.elist[excid]
        except IndexError:
            raise IndexError(f"an exception with index {excid} does not exist") from None
        raise RemoteError(ename, evalue, tb.splitlines(), info)


def composite_error(
    errors: Mapping[int, Mapping[str, Any]], method: str, report: Sequence[str] = ()
) -> CompositeError:
    """One CompositeError for each rank's error content (``ename``, ``evalue``, ``traceback``)."""
    elist = []
    for rank, error in sorted(errors.items()):
        info = {"engine_id": rank, "method": method}
        tb = "\n".join(str(line) for line in error.get("traceback") or [])
        elist.append((str(error.get("ename", "Error")), str(error.get("evalue", "")), tb, info))
    return CompositeError(method, elist, report)
