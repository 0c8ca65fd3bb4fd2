"""One parallel cell's run, from the request sent to the cell's last line: :class:`CellRun`.

A ``%%px`` cell's journey, in order:

1. The kernel (:meth:`ipympi.kernel.IpympiKernel.do_execute`) sees a parallel cell
   (``%%px``, or any cell under ``%autopx``), takes Ctrl-C only where the
   controller waits (:func:`~ipympi.notebook.controller.interrupts.interrupts_at_waits`),
   gives the cell its number, history and IPython's events
   (:func:`~ipympi.kernel.run_parallel_cell`) and calls the magic's ``run_on_ranks``,
   which calls :func:`~ipympi.notebook.controller.execute.run_cell`.
2. ``run_cell`` checks the options, parses the targets, makes sure the world can
   run the cell (:func:`~ipympi.notebook.controller.execute.ensure_world`: a fresh
   world after an abort, a wait for one still starting) and has the cluster send
   the cell to each target engine (``Cluster.submit``: one signed message per
   rank, a :class:`~ipympi.notebook.controller.records.Submission` to collect what
   comes back). A blocking cell is then followed by a :class:`CellRun`.
3. The run owns the loop. Each turn the cluster pumps (``Cluster.pump``: engine
   messages, the world's control socket, the launcher's pipes, errands of other
   threads) until the cell is done or the earliest of its wake-ups: the next
   progress line, the next look of the job's watch, ``--timeout``, output held
   for :data:`COALESCE` seconds. The cluster only records: replies and output
   go into the Submission (an engine that died gets a reply made for it). The
   run takes the new output (``Submission.take_output``) into its
   :class:`Coalescer`, which hands it in rank order to the
   :class:`~ipympi.notebook.controller.render.OutputRenderer` (IOPub messages).
4. The job's watch (:class:`~ipympi.launch.watch.JobWatch`, the launcher's too)
   asks the ranks what they do and judges the answers by the MPI's rule
   (:func:`~ipympi.notebook.controller.stuck.watch_for`); a verdict ends the cell
   as :func:`~ipympi.notebook.controller.stuck.stuck_end` says (interrupt, end
   the world, or only say so). ``--timeout`` and Ctrl-C interrupt the ranks still
   running, after keeping what they were doing.
5. Once every rank has replied: messages still on their way are reported
   (:func:`~ipympi.notebook.controller.stuck.late_leftovers`), the output is
   finished and the progress line cleared; after a failure the ranks are
   realigned and drop what the cell left, and the ``on_error`` hooks hear of it.
6. Back in the magic, the :class:`~ipympi.notebook.controller.cellresult.CellResult`
   raises its error (one :class:`~ipympi.notebook.controller.cellresult.RankError`),
   which the kernel shows and puts in the execute reply.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from ...core.ranksets import format_ranks
from ...launch.watch import JobWatch, Look
from .cellresult import CellOptions, CellResult
from .hooks import build_report, notify
from .records import Submission
from .render import OutputRenderer
from .stuck import describe_wait, discard_leftovers, late_leftovers, stuck_end, watch_for

if TYPE_CHECKING:
    from .contracts import CellCluster

__all__ = [
    "COALESCE",
    "PROGRESS_AFTER",
    "PROGRESS_EVERY",
    "CellRun",
    "Coalescer",
    "Progress",
    "Publish",
    "describe_progress",
]

PROGRESS_AFTER = 2.0  # seconds before a running cell shows what its ranks do
PROGRESS_EVERY = 1.0
COALESCE = 0.03  # seconds output may wait to be shown with other ranks' output

Publish = Callable[[str, dict, dict], None]


class Progress:
    """A progress line under a running cell, updated in place (a display with an id)."""

    def __init__(self, publish: Publish, display_id: str) -> None:
        self.publish = publish
        self.display_id = display_id
        self.shown = False

    def update(self, text: str) -> None:
        content = {
            "data": {"text/plain": text},
            "metadata": {"ipympi": {"progress": True}},
            "transient": {"display_id": self.display_id},
        }
        self.publish("update_display_data" if self.shown else "display_data", content, {})
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.update("")


def describe_progress(
    targets: list[int], req: Submission, states: list[dict], elapsed: float
) -> str:
    """``[12.3 s] done: 0,1 · running: 2 (line 4 of cell [7]) · blocked: 3 in Recv(...)``."""
    done = [r for r in targets if r in req.replies]
    parts = [f"[{elapsed:.1f} s] done: {format_ranks(done) if done else 'none'}"]
    for rank in req.pending:
        state = states[rank] if rank < len(states) else {}
        parts.append(f"rank {rank}: {describe_wait(state)}")
    return " · ".join(parts)


class Coalescer:
    """Holds arriving output for :data:`COALESCE` seconds, then hands it over by rank.

    Ranks that print at the same moment (``print(rank)`` on every rank) are
    then shown in rank order, the same on every run, and identical lines are
    collapsed; each rank's own output keeps its order (a stable sort).
    """

    def __init__(self, feed: Callable[[list[tuple[int, str, dict]]], None]) -> None:
        self.feed = feed
        self.items: list[tuple[int, str, dict]] = []
        self.since = 0.0

    def add(self, batch: list[tuple[int, str, dict]], since: float | None = None) -> None:
        """Hold ``batch``; ``since``: when its first item came (default: now)."""
        if not batch:
            return
        if not self.items:
            self.since = time.monotonic() if since is None else since
        self.items.extend(batch)

    @property
    def due(self) -> float | None:
        return self.since + COALESCE if self.items else None

    def flush(self) -> None:
        if self.items:
            batch = sorted(self.items, key=lambda item: item[0])
            self.items = []
            self.feed(batch)


class CellRun:
    """The run of one cell on its ranks (see the module docstring): its loop, its
    deadlines, the watch of its ranks, its interrupts and its rendering.

    ``publish`` None keeps the output in the result only. :meth:`run` returns
    once every target rank has replied (or the cell was ended), or raises what
    cut it short; either way the output so far is shown.
    """

    def __init__(
        self,
        cluster: CellCluster,
        result: CellResult,
        options: CellOptions,
        publish: Publish | None,
    ) -> None:
        self.cluster = cluster
        self.result = result
        self.options = options
        self.req: Submission = result.request
        self.gen = cluster.gen  # the world: %mpi restart may replace it meanwhile
        self.renderer: OutputRenderer | None = None
        self.coalescer: Coalescer | None = None
        self.progress: Progress | None = None
        if publish is not None:
            self.renderer = OutputRenderer(
                publish,
                targets=result.targets,
                execution_count=result.execution_count,
                stream=options.stream,
                group=options.group,
                collapse=options.collapse,
                label=cluster.n > 1,
            )
            self.coalescer = Coalescer(self.renderer.feed)
            self.progress = Progress(publish, f"ipympi-progress-{self.req.id}")
            self.req.shown = True  # output of the processes the ranks spawn comes here
        self.publish = publish
        result.renderer = self.renderer
        self.req.taken = 0  # everything the ranks said so far is shown first
        self.finished: set[int] = set()  # ranks whose end the renderer was told
        # Ranks that finish are told to the renderer at once only where it shows
        # something then (the next rank's output in rank order, uncollapsed results);
        # otherwise at the end, saving a wake-up per rank.
        self.eager = self.renderer is not None and (options.group == "rank" or not options.collapse)
        self.watch = JobWatch(self, watch_for(cluster), self.req.started)

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> None:
        """Wait for the cell, showing its output, and end it as it must end."""
        req, cluster = self.req, self.cluster
        try:
            self._loop()
            if not (req.interrupted or self.result.stuck or cluster.ended or cluster.aborted):
                req.add_output(*late_leftovers(cluster, req))
        finally:
            self._hand_over()
            if self.renderer is not None:
                self.renderer.finish()
            if self.progress is not None:
                self.progress.clear()
            if req.done:
                cluster.forget(req)
        if req.done and req.errors():
            self._after_failure()

    def _loop(self) -> None:
        req, cluster, watch = self.req, self.cluster, self.watch
        start = req.started
        deadline = None if self.options.timeout is None else start + self.options.timeout
        next_progress = start + PROGRESS_AFTER

        def done() -> bool:
            return req.done or watch.answered() or self._quiet_finish()

        self._take()  # what came before the run (a --noblock cell's output so far)

        while not req.done:
            try:
                due = self.coalescer.due if self.coalescer is not None else None
                # (the progress line is drawn from a look's answers: no wake-up of its own)
                cluster.pump(min(t for t in (watch.wake, deadline, due) if t), done)
                self._take()
                now = time.monotonic()
                due = self.coalescer.due if self.coalescer is not None else None
                if (due is not None and now >= due) or self._quiet_finish():
                    self._hand_over()
                if req.done:
                    return
                if deadline is not None and now >= deadline:
                    self.result.timed_out = self.options.timeout
                    self._stop_ranks()
                    return
                seen = watch.step(now)
                if seen is None:
                    continue
                if seen.verdict is not None and not self.result.stuck and self._stuck(seen):
                    return
                if now >= next_progress and self.progress is not None:
                    states = cluster.states()
                    text = describe_progress(self.result.targets, req, states, now - start)
                    self.progress.update(text)
                    next_progress = time.monotonic() + PROGRESS_EVERY
            except KeyboardInterrupt:
                self._stop_ranks()
                return

    def _take(self) -> None:
        """Take the output that came into the coalescer (held for its turn)."""
        if self.coalescer is not None:
            fresh = self.req.fresh_since
            self.coalescer.add(self.req.take_output(), fresh)

    def _quiet_finish(self) -> bool:
        """A rank finished and no output is being held: tell the renderer at once."""
        if not self.eager:
            return False
        self._take()
        if self.coalescer is not None and self.coalescer.items:
            return False  # held output (and the finish) are handed over when due
        return any(rank not in self.finished for rank in self.req.replies)

    def _hand_over(self) -> None:
        """Show the held output, and tell the renderer which ranks have finished."""
        self._take()
        if self.coalescer is not None:
            self.coalescer.flush()
        if self.renderer is not None:
            for rank in sorted(set(self.req.replies) - self.finished):
                self.finished.add(rank)
                self.renderer.rank_done(rank)

    # -- the watch of the ranks ------------------------------------------------------------
    def ask_states(self) -> Callable[[], bool]:
        """Ask the ranks (and the processes they spawned) what they do."""
        return self.cluster.ask_states()

    def seen(self) -> Look:
        """What the last answers say of the ranks still running the cell, and of the
        running processes they spawned (which may be what they wait for)."""
        req, cluster = self.req, self.cluster
        states = cluster.states()
        current = {rank: states[rank] for rank in req.pending}
        current.update(cluster.children.states)  # stuck only if they are too
        failed = [r for r, reply in req.replies.items() if reply.content.get("status") != "ok"]
        finished = [r for r in req.replies if r not in failed]
        pending = [*req.pending, *cluster.children.procs]
        return Look(current, pending, finished, failed, req.said)

    def _stuck(self, seen: Look) -> bool:
        """End the stuck cell as the session's ``on_error`` says; True when it ends."""
        assert seen.verdict is not None
        req, result, cluster = self.req, self.result, self.cluster
        end = stuck_end(cluster, req, seen.verdict, f"cell [{result.execution_count}]")
        result.stuck = seen.verdict.text
        if end.how == "wait":
            if self.publish is not None and end.note:
                self.publish("stream", {"name": "stderr", "text": end.note}, {})
            return False
        result.states = {rank: seen.states[rank] for rank in req.pending}
        result.waiting = {rank: describe_wait(seen.states[rank]) for rank in req.pending}
        result.stopped = set(req.pending)
        if end.ended is not None:
            req.ended = end.ended
        if end.how == "end":
            cluster.end_world(end.reason or "")
        else:
            cluster.interrupt(req, resynchronize=True)
        return True

    def _stop_ranks(self) -> None:
        """Interrupt the ranks still running (``--timeout``, Ctrl-C), keeping what each
        was doing for the cell's error and its report."""
        states = self.cluster.query_states(timeout=0.5)
        pending = [rank for rank in self.req.pending if rank < len(states)]
        self.result.states = {rank: states[rank] for rank in pending}
        self.result.waiting = {rank: describe_wait(states[rank]) for rank in pending}
        self.watch.drop()
        self.cluster.interrupt(self.req)

    # -- the end of a failed cell ------------------------------------------------------
    def _after_failure(self) -> None:
        """Realign the ranks, have them drop what the cell left, tell the hooks."""
        cluster, result = self.cluster, self.result
        same_world = cluster.gen == self.gen and not cluster.ending
        alive = same_world and not cluster.ended and cluster.aborted is None
        if alive and not self.req.interrupted:
            # Ranks that left a failed cell early may hold news of a collective
            # mismatch, or be a collective ahead: realign them for the next cell.
            cluster.resynchronize()
        if alive:
            result.discarded = discard_leftovers(cluster, list(result.targets))
        exc = result.error()
        if exc is None:
            return
        lines = exc.traceback_lines
        notify(
            build_report(
                result.execution_count,
                lines[0] if lines else str(exc),
                type(exc).__name__,
                result.request.errors(),
                result.states,
                result.stopped,
            )
        )
