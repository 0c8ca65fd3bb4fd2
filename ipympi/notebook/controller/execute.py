"""Running one parallel cell: options, live output, progress, timeout, the cell's error.

:func:`run_cell` sends a cell to the target ranks, renders what they say as it
arrives (:mod:`ipympi.notebook.controller.render`), shows a progress line when the
cell runs for more than :data:`PROGRESS_AFTER` seconds, interrupts the ranks
on Ctrl-C or after ``--timeout`` seconds, and returns a :class:`CellResult`.
A failed cell becomes one exception, :class:`RankError`, whose class name is
the real exception's (``ZeroDivisionError``), so Jupyter's ``error`` message
and execute reply carry the real ``ename``.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ...core.ranksets import format_ranks, parse_targets, ranks_phrase
from ...launch.watch import LOOK_AFTER, LOOK_EVERY
from .hooks import build_report, notify
from .interrupts import interrupts_at_waits
from .launchers import ClusterError
from .records import Submission
from .render import GROUPS, WORLD_ENDED, OutputRenderer, compose_error
from .stuck import describe_wait, discard_leftovers, late_leftovers, look, on_stuck, watch_for

if TYPE_CHECKING:
    from ...teach.trace import Trace
    from .cluster import Cluster

__all__ = [
    "PROGRESS_AFTER",
    "CellOptions",
    "CellResult",
    "Progress",
    "RankError",
    "follow",
    "rank_error",
    "run_cell",
]

PROGRESS_AFTER = 2.0  # seconds before a running cell shows what its ranks do
PROGRESS_EVERY = 1.0
COALESCE = 0.03  # seconds output may wait to be shown with other ranks' output

Publish = Callable[[str, dict, dict], None]


@dataclass
class CellOptions:
    """How to run a parallel cell (the options of ``%%px``)."""

    targets: Any = None  # parsed by parse_targets: None/"all", "0", "1,3", "::2", ...
    block: bool = True
    stream: bool = True
    group: str = "order"
    collapse: bool = True
    timeout: float | None = None
    silent: bool = False
    store_history: bool = True
    trace: bool = False  # record every message of the cell on every rank

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(
                f"--group-outputs must be one of {', '.join(GROUPS)}, not {self.group!r}"
            )
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"--timeout must be a positive number of seconds, not {self.timeout}")


class RankError(Exception):
    """A parallel cell failed on one or more ranks.

    Instances are of a subclass named after the real exception (see
    :func:`rank_error`); ``errors`` maps each failed rank to its error
    (``ename``, ``evalue``, ``traceback``), and the traceback IPython shows
    is the composed one: a summary line, then each distinct traceback once.
    """

    def __init__(self, summary: str, errors: Mapping[int, dict], traceback: list[str]):
        super().__init__(summary)
        self.errors = dict(errors)
        self.traceback_lines = list(traceback)

    def _render_traceback_(self) -> list[str]:
        return self.traceback_lines


_ERROR_CLASSES: dict[str, type[RankError]] = {}
# The errors of ranks that ipympi stopped: not failures of their own.
_STOPPED_ENAMES = ("KeyboardInterrupt", "EngineDied", WORLD_ENDED)


def rank_error(
    errors: Mapping[int, dict],
    targets: list[int],
    waiting: Mapping[int, str] | None = None,
    ename: str | None = None,
) -> RankError:
    """One RankError for a cell's errors, of a class named like the real exception.

    ``ename`` overrides the name (by default the lowest failing rank's).
    """
    composed = compose_error(dict(errors), targets, dict(waiting or {}) or None)
    ename = ename or str(composed["ename"]) or "Error"
    if not all(part.isidentifier() for part in ename.split(".")):
        ename = "Error"  # a class may be named "MPI.Exception", as a program knows it
    cls = _ERROR_CLASSES.get(ename)
    if cls is None:
        cls = type(ename, (RankError,), {"__module__": "ipympi"})
        _ERROR_CLASSES[ename] = cls
    evalue = composed["evalue"]
    if ename != composed["ename"]:
        named = [e for _, e in sorted(errors.items()) if e.get("ename") == ename]
        evalue = named[0].get("evalue", evalue) if named else evalue
    return cls(str(evalue), errors, list(composed["traceback"]))


@dataclass
class CellResult:
    """What a parallel cell did on each rank (also kept by ``--save-name``)."""

    request: Submission
    targets: list[int]
    execution_count: int
    renderer: OutputRenderer | None = None
    timed_out: float | None = None  # the --timeout that ended the cell
    waiting: dict[int, str] = field(default_factory=dict)  # what unfinished ranks were doing
    stuck: str | None = None  # the wait-for graph, when no rank could progress
    stopped: set[int] = field(default_factory=set)  # ranks ended because the cell was stuck
    states: dict[int, dict] = field(default_factory=dict)  # unfinished ranks' MPI states
    traced: bool = False  # the ranks recorded the cell's messages (``--trace``)
    discarded: str | None = None  # what the ranks dropped that the failed cell left

    @property
    def done(self) -> bool:
        return self.request.done

    @property
    def errors(self) -> dict[int, dict]:
        """Each failed rank's error; ranks stopped by ``--timeout`` show a TimeoutError.

        Ranks that were stopped because the cell was stuck are not failures
        of their own: they appear in ``waiting``, unless no rank failed at all
        (a deadlock), when each shows a DeadlockError.
        """
        errors = self.request.errors()
        for rank in self.stopped:
            if errors.get(rank, {}).get("ename") in _STOPPED_ENAMES:
                del errors[rank]
        if self.stuck and not errors:
            for rank in sorted(self.stopped):
                where = self.waiting.get(rank, "waiting")
                errors[rank] = {
                    "ename": "DeadlockError",
                    "evalue": self.stuck,
                    "traceback": [f"DeadlockError: rank {rank} was stopped while {where}"],
                }
        if self.timed_out is not None:
            for rank, error in errors.items():
                if error.get("ename") == "KeyboardInterrupt":
                    evalue = f"{self.timeout_text}; {_stopped(rank, error)}"
                    traceback = [
                        *map(_as_timeout_header, list(error.get("traceback") or [])[:-1]),
                        f"TimeoutError: {evalue}",
                    ]
                    errors[rank] = dict(
                        error, ename="TimeoutError", evalue=evalue, traceback=traceback
                    )
        return errors

    def trace(self) -> Trace | None:
        """The messages of a traced cell on every rank that replied (None if not traced)."""
        if not self.traced:
            return None
        from ...teach.trace import Trace

        records = {
            rank: pickle.loads(reply.buffers[0])
            for rank, reply in sorted(self.request.replies.items())
            if reply.buffers
        }
        return Trace.from_ranks(records)

    @property
    def ok(self) -> bool:
        return self.done and not self.errors

    @property
    def results(self) -> dict[int, dict]:
        """Each rank's ``execute_result`` data (its mime bundle)."""
        return {
            rank: content["data"]
            for rank, kind, content in self.request.messages
            if kind == "execute_result"
        }

    @property
    def payload(self) -> list[dict]:
        """What the ranks asked of the front end (the pager's text of ``obj?``): their
        common payload, else that of the lowest rank that has one."""
        payloads = [
            reply.content["payload"]
            for _, reply in sorted(self.request.replies.items())
            if reply.content.get("payload")
        ]
        return list(payloads[0]) if payloads else []

    def stdout(self, rank: int) -> str:
        return self._text(rank, "stdout")

    def stderr(self, rank: int) -> str:
        return self._text(rank, "stderr")

    def _text(self, rank: int, name: str) -> str:
        return "".join(
            content["text"]
            for r, kind, content in self.request.messages
            if r == rank and kind == "stream" and content.get("name") == name
        )

    def error(self) -> RankError | None:
        """The cell's error as one exception, or None when every rank succeeded."""
        errors = self.errors
        if not errors:
            return None
        waiting = {r: w for r, w in self.waiting.items() if r not in errors}
        died = [r for r, e in sorted(errors.items()) if e.get("ename") == "EngineDied"]
        # A rank's death is the news; the MPI errors it caused in others follow it.
        exc = rank_error(errors, self.targets, waiting, "EngineDied" if died else None)
        if died and len(errors) > len(died):
            exc.traceback_lines[0] = _after_deaths(errors, died, self.targets, waiting)
        ended = self.request.ended
        if self.stuck and type(exc).__name__ == "DeadlockError":
            exc.traceback_lines[0] = f"{self.stuck}; {ended or 'the ranks were stopped'}"
            ended = None
        if self.timed_out is not None and type(exc).__name__ == "TimeoutError":
            stops = [_stopped(r, self.request.errors().get(r, {})) for r in sorted(errors)]
            exc.traceback_lines[0] = "; ".join([self.timeout_text, *stops])
        if ended:
            exc.traceback_lines[0] += f"; {ended}"
        if self.discarded:
            exc.traceback_lines.append(self.discarded)
        return exc

    @property
    def timeout_text(self) -> str:
        return f"the cell ran longer than --timeout {self.timed_out:g} s"

    def raise_for_error(self) -> None:
        exc = self.error()
        if exc is not None:
            raise exc

    def __repr__(self) -> str:
        state = "done" if self.done else f"running on {format_ranks(self.request.pending)}"
        failed = f", failed on {format_ranks(sorted(self.errors))}" if self.errors else ""
        ranks = format_ranks(self.targets)
        return f"<CellResult [{self.execution_count}] ranks {ranks}: {state}{failed}>"


def _after_deaths(
    errors: Mapping[int, dict], died: list[int], targets: list[int], waiting: Mapping[int, str]
) -> str:
    """The summary of a cell in which ranks died: the deaths first, then what the others
    were doing when their MPI calls failed because of them, then any other failure.

    ``rank 1 has died (exited with status 3) while ranks 0,2,3 waited in Barrier:
    collective #0 on MPI_COMM_WORLD (each raised MPI.Exception of class ERR_OTHER)``
    """
    deaths = "; ".join(str(errors[rank].get("evalue", "")) for rank in died)
    caused: dict[tuple[str, str, str], list[int]] = {}  # (call, ename, error class) -> ranks
    rest = {}
    for rank, error in sorted(errors.items()):
        if rank in died:
            continue
        if error.get("died"):
            call = str(error.get("call") or "an MPI call")
            key = (call, str(error.get("ename", "")), str(error.get("error_class", "")))
            caused.setdefault(key, []).append(rank)
        else:
            rest[rank] = error
    parts = []
    for (call, ename, errorclass), ranks in caused.items():
        raised = f"{'each raised' if len(ranks) > 1 else 'raised'} {ename}"
        raised += f" of class {errorclass}" if errorclass else ""
        parts.append(f"{ranks_phrase(ranks)} waited in {call} ({raised})")
    text = f"{deaths} while {'; '.join(parts)}" if parts else deaths
    if rest:
        text += "; " + str(compose_error(rest, targets, waiting or None)["traceback"][0])
    elif waiting:
        text += "".join(f"; rank {rank} was {what}" for rank, what in sorted(waiting.items()))
    return text


def _as_timeout_header(line: str) -> str:
    """IPython's traceback header of the interrupt, named as the timeout it was."""
    if "Traceback (most recent call last)" not in line:
        return line
    return line.replace("KeyboardInterrupt", "TimeoutError     ", 1)  # same width


def _stopped(rank: int, error: Mapping[str, Any]) -> str:
    where = str(error.get("where") or "")
    return f"rank {rank} was stopped {where}".rstrip()


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


def run_cell(
    cluster: Cluster,
    code: str,
    options: CellOptions,
    publish: Publish | None,
    execution_count: int,
) -> CellResult:
    """Run ``code`` on the target ranks; with ``options.block``, show its output and wait.

    ``publish`` None keeps the output in the result only. A non-blocking cell
    collects its output quietly until :func:`follow` shows it (``%pxresult``).
    """
    if options.trace and cluster.backend != "builtin":
        raise ValueError(
            "--trace records the messages of ipympi's built-in MPI; this session runs "
            f"{cluster.backend} (%mpi restart --backend builtin to trace, %mpi trace off to stop)"
        )
    targets = parse_targets(options.targets, cluster.n)
    ensure_world(cluster, targets, publish)
    content = {
        "code": code,
        "silent": options.silent,
        "store_history": options.store_history and not options.silent,
        "execution_count": execution_count,
    }
    if options.trace:
        content["trace"] = True
    req = cluster.submit("execute", content, targets)
    result = CellResult(req, targets, execution_count, traced=options.trace)
    if options.block:
        follow(cluster, result, options, publish)
    return result


def ensure_world(cluster: Cluster, targets: list[int], publish: Publish | None) -> None:
    """Make sure the target ranks can run a cell.

    A world that has ended entirely (an ``Abort``, every rank dead, or ended by
    ipympi) is replaced by a fresh one, with a notice that names the variables
    lost with it; a world with some dead target
    ranks is an error that says so (``%mpi restart`` brings back a full one).
    """
    if cluster.stopped:
        raise ClusterError("the MPI session is stopped: %mpi start (or %mpi restart) starts it")
    engines = cluster.engines
    dead = [e for e in engines if e.returncode is not None]
    if engines and (len(dead) == len(engines) or cluster.aborted is not None or cluster.ended):
        lost = cluster.variables()
        notice = (
            f"ipympi: the previous MPI world has ended ({cluster.world_ended()}); "
            f"starting a fresh world of {cluster.n} ranks"
            + (f" (variables lost: {_names(lost)})" if lost else "")
            + "\n"
        )
        if publish is not None:
            publish("stream", {"name": "stderr", "text": notice}, {})
        cluster.stop()
        cluster.start()
        return
    if not cluster.ready and not dead:
        cluster.wait_ready()  # a world still starting (e.g. with the kernel)
        return
    gone = [e for e in dead if e.rank in targets]
    if gone:
        raise ClusterError(f"{cluster.world_ended()}; %mpi restart brings back a full world")


def _names(names: list[str], most: int = 12) -> str:
    """``a, b, c`` (``..., and 3 more`` past ``most``)."""
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown}, and {len(names) - most} more"


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

    def add(self, batch: list[tuple[int, str, dict]]) -> None:
        if not self.items:
            self.since = time.monotonic()
        self.items.extend(batch)

    @property
    def due(self) -> float | None:
        return self.since + COALESCE if self.items else None

    def flush(self) -> None:
        if self.items:
            batch = sorted(self.items, key=lambda item: item[0])
            self.items = []
            self.feed(batch)


def follow(
    cluster: Cluster, result: CellResult, options: CellOptions, publish: Publish | None
) -> None:
    """Show a cell's output (what came so far, then live) and wait for it to end.

    A progress line appears after :data:`PROGRESS_AFTER` seconds; Ctrl-C or
    ``options.timeout`` interrupts the ranks still running (their state is kept
    for the error summary). Ctrl-C is taken only while the controller waits
    (:func:`~ipympi.notebook.controller.cluster.interrupts_at_waits`), so that no interrupt
    cuts short the handling of another, or of the stuck-cell rule's. Errands
    handed to the cluster meanwhile (``%mpi status``, ``stop``, ``restart`` from
    the kernel) run at its waits.
    """
    with interrupts_at_waits(), cluster.errands.taking():
        _follow(cluster, result, options, publish)


def _follow(
    cluster: Cluster, result: CellResult, options: CellOptions, publish: Publish | None
) -> None:
    req = result.request
    gen = cluster.gen  # the world: %mpi restart may replace it meanwhile
    renderer = coalescer = progress = None
    if publish is not None:
        renderer = OutputRenderer(
            publish,
            targets=result.targets,
            execution_count=result.execution_count,
            stream=options.stream,
            group=options.group,
            collapse=options.collapse,
            label=cluster.n > 1,
        )
        coalescer = Coalescer(renderer.feed)
        coalescer.add(list(req.messages))
        req.on_output = coalescer.add
        progress = Progress(publish, f"ipympi-progress-{req.id}")
    result.renderer = renderer
    finished: set[int] = set()
    # Ranks that finish are told to the renderer at once only where it shows
    # something then (the next rank's output in rank order, uncollapsed results);
    # otherwise at the end, saving a wake-up per rank.
    eager = renderer is not None and (options.group == "rank" or not options.collapse)

    def quiet_finish() -> bool:
        return eager and _quiet_finish(req, finished, coalescer)

    def hand_over() -> None:
        if coalescer is not None:
            coalescer.flush()
        if renderer is not None:
            for rank in sorted(set(req.replies) - finished):
                finished.add(rank)
                renderer.rank_done(rank)

    start = req.started
    deadline = None if options.timeout is None else start + options.timeout
    next_progress = start + PROGRESS_AFTER
    next_look = start + LOOK_AFTER
    watch = watch_for(cluster)
    try:
        while not req.done:
            try:
                wake = [next_progress, next_look, deadline, coalescer and coalescer.due]
                cluster.pump(
                    min(t for t in wake if t),
                    lambda: req.done or quiet_finish(),
                )
                now = time.monotonic()
                due = coalescer.due if coalescer is not None else None
                if (due is not None and now >= due) or quiet_finish():
                    hand_over()
                if req.done:
                    break
                if deadline is not None and now >= deadline:
                    result.timed_out = options.timeout
                    _note_waiting(cluster, result)
                    cluster.interrupt(req)
                    break
                if now >= next_look:
                    states = cluster.query_states(timeout=0.2)
                    current = {rank: states[rank] for rank in req.pending}
                    # the processes the ranks spawned: stuck only if they are too
                    current.update(cluster.children.states)
                    spawned = list(cluster.children.procs)
                    verdict = None if result.stuck else look(watch, now, current, req, spawned)
                    if verdict and on_stuck(cluster, result, current, verdict, publish):
                        break
                    next_look = time.monotonic() + LOOK_EVERY
                    if now >= next_progress and progress is not None:
                        progress.update(describe_progress(result.targets, req, states, now - start))
                        next_progress = time.monotonic() + PROGRESS_EVERY
            except KeyboardInterrupt:
                _note_waiting(cluster, result)
                cluster.interrupt(req)
                break
        if not (req.interrupted or result.stuck or cluster.ended or cluster.aborted):
            late_leftovers(cluster, result, coalescer.add if coalescer is not None else None)
    finally:
        req.on_output = renderer.feed if renderer is not None else None
        hand_over()
        if renderer is not None:
            renderer.finish()
        if progress is not None:
            progress.clear()
        if req.done:
            cluster.forget(req)
    if req.done and req.errors():
        same_world = cluster.gen == gen and not cluster.ending
        alive = same_world and not cluster.ended and cluster.aborted is None
        if alive and not req.interrupted:
            # Ranks that left a failed cell early may hold news of a collective
            # mismatch, or be a collective ahead: realign them for the next cell.
            cluster.resynchronize()
        if alive:
            result.discarded = discard_leftovers(cluster, list(result.targets))
        _report_failure(result)


def _quiet_finish(req: Submission, finished: set[int], coalescer: Coalescer | None) -> bool:
    """A rank finished and no output is being held: tell the renderer at once."""
    if coalescer is not None and coalescer.items:
        return False  # held output (and the finish) are handed over when due
    return any(rank not in finished for rank in req.replies)


def _note_waiting(cluster: Cluster, result: CellResult) -> None:
    """Keep what each unfinished rank is doing, for the cell's error and its report."""
    states = cluster.query_states(timeout=0.5)
    pending = [rank for rank in result.request.pending if rank < len(states)]
    result.states = {rank: states[rank] for rank in pending}
    result.waiting = {rank: describe_wait(states[rank]) for rank in pending}


def _report_failure(result: CellResult) -> None:
    """Tell the session's ``on_error`` hooks about a failed cell."""
    exc = result.error()
    if exc is None:
        return
    lines = exc.traceback_lines
    report = build_report(
        result.execution_count,
        lines[0] if lines else str(exc),
        type(exc).__name__,
        result.request.errors(),
        result.states,
        result.stopped,
    )
    notify(report)
