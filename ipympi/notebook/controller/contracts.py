"""What the code that runs cells needs of a session's cluster, as a Protocol.

The cell's run (:mod:`~ipympi.notebook.controller.cellrun`), its entry points
(:mod:`~ipympi.notebook.controller.execute`), the stuck-cell policy
(:mod:`~ipympi.notebook.controller.stuck`), the interrupts of requests
(:mod:`~ipympi.notebook.controller.interrupting`) and the data API
(:mod:`~ipympi.notebook.controller.api`) use a cluster only through
:class:`CellCluster`; the :class:`~ipympi.notebook.controller.cluster.Cluster` is
one, and imports them. None of them imports the cluster, not even for its type,
so the controller's modules form no import circle.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from .children import Children
    from .errands import Errands
    from .launchers import Launcher
    from .records import EngineRecord, Submission

__all__ = ["CellCluster"]


class CellCluster(Protocol):
    """A session's engines, as the code that runs cells on them sees them."""

    n: int  # the size of the world
    gen: int  # the world's generation: a restart makes a new one
    engines: list[EngineRecord]
    errands: Errands  # work other threads hand over, run at the waits
    children: Children  # the processes the ranks spawned
    launcher: Launcher
    on_error: str  # what to do with a stuck cell: see ipympi.launch.watch.ON_ERROR
    keep_messages: bool  # a failed cell's unreceived messages stay receivable
    deadlock_after: float  # seconds without progress that make a probable deadlock
    ended: str | None  # why ipympi ended the world
    aborted: dict[str, Any] | None  # the abort message that ended the world
    stopped: bool

    @property
    def backend(self) -> str: ...

    @property
    def ready(self) -> bool: ...

    @property
    def ending(self) -> bool: ...

    # -- the world
    def start(self, n: int | None = None, *, wait: bool = True) -> None: ...

    def wait_ready(self, timeout: float = ...) -> None: ...

    def stop(self, grace: float = ...) -> None: ...

    def end_world(self, reason: str) -> None: ...

    def variables(self) -> list[str]: ...

    def world_ended(self) -> str: ...

    # -- requests and the loop
    def submit(
        self,
        kind: str,
        content: dict[str, Any],
        targets: Iterable[int],
        buffers: Sequence[bytes] = (),
    ) -> Submission: ...

    def fail_rank(
        self, req: Submission, rank: int, ename: str, evalue: str, where: str | None = None
    ) -> None: ...

    def forget(self, req: Submission) -> None: ...

    def pump(self, deadline: float | None, done: Callable[[], bool]) -> bool: ...

    def wait(self, req: Submission, timeout: float | None = None) -> bool: ...

    def interrupt(self, req: Submission, resynchronize: bool = True) -> None: ...

    def resynchronize(self, timeout: float = ...) -> bool: ...

    def signal(self, ranks: Iterable[int], sig: int) -> None: ...

    # -- observation
    def ask_states(self) -> Callable[[], bool]: ...

    def states(self) -> list[dict[str, Any]]: ...

    def query_states(self, timeout: float = ..., wait: bool = True) -> list[dict]: ...

    def local_pid(self, engine: EngineRecord) -> int | None: ...
