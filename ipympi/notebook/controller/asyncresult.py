"""The result of a view's call on the ranks, as IPython Parallel's ``AsyncResult``.

An :class:`AsyncResult` holds the requests a call sent (one for ``apply``,
``execute``, ``push`` or ``pull``; one per rank for ``map`` and ``scatter``,
whose ranks get different data) and answers ``ready``, ``wait``, ``get``,
``get_dict``, ``successful``, ``elapsed``, ``stdout``/``stderr`` and
``display_outputs`` as ``ipyparallel.AsyncResult`` does. The session's cluster
moves only while someone waits on it (it has no thread of its own): a result
makes progress when it (or any other call) waits.

A wait without a timeout is ipympi's wait for a cell
(:func:`~ipympi.notebook.controller.execute.follow`): Ctrl-C interrupts the
ranks, a deadlock or a rank that failed while others wait on it is found and
reported, and the ranks' collectives are realigned after a failure. The
errors are :mod:`~ipympi.notebook.controller.remote_errors`' CompositeError,
rendered as ipympi's report.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable

from .execute import CellOptions, CellResult, Progress, follow
from .publish import publisher_for
from .remote_errors import CompositeError, TimeoutError, composite_error
from .render import OutputRenderer

if TYPE_CHECKING:
    from .cluster import Cluster
    from .records import Submission

__all__ = ["AsyncMapResult", "AsyncResult"]

_MISSING = object()
POLL = 0.002  # seconds ready() looks for news


def unpickled(req: Submission, rank: int) -> Any:
    """A rank's reply value: its first buffer unpickled (None without one)."""
    reply = req.replies.get(rank)
    return pickle.loads(reply.buffers[0]) if reply is not None and reply.buffers else None


class AsyncResult:
    """The pending or finished result of a call on some ranks."""

    def __init__(
        self,
        cluster: Cluster,
        requests: list[Submission],
        method: str,
        *,
        single: bool = False,
        value: Callable[[Submission, int], Any] = unpickled,
        combine: Callable[[list[Any]], Any] | None = None,
        owner: Any = None,
    ) -> None:
        self._cluster = cluster
        self._cells = [CellResult(req, list(req.targets), 0) for req in requests]
        self._method = method
        self._single = single
        self._value = value
        self._combine = combine
        self._result: Any = _MISSING
        self._error: CompositeError | None = None
        self._sent = time.monotonic()
        self._finished: float | None = None
        self.owner = owner  # the view that made it (its wait() waits for it)

    # -- what it was sent to -------------------------------------------------------------
    @property
    def engine_id(self) -> int | list[int]:
        ranks = [rank for cell in self._cells for rank in cell.targets]
        return ranks[0] if self._single else ranks

    @property
    def msg_ids(self) -> list[str]:
        return [cell.request.id for cell in self._cells]

    def __len__(self) -> int:
        return sum(len(cell.targets) for cell in self._cells)

    @property
    def progress(self) -> int:
        """How many of the ranks' replies have come (the cluster moves only in waits)."""
        return sum(len(cell.request.replies) for cell in self._cells)

    @property
    def replied(self) -> bool:
        """Whether every rank's reply is in, without waiting for news."""
        return all(cell.request.done for cell in self._cells)

    # -- waiting ---------------------------------------------------------------------------
    def ready(self) -> bool:
        """Whether every rank has replied (a short look for news first)."""
        if self._finished is None:
            self._wait(POLL)
        return self._finished is not None

    def done(self) -> bool:
        return self.ready()

    def wait(self, timeout: float | None = -1) -> bool:
        """Wait until ready (``timeout`` seconds at most; -1 or None: no limit)."""
        return self._wait(timeout)

    def _wait(self, timeout: float | None) -> bool:
        if self._finished is not None:
            return True
        if timeout is not None and timeout >= 0:
            deadline = time.monotonic() + timeout
            for cell in self._cells:
                left = max(deadline - time.monotonic(), 0.001)
                if not cell.request.done and not self._cluster.wait(cell.request, left):
                    return False
        for cell in self._cells:
            follow(self._cluster, cell, CellOptions(targets=cell.targets), None)
        self._finish()
        return True

    def _finish(self) -> None:
        errors: dict[int, dict[str, Any]] = {}
        report: list[str] = []
        values: list[Any] = []
        for cell in self._cells:
            failed = cell.errors
            if failed:
                errors.update(failed)
                exc = cell.error()
                if exc is not None and not report:
                    report = list(exc.traceback_lines)
            for rank in cell.targets:
                values.append(None if rank in failed else self._value(cell.request, rank))
        if errors:
            self._error = composite_error(errors, self._method, report)
        elif self._combine is not None:
            self._result = self._combine(values)
        else:
            self._result = values[0] if self._single else values
        self._finished = time.monotonic()

    def get(self, timeout: float | None = -1) -> Any:
        """The result (one value per rank, or the one rank's value); raises the ranks'
        errors as a CompositeError, or TimeoutError when not ready within ``timeout``."""
        if not self._wait(timeout):
            raise TimeoutError("Result not ready.")
        if self._error is not None:
            raise self._error
        return self._result

    def result(self, timeout: float | None = None) -> Any:
        """``get``, for code written for ``concurrent.futures``."""
        return self.get(timeout)

    def get_dict(self, timeout: float | None = -1) -> dict[int, Any]:
        """The result as ``{rank: value}``."""
        results = self.get(timeout)
        if self._combine is not None:
            raise ValueError("get_dict() is for one value per rank, not a map's result")
        ranks = self.engine_id
        if self._single:
            return {int(ranks): results}  # type: ignore[arg-type]
        return dict(zip(ranks, results))  # type: ignore[arg-type]

    def successful(self) -> bool:
        """Whether the call succeeded on every rank (AssertionError while not ready)."""
        assert self.ready(), "the result is not ready yet"
        return self._error is None

    def __iter__(self) -> Iterator[Any]:
        result = self.get()
        yield from ([result] if self._single else result)

    def __getitem__(self, key: Any) -> Any:
        result = self.get()
        return result if self._single else result[key]

    # -- times -----------------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        """Seconds from sending the call to its last reply (or until now)."""
        end = self._finished if self._finished is not None else time.monotonic()
        return end - self._sent

    @property
    def wall_time(self) -> float:
        return self.elapsed

    @property
    def sent(self) -> bool:
        return True

    # -- output ------------------------------------------------------------------------------
    def _texts(self, name: str) -> Any:
        texts = [
            cell.stdout(r) if name == "stdout" else cell.stderr(r)
            for cell in self._cells
            for r in cell.targets
        ]
        return texts[0] if self._single else texts

    @property
    def stdout(self) -> Any:
        """What each rank printed to stdout for this call."""
        return self._texts("stdout")

    @property
    def stderr(self) -> Any:
        return self._texts("stderr")

    @property
    def outputs(self) -> Any:
        """Each rank's rich outputs (``display_data`` contents)."""
        found = [
            [
                content
                for r, kind, content in cell.request.messages
                if r == rank and kind == "display_data"
            ]
            for cell in self._cells
            for rank in cell.targets
        ]
        return found[0] if self._single else found

    def display_outputs(self, groupby: str = "type") -> None:
        """Show what the ranks printed and displayed, labelled by rank
        (``groupby``: ``type``, ``engine`` or ``order``)."""
        group = {"engine": "rank", "type": "type", "order": "order"}.get(groupby)
        if group is None:
            raise ValueError(f"groupby must be 'type', 'engine' or 'order', not {groupby!r}")
        self.wait()
        publish = publisher_for(_shell())
        for cell in self._cells:
            renderer = OutputRenderer(
                publish,
                targets=cell.targets,
                execution_count=0,
                stream=False,
                group=group,
                collapse=False,
                label=self._cluster.n > 1,
            )
            renderer.feed([m for m in cell.request.messages if m[1] != "error"])
            for rank in cell.targets:
                renderer.rank_done(rank)
            renderer.finish()

    def wait_interactive(
        self, interval: float = 0.1, timeout: float | None = -1, widget: Any = None
    ) -> None:
        """Wait, showing a progress bar of the ranks that have finished."""
        publish = publisher_for(_shell())
        progress = Progress(publish, f"ipympi-ar-{self.msg_ids[0]}")
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        total = len(self)
        while not self.ready():
            progress.update(_bar(self.progress, total, self.elapsed))
            left = interval if deadline is None else min(interval, deadline - time.monotonic())
            if left <= 0:
                break
            self._wait(left)
        progress.update(_bar(self.progress, total, self.elapsed))

    def wait_for_output(self, timeout: float | None = -1) -> bool:
        """Wait until the output of every rank is in (it comes before each reply)."""
        return self.wait(timeout)

    def __repr__(self) -> str:
        state = "finished" if self._finished is not None else "pending"
        return f"<AsyncResult({self._method}): {state}>"


class AsyncMapResult(AsyncResult):
    """The result of ``map`` or ``gather``: the ranks' parts joined in rank order."""

    def __iter__(self) -> Iterator[Any]:
        yield from self.get()


def _bar(done: int, total: int, elapsed: float, width: int = 30) -> str:
    """``[###############---------------] 2/4 ranks done · 1.2 s``."""
    filled = int(width * done / total) if total else width
    bar = "#" * filled + "-" * (width - filled)
    return f"[{bar}] {done}/{total} ranks done · {elapsed:.1f} s"


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()
