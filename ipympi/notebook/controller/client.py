"""``ipympi.Cluster`` and its client: IPython Parallel's cluster API on ipympi's session.

``rc = ipympi.Cluster(n=4).start_and_connect_sync()`` is the line that replaces
``ipp.Cluster(engines="mpi", n=4).start_and_connect_sync()``: it starts (or
joins) the notebook's MPI session of ``n`` ranks, the one ``%mpi start`` and
the ``ipympi`` kernel make, and returns a :class:`Client` whose ``rc[:]``,
``rc[i]`` and ``rc[i, j]`` are :class:`~ipympi.notebook.controller.view.DirectView`
objects. Making a client binds ``%px``/``%%px``/``%autopx`` to all its ranks, as
IPython Parallel's does. ``async`` twins (``await cluster.start_cluster()``) and
``with``/``async with`` blocks behave as IPython Parallel's.
"""

from __future__ import annotations

import signal as signals
from typing import TYPE_CHECKING, Any

from . import session
from .launchers import ClusterError
from .view import DirectView

if TYPE_CHECKING:
    from .cluster import Cluster as SessionCluster

__all__ = ["Client", "Cluster"]

READY_TIMEOUT = 60.0


class Client:
    """The ranks of a session, as IPython Parallel's ``Client``: index it for views."""

    def __init__(self, cluster: SessionCluster, activate: bool = True) -> None:
        self.cluster = cluster
        self.block = False
        if activate:
            try:
                from IPython import get_ipython
            except ImportError:
                get_ipython = None
            if get_ipython is not None and get_ipython() is not None:
                self[:].activate()

    @property
    def ids(self) -> list[int]:
        """The ranks (IPython Parallel's engine ids)."""
        return [engine.rank for engine in self.cluster.engines if engine.alive]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, key: Any) -> DirectView:
        if isinstance(key, slice):
            targets: Any = list(range(self.cluster.n))[key]
            if key == slice(None):
                targets = "all"
        elif isinstance(key, tuple):
            targets = list(key)
        else:
            targets = key
        return self.direct_view(targets)

    def direct_view(self, targets: Any = "all") -> DirectView:
        return DirectView(self.cluster, targets, block=self.block)

    def wait(self, jobs: Any = None, timeout: float | None = -1) -> bool:
        """Wait for ``jobs`` (AsyncResults)."""
        return self[:].wait(jobs, timeout)

    def wait_for_engines(
        self, n: int | None = None, timeout: float = -1, block: bool = True
    ) -> None:
        """Wait until ``n`` ranks (default: all) are ready."""
        want = self.cluster.n if n is None else n
        if want > self.cluster.n:
            raise ValueError(f"the session has {self.cluster.n} ranks; it cannot wait for {want}")
        self.cluster.wait_ready(READY_TIMEOUT if timeout is None or timeout < 0 else timeout)

    def close(self) -> None:
        """Let go of the session (it keeps running)."""

    def shutdown(self, targets: Any = "all", hub: bool = False, block: Any = None) -> None:
        """Stop the session's ranks (IPython Parallel's shutdown of all engines)."""
        if targets not in ("all", None):
            raise ValueError("ipympi's ranks are one MPI world: shut down all of them, or none")
        self.cluster.stop()

    def __repr__(self) -> str:
        return f"<ipympi.Client with {len(self)} ranks>"


class Cluster:
    """A session of ``n`` ranks, started and stopped like IPython Parallel's ``Cluster``.

    In a kernel that already has a session (the ``ipympi`` kernel, or after
    ``%mpi start``), that session is used: started again if stopped, restarted
    if it has another number of ranks. ``backend``, ``launcher`` and the
    placement options (``hosts``, ...) are those of ``%mpi start``.
    """

    def __init__(
        self,
        n: int | None = None,
        *,
        backend: str | None = None,
        launcher: str | None = None,
        **placement: Any,
    ) -> None:
        if n is not None and n < 1:
            raise ValueError(f"a cluster needs at least one rank, not {n}")
        self.n = n
        self._choice = {"backend": backend, "launcher": launcher, **placement}
        self._session: SessionCluster | None = None
        self._made = False  # this object made the session (and closes it when stopped)

    def __repr__(self) -> str:
        state = "running" if self._session is not None and self._session.running else "not running"
        n = self._session.n if self._session is not None else self.n
        return f"<ipympi.Cluster(n={n}): {state}>"

    # -- starting ------------------------------------------------------------------------
    def start_cluster_sync(self, n: int | None = None) -> Cluster:
        """Start the ranks and wait until they are ready."""
        n = n or self.n
        try:
            cluster = session.current()
        except ClusterError:
            cluster = session.new_cluster(n, **self._choice)
            session.set_current(cluster)
            self._made = True
        self._session = cluster
        if cluster.stopped or not cluster.engines:
            cluster.start(n)
        elif n is not None and n != cluster.n:
            cluster.restart(n)
        elif not cluster.ready:
            cluster.wait_ready()
        return self

    def connect_client_sync(self) -> Client:
        """A client of the running ranks."""
        if self._session is None:
            raise RuntimeError("the cluster is not started: call start_cluster_sync() first")
        return Client(self._session)

    def start_and_connect_sync(self, activate: bool = False) -> Client:
        """Start the ranks, then return a client of them."""
        self.start_cluster_sync()
        return self.connect_client_sync()

    def start_engines_sync(self, n: int | None = None) -> None:
        self.start_cluster_sync(n)

    async def start_cluster(self, n: int | None = None) -> Cluster:
        return self.start_cluster_sync(n)

    async def start_engines(self, n: int | None = None) -> None:
        self.start_cluster_sync(n)

    async def connect_client(self) -> Client:
        return self.connect_client_sync()

    async def start_and_connect(self, activate: bool = False) -> Client:
        return self.start_and_connect_sync(activate)

    # -- running ranks ---------------------------------------------------------------------
    def signal_engines_sync(self, signum: int = signals.SIGINT) -> None:
        """Send ``signum`` to every rank (SIGINT interrupts what they run)."""
        cluster = self._started()
        cluster.signal([engine.rank for engine in cluster.engines], signum)

    async def signal_engines(self, signum: int = signals.SIGINT) -> None:
        self.signal_engines_sync(signum)

    def restart_engines_sync(self) -> None:
        """A fresh world of the same number of ranks (their variables are lost)."""
        self._started().restart()

    async def restart_engines(self) -> None:
        self.restart_engines_sync()

    def _started(self) -> SessionCluster:
        if self._session is None:
            raise RuntimeError("the cluster is not started")
        return self._session

    # -- stopping ---------------------------------------------------------------------------
    def stop_cluster_sync(self) -> None:
        """Stop the ranks (a session this object made is closed)."""
        cluster = self._session
        if cluster is None:
            return
        self._session = None
        if self._made:
            if _is_current(cluster):
                session.set_current(None)
            cluster.close()
        else:
            cluster.stop()

    def stop_engines_sync(self) -> None:
        self.stop_cluster_sync()

    async def stop_cluster(self) -> None:
        self.stop_cluster_sync()

    async def stop_engines(self) -> None:
        self.stop_cluster_sync()

    def __enter__(self) -> Client:
        return self.start_and_connect_sync()

    def __exit__(self, *exc: object) -> None:
        self.stop_cluster_sync()

    async def __aenter__(self) -> Client:
        return self.start_and_connect_sync()

    async def __aexit__(self, *exc: object) -> None:
        self.stop_cluster_sync()


def _is_current(cluster: SessionCluster) -> bool:
    try:
        return session.current() is cluster
    except ClusterError:
        return False
