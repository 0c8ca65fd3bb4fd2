"""Per-rank output of a cell, labelled as IPython Parallel labels it.

Every rank (engine) of a session sends the controller Jupyter-style IOPub
messages while it runs a cell: ``stream``, ``display_data``,
``update_display_data``, ``clear_output``, ``execute_result`` and ``error``.
An :class:`OutputRenderer` turns them into the messages the controller
publishes on the notebook's IOPub channel, so that a reader can tell which rank
printed what, without drowning in repeats when every rank printed the same.
This module is pure: no sockets, threads or IPython; the caller passes a
``publish(msg_type, content, metadata)`` callback.

Labels (``R`` is a set of ranks written by :func:`~.targets.format_ranks`)
    ``[stdout:R] line`` / ``[stderr:R] line``
        prefix every line of stream text, e.g. ``[stdout:0-3] hello`` when ranks
        0 to 3 all printed ``hello``. Only complete lines are published; a
        partial last line waits for its end, or for the rank (or the cell) to
        finish, when it is published with a newline added.
    ``[output:R]``
        a line of stdout published before a rank's rich display (a plot, HTML),
        unless the previous output was already a display of the same rank.
    ``Out[R:n]:``
        a line of stdout published before a rank's result, where ``n`` is the
        notebook's (controller's) execution count; the result follows as an
        ``execute_result`` whose data is the engine's, unchanged.
    ``[R:execute]``
        heads each distinct traceback in the cell's one error message; see
        :func:`compose_error`. The renderer itself never publishes errors.

    Published messages carry ``{"ipympi": {...}}`` metadata naming their ranks,
    so a front end can restyle them. With ``label=False`` (a one-rank session,
    where labels are noise) stream text passes through unchanged and results
    and displays get no label; identical outputs are then never collapsed,
    since without labels nothing would say that several ranks produced them.
    Stream text of a process that is not a target (one the ranks spawned) is labelled
    even then: it is not the rank's own.

Grouping modes (``stream`` and ``group``)
    ``stream=True, group="order"`` (the default)
        output is published as it arrives; results are published when their
        rank is done or, when collapsing, together at the end of the cell.
    ``stream=True, group="rank"``
        the lowest rank not yet done is live and its output is published at
        once; other ranks' output waits until every lower rank is done, so the
        output reads in rank order while it streams.
    ``stream=False, group="order"``
        everything is held until the cell ends, then published in arrival
        order (adjacent text of one rank and stream merged).
    ``stream=False, group="rank"``
        at the end, for each rank in turn: its stdout, stderr, displays (in
        their order) and result.
    ``group="type"`` (streaming or not)
        at the end: all stdout (rank order), all stderr, all displays, all
        results.

Collapse (``collapse=True``)
    Ranks that produced exactly the same text on the same stream are shown
    once, under a label naming them all: within one batch of arriving
    messages while streaming, and over the whole cell when output is held.
    Results with equal data are shown once (``Out[0-3:5]:``). While output is
    held, a ``clear_output`` from a rank discards that rank's earlier output
    instead of being published (published, it would clear other ranks' output
    too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Callable, NamedTuple

from ...core.ranksets import format_ranks, ranks_phrase
from ...core.tracebacks import group_identical, strip_ansi

__all__ = [
    "ENDED_BY_ABORT",
    "GROUPS",
    "WORLD_ENDED",
    "OutputRenderer",
    "Publish",
    "compose_error",
    "strip_ansi",
]

#: ``publish(msg_type, content, metadata)``: send one IOPub message to the notebook.
Publish = Callable[[str, dict, dict], None]

#: The accepted values of ``OutputRenderer(group=...)``.
GROUPS = ("order", "rank", "type")

_DISPLAYS = frozenset({"display_data", "update_display_data", "clear_output"})
_RED, _RESET = "\x1b[0;31m", "\x1b[0m"
_GREY, _ORANGE = "\x1b[0;90m", "\x1b[0;31m"  # label colours (ANSI), as IPython's prompts


class _Publish(NamedTuple):
    """One thing to publish: a block of text, a display message or a result."""

    kind: str  # "text", "display" or "result"
    ranks: tuple[int, ...]
    name: str  # the stream name, the display's msg_type, or "" for a result
    payload: Any  # the text, the display's content, or the (first rank's) result content


def _stream_name(content: Mapping[str, Any]) -> str:
    return str(content.get("name", "stdout"))


def _label_lines(text: str, label: str) -> str:
    """Every line of ``text`` (which ends with a newline) prefixed by ``label``."""
    lines = text.split("\n")[:-1]
    return "".join(f"{label} {line}\n" if line else f"{label}\n" for line in lines)


def _collapse(ops: list[_Publish]) -> list[_Publish]:
    """Ranks that contributed the same text to the same stream in ``ops`` shown once.

    A rank's text on one stream is its text ops joined; it is left alone if one
    of the rank's displays lies between those ops (collapsing would reorder
    them). The collapsed op takes the place of the group's first op.
    """
    spans: dict[tuple[int, str], list[int]] = {}
    barriers: dict[int, list[int]] = {}
    for i, op in enumerate(ops):
        if op.kind == "text" and len(op.ranks) == 1:
            spans.setdefault((op.ranks[0], op.name), []).append(i)
        else:
            for rank in op.ranks:
                barriers.setdefault(rank, []).append(i)
    groups: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for key, idx in spans.items():
        if not any(idx[0] < j < idx[-1] for j in barriers.get(key[0], ())):
            text = "".join(ops[i].payload for i in idx)
            groups.setdefault((key[1], text), []).append(key)
    replace: dict[int, _Publish] = {}
    drop: set[int] = set()
    for (name, text), keys in groups.items():
        if len(keys) > 1:
            idx = sorted(i for key in keys for i in spans[key])
            replace[idx[0]] = _Publish("text", tuple(sorted(k[0] for k in keys)), name, text)
            drop.update(idx[1:])
    return [replace.get(i, op) for i, op in enumerate(ops) if i not in drop]


def _apply_clears(events: list[tuple[int, str, dict]]) -> list[tuple[int, str, dict]]:
    """Held output with each ``clear_output`` applied to its own rank's earlier output."""
    kept: list[tuple[int, str, dict]] = []
    for event in events:
        rank, msg_type, _ = event
        if msg_type == "clear_output":
            kept = [e for e in kept if e[0] != rank or e[1] == "update_display_data"]
        else:
            kept.append(event)
    return kept


class OutputRenderer:
    """Publishes one cell's output from several ranks, labelled and grouped.

    ``targets`` are the ranks running the cell, ``execution_count`` the
    notebook's count for it (used in ``Out[R:n]:``). ``stream``, ``group``,
    ``collapse`` and ``label`` choose the presentation (see the module
    docstring). Feed every message with :meth:`feed`, call :meth:`rank_done`
    when a rank's cell has finished and :meth:`finish` when the cell is over;
    then :attr:`errors` holds the ranks' error contents for
    :func:`compose_error`. Calls after :meth:`finish` are ignored.
    """

    def __init__(
        self,
        publish: Publish,
        *,
        targets: Iterable[int],
        execution_count: int,
        stream: bool = True,
        group: str = "order",
        collapse: bool = True,
        label: bool = True,
    ) -> None:
        if group not in GROUPS:
            choices = ", ".join(repr(g) for g in GROUPS)
            raise ValueError(f"group must be one of {choices}, not {group!r}")
        self._publish = publish
        self._targets = sorted(set(targets))
        self._count = execution_count
        self._group = group
        self._label = label
        self._collapse = collapse and label
        self._held = not stream or group == "type"  # publish nothing before finish()
        self._live_mode = stream and group == "rank"
        self._live = 0  # index in _targets of the live rank (live mode)
        self._partial: dict[tuple[int, str], str] = {}  # (rank, stream) -> unfinished line
        self._pending: dict[int, list[tuple[str, dict]]] = {}  # live mode: other ranks' output
        self._events: list[tuple[int, str, dict]] = []  # held mode: all output, in order
        self._results: dict[int, dict] = {}
        self._errors: dict[int, dict] = {}
        self._results_out: set[int] = set()
        self._done: set[int] = set()
        self._seen: set[int] = set()
        self._last_display: int | None = None  # rank of the last published display
        self._finished = False

    @property
    def errors(self) -> dict[int, dict]:
        """The ``error`` content each failing rank sent (the last one, if several)."""
        return dict(self._errors)

    @property
    def results(self) -> dict[int, dict]:
        """The ``execute_result`` content each rank sent (the last one, if several)."""
        return dict(self._results)

    # -- the caller's side ----------------------------------------------------------
    def feed(self, batch: Iterable[tuple[int, str, Mapping[str, Any]]]) -> None:
        """Take ``(rank, msg_type, content)`` messages received together, in arrival order."""
        if self._finished:
            return
        ops: list[_Publish] = []
        for rank, msg_type, content in batch:
            self._seen.add(rank)
            if msg_type == "execute_result":
                self._results[rank] = dict(content)
            elif msg_type == "error":
                self._errors[rank] = dict(content)
            elif msg_type != "stream" and msg_type not in _DISPLAYS:
                continue
            elif self._held:
                self._events.append((rank, msg_type, dict(content)))
            elif self._live_mode and rank != self._live_rank():
                self._pending.setdefault(rank, []).append((msg_type, dict(content)))
            else:
                ops += self._process(rank, msg_type, content)
        self._emit(ops, self._collapse)

    def rank_done(self, rank: int) -> None:
        """Note that ``rank`` finished the cell and everything it sent has been fed."""
        if self._finished or rank in self._done:
            return
        self._done.add(rank)
        if self._held:
            return
        if not self._live_mode:
            ops = self._flush(rank)
            if not self._collapse:
                ops += self._result_ops([rank])
            self._emit(ops, self._collapse)
            return
        ops = []
        live = self._live_rank()
        while live is not None and live in self._done:
            ops += self._drain(live)
            self._live += 1
            live = self._live_rank()
        if live is not None:
            ops += self._replay(live)
        self._emit(ops, self._collapse)

    def finish(self) -> None:
        """End the cell: publish everything still held, partial lines included."""
        if self._finished:
            return
        self._finished = True
        ranks = sorted(set(self._targets) | self._seen)
        if self._held:
            self._finish_held(ranks)
            return
        ops: list[_Publish] = []
        if self._live_mode:
            drained = set(self._targets[: self._live])
            for rank in ranks:
                if rank not in drained:
                    ops += self._drain(rank)
        else:
            for rank in ranks:
                ops += self._flush(rank)
        self._emit(ops, self._collapse)
        self._emit(self._result_ops(ranks), False)

    # -- turning messages into ops ----------------------------------------------------
    def _live_rank(self) -> int | None:
        return self._targets[self._live] if self._live < len(self._targets) else None

    def _process(self, rank: int, msg_type: str, content: Mapping[str, Any]) -> list[_Publish]:
        if msg_type != "stream":
            return [_Publish("display", (rank,), msg_type, content)]
        name, text = _stream_name(content), content.get("text")
        if not isinstance(text, str) or not text:
            return []
        if not self._labels(rank):
            return [_Publish("text", (rank,), name, text)]
        text = self._partial.pop((rank, name), "") + text
        cut = text.rfind("\n") + 1
        if cut < len(text):
            self._partial[(rank, name)] = text[cut:]
        return [_Publish("text", (rank,), name, text[:cut])] if cut else []

    def _flush(self, rank: int, name: str | None = None) -> list[_Publish]:
        """The partial lines of ``rank`` (on stream ``name``, or all), ended with a newline."""
        keys = [k for k in self._partial if k[0] == rank and name in (None, k[1])]
        return [_Publish("text", (rank,), k[1], self._partial.pop(k) + "\n") for k in keys]

    def _replay(self, rank: int) -> list[_Publish]:
        """The output held for ``rank`` while another rank was live (live mode)."""
        return [op for t, c in self._pending.pop(rank, []) for op in self._process(rank, t, c)]

    def _drain(self, rank: int) -> list[_Publish]:
        """Everything ``rank`` has left to show, for a rank that is done (live mode)."""
        ops = self._replay(rank) + self._flush(rank)
        return ops + ([] if self._collapse else self._result_ops([rank]))

    def _result_ops(self, ranks: Iterable[int]) -> list[_Publish]:
        """The results of ``ranks`` not yet published, equal ones grouped when collapsing."""
        todo = [r for r in ranks if r in self._results and r not in self._results_out]
        self._results_out.update(todo)
        groups: list[list[int]] = []
        for rank in todo:
            data = self._results[rank].get("data")
            for group in groups if self._collapse else ():
                if self._results[group[0]].get("data") == data:
                    group.append(rank)
                    break
            else:
                groups.append([rank])
        return [_Publish("result", tuple(g), "", self._results[g[0]]) for g in groups]

    def _finish_held(self, ranks: list[int]) -> None:
        events = _apply_clears(self._events)
        if self._group == "order":
            last = {(r, _stream_name(c)): i for i, (r, t, c) in enumerate(events) if t == "stream"}
            ops: list[_Publish] = []
            for i, (rank, msg_type, content) in enumerate(events):
                ops += self._process(rank, msg_type, content)
                if msg_type == "stream" and last[rank, _stream_name(content)] == i:
                    ops += self._flush(rank, _stream_name(content))
            self._emit(ops, self._collapse)
            self._emit(self._result_ops(ranks), False)
            return
        names = ["stdout", "stderr"]
        texts: dict[tuple[int, str], str] = {}
        displays: dict[int, list[_Publish]] = {r: [] for r in ranks}
        for rank, msg_type, content in events:
            text = content.get("text")
            if msg_type != "stream":
                displays[rank].append(_Publish("display", (rank,), msg_type, content))
            elif isinstance(text, str) and text:
                name = _stream_name(content)
                if name not in names:
                    names.append(name)
                texts[rank, name] = texts.get((rank, name), "") + text
        blocks: dict[tuple[int, str], _Publish] = {}  # (first rank, stream) -> its block
        for name in names:
            groups: dict[object, tuple[str, list[int]]] = {}
            for rank in ranks:
                text = texts.get((rank, name), "")
                if self._label and text and not text.endswith("\n"):
                    text += "\n"
                if text:
                    groups.setdefault(text if self._collapse else rank, (text, []))[1].append(rank)
            for text, members in groups.values():
                blocks[members[0], name] = _Publish("text", tuple(members), name, text)
        results = {op.ranks[0]: op for op in self._result_ops(ranks)}
        out: list[_Publish | None] = []
        if self._group == "rank":
            for rank in ranks:
                out += [blocks.get((rank, name)) for name in names]
                out += [*displays[rank], results.get(rank)]
        else:
            out += [blocks.get((rank, name)) for name in names for rank in ranks]
            out += [op for rank in ranks for op in displays[rank]]
            out += [results.get(rank) for rank in ranks]
        self._emit([op for op in out if op is not None], False)

    # -- publishing ---------------------------------------------------------------
    def _labels(self, rank: int) -> bool:
        """Whether ``rank``'s stream text is labelled (see the module docstring)."""
        return self._label or rank not in self._targets

    def _emit(self, ops: list[_Publish], collapse: bool) -> None:
        if collapse:
            ops = _collapse(ops)
        merged: list[_Publish] = []
        for op in ops:
            prev = merged[-1] if merged else None
            if prev and op.kind == prev.kind == "text" and op[1:3] == prev[1:3]:  # ranks, name
                merged[-1] = prev._replace(payload=prev.payload + op.payload)
            else:
                merged.append(op)
        for op in merged:
            if op.kind == "text":
                self._publish_text(op)
            elif op.kind == "display":
                self._publish_display(op)
            else:
                self._publish_result(op)

    def _publish_text(self, op: _Publish) -> None:
        text = op.payload
        if any(self._labels(rank) for rank in op.ranks):
            text = _label_lines(text, f"[{op.name}:{format_ranks(op.ranks)}]")
        self._publish("stream", {"name": op.name, "text": text}, {"ipympi": {"ranks": [*op.ranks]}})
        self._last_display = None

    def _publish_label(self, text: str, ranks: tuple[int, ...], color: str) -> None:
        # A line of stdout, not a display: front ends that check displays for the
        # mime types they asked for (and terminals) see only the rank's own data.
        line = f"{color}{text}{_RESET}\n"
        metadata = {"ipympi": {"label": True, "ranks": [*ranks]}}
        self._publish("stream", {"name": "stdout", "text": line}, metadata)

    def _publish_display(self, op: _Publish) -> None:
        (rank,), msg_type = op.ranks, op.name
        content = dict(op.payload)
        if msg_type == "clear_output":
            self._last_display = None
        else:
            content["metadata"] = {**(content.get("metadata") or {}), "ipympi": {"rank": rank}}
        if msg_type == "display_data":
            content.setdefault("transient", {})
            if self._label and self._last_display != rank:
                self._publish_label(f"[output:{rank}]", (rank,), _GREY)
            self._last_display = rank
        self._publish(msg_type, content, {"ipympi": {"rank": rank}})

    def _publish_result(self, op: _Publish) -> None:
        ranks, result = [*op.ranks], op.payload
        if self._label:
            self._publish_label(f"Out[{format_ranks(ranks)}:{self._count}]:", op.ranks, _ORANGE)
        info = {"rank": ranks[0], "ranks": ranks}
        metadata = {
            **(result.get("metadata") or {}),
            "ipympi": {**info, "engine_execution_count": result.get("execution_count")},
        }
        content = {
            "execution_count": self._count,
            "data": dict(result.get("data") or {}),
            "metadata": metadata,
        }
        self._publish("execute_result", content, {"ipympi": info})
        self._last_display = None


ENDED_BY_ABORT = "MPIAbort"  # the error name of the ranks of an aborted world
# The error name of ranks that an MPI launcher ended with their world (after
# another rank failed); their error value says who ended them.
WORLD_ENDED = "WorldEnded"


def _ename(content: Mapping[str, Any]) -> str:
    return str(content.get("ename") or "Exception")


def _raised(errors: dict[int, dict], failing: list[int], targets: list[int]) -> str:
    """``rank 2 of 4 raised ZeroDivisionError: division by zero`` and its variants."""
    if not targets or targets == failing:
        of = ""  # "rank 1 raised ...": the cell ran on the failing ranks only
    elif targets == list(range(len(targets))):
        of = f" of {len(targets)}"
    else:
        of = f" of ranks {format_ranks(targets)}"
    by_name: dict[str, list[int]] = {}
    for rank in failing:
        by_name.setdefault(_ename(errors[rank]), []).append(rank)
    if len(by_name) > 1:
        kinds = ", ".join(f"{ranks_phrase(rs)} {name}" for name, rs in by_name.items())
        return f"{len(failing)} ranks{of} raised exceptions: {kinds}"
    (name,) = by_name
    values = {str(errors[r].get("evalue", "")) for r in failing}
    if name == ENDED_BY_ABORT and len(values) == 1:
        # Not raised by the ranks: one rank aborted and the world was ended.
        return f"the MPI world was aborted: {values.pop()}"
    if name == WORLD_ENDED and len(values) == 1:
        return f"the MPI world has ended: {values.pop()}"
    who = f"all {len(failing)} ranks" if failing == targets and len(failing) > 1 else None
    text = f"{who or ranks_phrase(failing) + of} raised {name}"
    if len(values) == 1 and "" not in values:
        return f"{text}: {values.pop()}"
    first = next((r for r in failing if errors[r].get("evalue")), None)
    if first is None:
        return text
    return f"{text} (rank {first}: {errors[first]['evalue']})"


def _where(where: str) -> str:
    where = where.strip()
    return where if where.startswith(("in ", "at ", "while ")) or not where else f"in {where}"


def _grouped(descriptions: Mapping[int, str]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for rank in sorted(descriptions):
        groups.setdefault(descriptions[rank], []).append(rank)
    return groups


def compose_error(
    errors: Mapping[int, Mapping[str, Any]],
    targets: Iterable[int],
    waiting: Mapping[int, str] | None = None,
) -> dict[str, Any]:
    """The one ``error`` content (``ename``, ``evalue``, ``traceback``) for a cell.

    ``errors`` maps each failing rank to the error content it sent; ``targets``
    are the ranks that ran the cell; ``waiting`` optionally describes what
    other ranks were doing (``{0: "waiting in comm.Barrier()"}``).

    ``ename`` and ``evalue`` are those of the lowest failing rank, preferring a
    real exception over a ``KeyboardInterrupt``. The traceback starts with a
    summary line, e.g. ``ranks 1,3 of 4 raised ZeroDivisionError: division by
    zero; rank 0 was waiting in comm.Barrier()``, then shows each distinct
    traceback once (compared without colours), headed in red by the ranks that
    had it: ``[1,3:execute]``. Interrupted ranks are summarised as
    ``interrupted: rank 0 in recv(source=1, tag=0) at <cell 3>:2``, using an
    optional ``where`` key of their error content.
    """
    if not errors:
        raise ValueError("compose_error needs the error of at least one rank")
    contents = {rank: dict(content) for rank, content in errors.items()}
    failing = sorted(contents)
    real = [r for r in failing if _ename(contents[r]) != "KeyboardInterrupt"]
    stopped = [r for r in failing if r not in real]
    lead = contents[(real or failing)[0]]
    parts = []
    if real:
        parts.append(_raised(contents, real, sorted(set(targets))))
    if stopped:
        wheres = _grouped({r: _where(str(contents[r].get("where") or "")) for r in stopped})
        stops = "; ".join(f"{ranks_phrase(rs)} {w}".rstrip() for w, rs in wheres.items())
        parts.append(f"interrupted: {stops}")
    others = {r: d for r, d in (waiting or {}).items() if r not in contents}
    for desc, ranks in _grouped(others).items():
        parts.append(f"{ranks_phrase(ranks)} {'was' if len(ranks) == 1 else 'were'} {desc}")
    traceback = ["; ".join(parts)]
    tracebacks: dict[int, list[str]] = {}
    for rank in failing:
        lines = [str(line) for line in contents[rank].get("traceback") or []]
        if not lines:
            evalue = str(contents[rank].get("evalue") or "")
            lines = [f"{_ename(contents[rank])}: {evalue}" if evalue else _ename(contents[rank])]
        tracebacks[rank] = lines
    for lines, ranks in group_identical(tracebacks):
        traceback.append(f"{_RED}[{format_ranks(ranks)}:execute]{_RESET}")
        traceback.extend(lines)
    return {"ename": _ename(lead), "evalue": str(lead.get("evalue", "")), "traceback": traceback}
