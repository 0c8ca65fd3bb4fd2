"""The Python API of a session's cluster: ``ipympi.current().push(...)`` and friends.

:class:`ClusterAPI` is a mixin of :class:`~ipympi.notebook.controller.cluster.Cluster`:
moving data to and from the ranks (``push``, ``pull``, ``scatter``, ``gather``),
calling a function on them (``apply``) and running code on them (``execute``, as a
``%%px`` cell does).
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable, cast

from ...core.ranksets import parse_targets
from ...mpi import byvalue
from .execute import CellOptions, rank_error, run_cell
from .publish import publisher_for

if TYPE_CHECKING:
    from .contracts import CellCluster
    from .records import Submission

__all__ = ["ClusterAPI"]

DATA_TIMEOUT = None  # data requests wait like cells: Ctrl-C interrupts them


class ClusterAPI:
    """``push``, ``pull``, ``scatter``, ``gather``, ``execute``, ``apply``."""

    def push(self, namespace: Mapping[str, Any], targets: Any = None) -> None:
        """Define ``namespace``'s names on the target ranks (pickled once, sent to each)."""
        cluster = _as_cluster(self)
        ranks = parse_targets(targets, cluster.n)
        data = byvalue.dumps(dict(namespace))
        _finish(cluster, cluster.submit("push", {"names": sorted(namespace)}, ranks, [data]))

    def pull(self, names: str | Sequence[str], targets: Any = None) -> list[Any]:
        """The value of ``names`` on each target rank, in rank order.

        One name gives one value per rank; a list of names a tuple per rank.
        """
        cluster = _as_cluster(self)
        single = isinstance(names, str)
        wanted = [names] if single else list(names)
        ranks = parse_targets(targets, cluster.n)
        values = _finish(cluster, cluster.submit("pull", {"names": wanted}, ranks))
        return [values[r][0] if single else tuple(values[r]) for r in ranks]

    def scatter(self, name: str, seq: Any, targets: Any = None) -> None:
        """Split ``seq`` into contiguous, nearly equal parts; part i becomes ``name`` on
        target rank i."""
        ranks = parse_targets(targets, _as_cluster(self).n)
        for rank, part in zip(ranks, split_parts(seq, len(ranks))):
            self.push({name: part}, [rank])

    def gather(self, name: str, targets: Any = None) -> Any:
        """Concatenate ``name`` from the target ranks in rank order (lists, tuples, arrays)."""
        return join_parts(self.pull(name, targets))

    def apply(
        self, func: Callable[..., Any], *args: Any, targets: Any = None, **kwargs: Any
    ) -> list[Any]:
        """Call ``func(*args, **kwargs)`` on each target rank; the return values in rank order.

        Functions defined in the notebook (and lambdas) are sent by value and
        read the rank's variables (:mod:`ipympi.mpi.byvalue`);
        others are pickled by reference.
        """
        cluster = _as_cluster(self)
        ranks = parse_targets(targets, cluster.n)
        payload = byvalue.dumps((func, args, kwargs))
        values = _finish(cluster, cluster.submit("apply", {}, ranks, [payload]))
        return [values[r] for r in ranks]

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
        publish = None
        if display:
            try:
                from IPython import get_ipython

                shell = get_ipython()
            except ImportError:
                shell = None
            publish = publisher_for(shell)
        options = CellOptions(targets=targets, block=block, timeout=timeout, store_history=False)
        result = run_cell(_as_cluster(self), code, options, publish, 0)
        if block:
            result.raise_for_error()
        return result


def _as_cluster(api: ClusterAPI) -> CellCluster:
    """``api`` as the cluster it is (``ClusterAPI`` is a mixin of ``Cluster`` only)."""
    return cast("CellCluster", api)


def _finish(cluster: CellCluster, req: Submission) -> dict[int, Any]:
    """Wait for a data request; its per-rank reply buffers unpickled; RankError on failure."""
    cluster.wait(req, DATA_TIMEOUT)
    cluster.forget(req)
    errors = req.errors()
    if errors:
        raise rank_error(errors, req.targets)
    values = {}
    for rank, reply in req.replies.items():
        values[rank] = pickle.loads(reply.buffers[0]) if reply.buffers else None
    return values


def split_parts(seq: Any, n: int) -> list[Any]:
    """``seq`` in ``n`` contiguous, nearly equal parts (numpy arrays, tuples, lists)."""
    if hasattr(seq, "__array__") and not isinstance(seq, (list, tuple)):
        import numpy

        return list(numpy.array_split(seq, n))
    items = list(seq)
    q, r = divmod(len(items), n)
    bounds = [i * q + min(i, r) for i in range(n + 1)]
    parts = [items[bounds[i] : bounds[i + 1]] for i in range(n)]
    return [tuple(p) for p in parts] if isinstance(seq, tuple) else parts


def join_parts(parts: list[Any]) -> Any:
    """The parts joined in order: numpy arrays concatenated, tuples and lists chained."""
    first = parts[0] if parts else []
    if hasattr(first, "__array__") and not isinstance(first, (list, tuple)):
        import numpy

        return numpy.concatenate(parts)
    out: list[Any] = []
    for part in parts:
        out.extend(part)
    return type(first)(out) if isinstance(first, tuple) else out
