"""A view on some of the session's ranks with IPython Parallel's ``DirectView`` API.

``rc[:]``, ``rc[0]``, ``rc[0, 2]`` (see :mod:`ipympi.notebook.controller.client`)
are :class:`DirectView` objects: ``apply``/``apply_sync``/``apply_async``,
``map``, ``execute``, ``run``, ``push``, ``pull``, ``scatter``, ``gather``,
``view["x"]``, ``@view.remote``, ``@view.parallel``, ``sync_imports`` and
``activate`` behave as IPython Parallel's, on ipympi's session: each call is a
request to the ranks' engines; ``block`` (False by default, as in IPython
Parallel) chooses between the value and an
:class:`~ipympi.notebook.controller.asyncresult.AsyncResult`. A view whose
``targets`` is one int gives that rank's value, not a list.

Functions defined in the notebook (and lambdas) go by value and run with the
rank's namespace as their globals (:mod:`ipympi.mpi.byvalue`).
"""

from __future__ import annotations

import builtins
import contextlib
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable

from ...core.ranksets import parse_targets
from ...mpi import byvalue
from .api import join_parts, split_parts
from .asyncresult import AsyncMapResult, AsyncResult, unpickled
from .execute import CellOptions, ensure_world, run_cell

if TYPE_CHECKING:
    from .cluster import Cluster
    from .records import Submission

__all__ = ["DirectView", "ParallelFunction", "RemoteFunction"]


class DirectView:
    """The ranks ``targets`` (``"all"``, an int, or a list of ints) of ``cluster``."""

    def __init__(self, cluster: Cluster, targets: Any = "all", block: bool = False) -> None:
        self.cluster = cluster
        self.targets = targets
        self.block = block
        self._ranks = parse_targets(None if targets == "all" else targets, cluster.n)
        self.outstanding: list[AsyncResult] = []

    def __repr__(self) -> str:
        return f"<DirectView {self.targets}>"

    def __len__(self) -> int:
        return len(self._ranks)

    @property
    def _single(self) -> bool:
        return isinstance(self.targets, int)

    def _resolve(self, targets: Any) -> tuple[list[int], bool]:
        if targets is None:
            return self._ranks, self._single
        single = isinstance(targets, int)
        return parse_targets(None if targets == "all" else targets, self.cluster.n), single

    def _submit(self, kind: str, content: dict, ranks: list[int], data: bytes = b"") -> Submission:
        ensure_world(self.cluster, ranks, None)
        return self.cluster.submit(kind, content, ranks, [data] if data else [])

    def _deliver(self, ar: AsyncResult, block: bool | None) -> Any:
        ar.owner = self
        if self.block if block is None else block:
            return ar.get()
        for other in self.outstanding:  # results nobody waited for: let the cluster forget them
            if other.replied:
                other.wait(0)
        self.outstanding = [other for other in self.outstanding if other._finished is None]
        self.outstanding.append(ar)
        return ar

    # -- calling functions -------------------------------------------------------------
    def _apply(self, func: Callable, args: Sequence, kwargs: Mapping, block: bool | None) -> Any:
        if not callable(func):
            raise TypeError(f"apply needs a callable, not {func!r}")
        data = byvalue.dumps((func, tuple(args), dict(kwargs)))
        req = self._submit("apply", {}, self._ranks, data)
        name = getattr(func, "__name__", "apply")
        return self._deliver(AsyncResult(self.cluster, [req], name, single=self._single), block)

    def apply(self, f: Callable, *args: Any, **kwargs: Any) -> Any:
        """``f(*args, **kwargs)`` on each rank: the values (``block``) or an AsyncResult."""
        return self._apply(f, args, kwargs, None)

    def apply_sync(self, f: Callable, *args: Any, **kwargs: Any) -> Any:
        """``f(*args, **kwargs)`` on each rank, waiting for the values."""
        return self._apply(f, args, kwargs, True)

    def apply_async(self, f: Callable, *args: Any, **kwargs: Any) -> AsyncResult:
        """``f(*args, **kwargs)`` on each rank, at once returning an AsyncResult."""
        return self._apply(f, args, kwargs, False)

    def map(self, f: Callable, *sequences: Any, block: bool | None = None) -> Any:
        """``list(map(f, *sequences))`` with the items split in contiguous parts, one per rank."""
        return self._map(f, sequences, block, byvalue.map_part)

    def map_sync(self, f: Callable, *sequences: Any) -> Any:
        return self.map(f, *sequences, block=True)

    def map_async(self, f: Callable, *sequences: Any) -> Any:
        return self.map(f, *sequences, block=False)

    def _map(self, f: Callable, sequences: Sequence, block: bool | None, runner: Callable) -> Any:
        if not sequences:
            raise ValueError("map needs at least one sequence")
        lengths = {len(seq) for seq in sequences}
        if len(lengths) > 1:
            raise ValueError(f"map's sequences differ in length: {sorted(lengths)}")
        parts = [split_parts(seq, len(self._ranks)) for seq in sequences]
        requests = []
        for index, rank in enumerate(self._ranks):
            chunks = [part[index] for part in parts]
            if len(chunks[0]) == 0:
                continue
            data = byvalue.dumps((runner, (f, *chunks), {}))
            requests.append(self._submit("apply", {}, [rank], data))
        name = getattr(f, "__name__", "map")
        ar = AsyncMapResult(self.cluster, requests, name, combine=join_parts)
        return self._deliver(ar, block)

    # -- running code ----------------------------------------------------------------------
    def execute(
        self, code: str, silent: bool = True, targets: Any = None, block: bool | None = None
    ) -> Any:
        """Run ``code`` on the ranks, as a ``%%px`` cell without its display."""
        ranks, single = self._resolve(targets)
        options = CellOptions(targets=ranks, block=False, store_history=False, silent=silent)
        cell = run_cell(self.cluster, code, options, None, 0)
        ar = AsyncResult(self.cluster, [cell.request], "execute", single=single, value=_nothing)
        return self._deliver(ar, block)

    def run(self, filename: str, targets: Any = None, block: bool | None = None) -> Any:
        """Run the Python file ``filename`` (read here) on the ranks."""
        with open(filename, encoding="utf-8") as f:
            code = f.read()
        return self.execute(code, targets=targets, block=block)

    # -- moving data -----------------------------------------------------------------------
    def push(self, ns: Mapping[str, Any], targets: Any = None, block: bool | None = None) -> Any:
        """Define ``ns``'s names on the ranks (functions of the notebook go by value)."""
        if not isinstance(ns, Mapping):
            raise TypeError(f"push needs a dict of names to values, not {type(ns).__name__}")
        ranks, single = self._resolve(targets)
        req = self._submit("push", {"names": sorted(ns)}, ranks, byvalue.dumps(dict(ns)))
        ar = AsyncResult(self.cluster, [req], "push", single=single, value=_nothing)
        return self._deliver(ar, block)

    def update(self, ns: Mapping[str, Any]) -> Any:
        return self.push(ns)

    def pull(
        self, names: str | Sequence[str], targets: Any = None, block: bool | None = None
    ) -> Any:
        """The value of ``names`` on each rank (a list of names: a list per rank)."""
        one = isinstance(names, str)
        wanted = [names] if one else list(names)
        ranks, single = self._resolve(targets)
        req = self._submit("pull", {"names": wanted}, ranks)

        def value(req: Submission, rank: int) -> Any:
            values = unpickled(req, rank)
            return values[0] if one else list(values)

        ar = AsyncResult(self.cluster, [req], "pull", single=single, value=value)
        return self._deliver(ar, block)

    def __getitem__(self, key: str) -> Any:
        if not isinstance(key, str):
            raise TypeError(f"a view is indexed by variable names, not {key!r}")
        return self.pull(key, block=True)

    def __setitem__(self, key: str, value: Any) -> None:
        self.push({key: value}, block=True)

    def scatter(
        self,
        key: str,
        seq: Any,
        dist: str = "b",
        flatten: bool = False,
        targets: Any = None,
        block: bool | None = None,
    ) -> Any:
        """Split ``seq`` in contiguous parts; part i becomes ``key`` on the i-th rank
        (``flatten``: a part of one item becomes that item)."""
        _check_dist(dist)
        ranks, _ = self._resolve(targets)
        requests = []
        for rank, part in zip(ranks, split_parts(seq, len(ranks))):
            value = part[0] if flatten and len(part) == 1 else part
            requests.append(
                self._submit("push", {"names": [key]}, [rank], byvalue.dumps({key: value}))
            )
        return self._deliver(AsyncResult(self.cluster, requests, "scatter", value=_nothing), block)

    def gather(
        self, key: str, dist: str = "b", targets: Any = None, block: bool | None = None
    ) -> Any:
        """``key`` from each rank joined in rank order (lists, tuples, numpy arrays)."""
        _check_dist(dist)
        ranks, _ = self._resolve(targets)
        req = self._submit("pull", {"names": [key]}, ranks)

        def value(req: Submission, rank: int) -> Any:
            return unpickled(req, rank)[0]

        ar = AsyncMapResult(self.cluster, [req], "gather", value=value, combine=join_parts)
        return self._deliver(ar, block)

    # -- decorators --------------------------------------------------------------------------
    def remote(
        self, block: bool | None = None, **flags: Any
    ) -> Callable[[Callable], RemoteFunction]:
        """Decorator: calling the function runs it on the ranks (``apply``)."""
        _no_flags(flags)
        return lambda f: RemoteFunction(self, f, block)

    def parallel(
        self, dist: str = "b", block: bool | None = None, **flags: Any
    ) -> Callable[[Callable], ParallelFunction]:
        """Decorator: calling the function with sequences calls it on each rank's part of them
        and joins the results; ``.map`` calls it on each item."""
        _check_dist(dist)
        _no_flags(flags)
        return lambda f: ParallelFunction(self, f, block)

    # -- waiting -------------------------------------------------------------------------------
    def wait(self, jobs: Any = None, timeout: float | None = -1) -> bool:
        """Wait for ``jobs`` (AsyncResults; default: this view's outstanding ones)."""
        pending = self.outstanding if jobs is None else jobs
        if isinstance(pending, AsyncResult):
            pending = [pending]
        return all(ar.wait(timeout) for ar in list(pending))

    # -- imports and magics ----------------------------------------------------------------------
    @contextlib.contextmanager
    def sync_imports(self, local: bool = True, quiet: bool = False) -> Iterator[None]:
        """Imports inside the ``with`` block also happen on the ranks."""
        caller = sys._getframe(2)  # the with statement's frame (past contextmanager's)
        real = builtins.__import__

        def importing(
            name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
        ) -> Any:
            if sys._getframe(1) is caller and level == 0:
                what = f"{', '.join(fromlist)} from {name}" if fromlist else name
                if not quiet:
                    print(f"importing {what} on engine(s)")
                code = f"from {name} import {', '.join(fromlist)}" if fromlist else f"import {name}"
                self.execute(code, block=True)
            try:
                return real(name, globals, locals, fromlist, level)
            except ImportError:
                if local:
                    raise
                return types.ModuleType(name)

        builtins.__import__ = importing
        try:
            yield
        finally:
            builtins.__import__ = real

    def activate(self, suffix: str = "") -> None:
        """Make ``%px``, ``%%px`` and ``%autopx`` run on this view's ranks."""
        if suffix:
            raise ValueError(
                "ipympi has one set of parallel magics: activate() them without a suffix"
            )
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None:
            raise RuntimeError("activate() needs IPython: the magics live in an IPython shell")
        from ipympi.magics import load_ipython_extension

        magics = load_ipython_extension(shell)
        magics.defaults["targets"] = None if self.targets == "all" else self._ranks


class RemoteFunction:
    """A function that runs on a view's ranks when called (``@view.remote``)."""

    def __init__(self, view: DirectView, func: Callable, block: bool | None = None) -> None:
        self.view = view
        self.func = func
        self.block = block
        self.__name__ = getattr(func, "__name__", "remote")
        self.__doc__ = func.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.view._apply(self.func, args, kwargs, self.block)


class ParallelFunction(RemoteFunction):
    """A function called on each rank's part of its sequences (``@view.parallel``)."""

    def __call__(self, *sequences: Any) -> Any:
        return self.view._map(self.func, sequences, self.block, byvalue.call_part)

    def map(self, *sequences: Any) -> Any:
        return self.view._map(self.func, sequences, self.block, byvalue.map_part)


def _nothing(req: Submission, rank: int) -> None:
    return None


def _check_dist(dist: str) -> None:
    if dist != "b":
        raise ValueError(f"only dist='b' (contiguous blocks) is supported, not {dist!r}")


def _no_flags(flags: Mapping[str, Any]) -> None:
    if flags:
        raise TypeError(f"unknown options: {', '.join(sorted(flags))}")
