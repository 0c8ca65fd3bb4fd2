"""One-sided communication in a trace: records → epochs → drawings (no processes).

The records are built by hand in the format ``ipympi.progress.tracing`` documents;
``test_teach_magics.py`` checks that real ranks record them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest
from trace_samples import T0, p2p_trace

from ipympi.core import constants as K
from ipympi.progress import tracing
from ipympi.teach.timescale import event_times
from ipympi.teach.trace import Trace

SVG = "{http://www.w3.org/2000/svg}"
WIN = 6  # a window's id (its private communicator's context)
US = 1e-6


def groups(svg: str, cls: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return [g for g in root.iter(f"{SVG}g") if cls in (g.get("class") or "").split()]


def title_of(element: ET.Element) -> str:
    title = element.find(f"{SVG}title")
    assert title is not None
    return title.text or ""


class Records:
    """Per-rank records of one window, times in µs after ``T0``."""

    def __init__(self, size: int) -> None:
        self.records: dict[int, list[dict[str, Any]]] = {r: [] for r in range(size)}

    def sync(self, rank: int, t0: float, t1: float, call: str, **extra: Any) -> None:
        record = {
            "type": "rma_sync",
            "t0": T0 + t0 * US,
            "t1": T0 + t1 * US,
            "rank": rank,
            "crank": rank,
            "win": WIN,
            "window": "Allocate window",
            "call": call,
            "peer": None,
            "group": None,
            "lock": None,
            "assertion": 0,
            "done": True,
        }
        record.update(extra)
        self.records[rank].append(record)

    def fence(self, t0: float, t1: float, assertion: int = 0) -> None:
        for rank in self.records:
            self.sync(rank, t0 + rank, t1, "Fence", assertion=assertion)

    def op(self, t: float, origin: int, target: int, call: str, nbytes: int, **extra: Any) -> None:
        way = "get" if call in ("Get", "Rget") else "put"
        record = {
            "type": "rma",
            "t0": T0 + t * US,
            "t1": T0 + (t + 2) * US,
            "rank": origin,
            "target": target,
            "crank": origin,
            "ctarget": target,
            "win": WIN,
            "window": "Allocate window",
            "call": call,
            "op": None,
            "dir": way,
            "bytes": nbytes,
            "disp": 0,
        }
        record.update(extra)
        self.records[origin].append(record)

    def trace(self) -> Trace:
        for rank_records in self.records.values():
            rank_records.sort(key=lambda r: r["t0"])
        return Trace.from_ranks(self.records)


def fence_put_get() -> Records:
    """Fence; each rank puts 8 B into its right neighbour and gets 16 B from its left; Fence."""
    rec = Records(3)
    rec.fence(0, 100)
    for rank in range(3):
        rec.op(110 + 10 * rank, rank, (rank + 1) % 3, "Put", 8)
        rec.op(150 + 10 * rank, rank, (rank - 1) % 3, "Get", 16)
    rec.fence(200, 300)
    return rec


# -- the model ---------------------------------------------------------------------------
def test_a_fence_epoch_holds_the_puts_and_gets_of_every_rank() -> None:
    trace = fence_put_get().trace()
    assert trace.collectives == [] and trace.messages == []
    assert [(op.origin, op.target, op.label, op.nbytes) for op in trace.rma_ops] == [
        (0, 1, "Put", 8),
        (1, 2, "Put", 8),
        (2, 0, "Put", 8),
        (0, 2, "Get", 16),
        (1, 0, "Get", 16),
        (2, 1, "Get", 16),
    ]
    # the second Fence closes epoch 1 and opens epoch 2, which nothing used: not kept
    assert [(e.rank, e.kind, e.index) for e in trace.epochs] == [
        (0, "fence", 1),
        (1, "fence", 1),
        (2, "fence", 1),
    ]
    for epoch in trace.epochs:
        assert [op.origin for op in epoch.ops] == [epoch.rank, epoch.rank]
        assert epoch.opened is not None and epoch.opened.call == "Fence"
        assert epoch.closed is not None and epoch.closed.call == "Fence"
        assert epoch.t0 == epoch.opened.t0 and epoch.t1 == epoch.closed.t1
    get = trace.rma_ops[3]
    assert (get.src, get.dst) == (2, 0)  # a Get's data goes from the target to the origin
    assert trace.summary().startswith(
        "3 ranks, 0 messages, 0 collectives, 6 one-sided operations in 1 epoch, "
    )


def test_lock_epochs_are_per_origin_and_target() -> None:
    rec = Records(3)
    rec.sync(1, 0, 5, "Lock", peer=0, lock="exclusive")
    rec.op(10, 1, 0, "Fetch_and_op", 8, op="SUM", dir="both")
    rec.sync(1, 20, 21, "Flush", peer=0)
    rec.op(30, 1, 0, "Accumulate", 24, op="MAX")
    rec.sync(1, 40, 41, "Unlock", peer=0)
    rec.sync(2, 50, 60, "Lock_all", lock="shared")
    rec.op(70, 2, 1, "Rget", 8)
    rec.sync(2, 80, 81, "Unlock_all")
    trace = rec.trace()
    lock, lock_all = trace.epochs
    assert (lock.rank, lock.kind, lock.peers, lock.lock) == (1, "lock", (0,), "exclusive")
    assert lock.label == "lock epoch to 0 (exclusive)"
    assert [op.label for op in lock.ops] == ["Fetch_and_op(SUM)", "Accumulate(MAX)"]
    assert lock.opened is not None and lock.opened.label == "Lock(0, exclusive)"
    assert (lock_all.kind, [op.call for op in lock_all.ops]) == ("lock_all", ["Rget"])
    assert trace.rma_ops[0].describe() == "rank 1 Fetch_and_op(SUM) ↔ rank 0: 8 B at displacement 0"
    assert [s.label for s in trace.rma_syncs][:3] == ["Lock(0, exclusive)", "Flush(0)", "Unlock(0)"]


def test_post_start_complete_wait_make_access_and_exposure_epochs() -> None:
    rec = Records(3)
    rec.sync(0, 0, 2, "Post", group=[1, 2])
    for rank in (1, 2):
        rec.sync(rank, 1, 5, "Start", group=[0])
        rec.op(10 + rank, rank, 0, "Accumulate", 8, op="SUM")
        rec.sync(rank, 20, 21, "Complete", group=[0])
    rec.sync(0, 3, 4, "Test", done=False)
    rec.sync(0, 6, 30, "Wait")
    trace = rec.trace()
    exposure = next(e for e in trace.epochs if e.kind == "exposure")
    assert exposure.label == "exposure epoch for 1, 2"
    assert sorted(op.origin for op in exposure.incoming) == [1, 2]
    assert exposure.closed is not None and exposure.closed.call == "Wait"
    access = [e for e in trace.epochs if e.kind == "access"]
    assert [(e.rank, e.peers, len(e.ops)) for e in access] == [(1, (0,), 1), (2, (0,), 1)]
    assert "Test: not yet" in [s.label for s in trace.rma_syncs]


def test_epochs_that_opened_before_the_trace() -> None:
    rec = Records(2)
    rec.op(0, 0, 1, "Put", 8)  # its Lock was in an earlier cell
    rec.sync(0, 10, 11, "Unlock", peer=1)
    rec.op(20, 1, 0, "Get", 8)  # no synchronisation call traced at all
    trace = rec.trace()
    before, unknown = sorted(trace.epochs, key=lambda e: e.rank)
    assert (before.kind, before.opened, before.ops[0].call) == ("lock", None, "Put")
    assert before.closed is not None and before.closed.call == "Unlock"
    assert (unknown.opened, unknown.closed, unknown.ops[0].call) == (None, None, "Get")
    assert "before the trace" in trace.to_text()


def test_fence_with_nosucceed_opens_no_epoch() -> None:
    rec = Records(2)
    rec.fence(0, 10)
    rec.op(20, 0, 1, "Put", 8)
    rec.fence(30, 40, assertion=K.MODE_NOSUCCEED)
    rec.fence(50, 60, assertion=K.MODE_NOPRECEDE)  # opens epoch 3, unused: not kept
    trace = rec.trace()
    assert [(e.rank, e.index, len(e.ops)) for e in trace.epochs] == [(0, 1, 1), (1, 1, 0)]


def test_bad_records_are_refused_with_their_place() -> None:
    rec = fence_put_get()
    del rec.records[1][1]["target"]
    with pytest.raises(ValueError, match="rank 1, record 1: rma record lacks target"):
        rec.trace()
    rec = fence_put_get()
    rec.records[0][1]["dir"] = "sideways"
    with pytest.raises(ValueError, match="direction 'sideways'"):
        rec.trace()


# -- drawings ----------------------------------------------------------------------------
def test_svg_draws_fence_spans_epochs_and_operation_arrows() -> None:
    trace = fence_put_get().trace()
    svg = trace.to_svg()
    assert groups(svg, "span") == []  # the Fence is not drawn as a collective
    syncs = groups(svg, "rma-sync")
    assert sorted((g.get("data-rank"), g.get("data-call")) for g in syncs) == sorted(
        [(str(r), "Fence") for r in range(3)] * 2
    )
    assert len(groups(svg, "epoch")) == 3
    arrows = groups(svg, "rma")
    assert len(arrows) == 6
    lanes = {}
    for g in groups(svg, "rma"):
        line = g.find(f"{SVG}line")
        assert line is not None
        key = (g.get("data-call"), int(g.get("data-origin") or -1), int(g.get("data-target") or -1))
        lanes[key] = (float(line.get("y1") or 0), float(line.get("y2") or 0))
        assert g.find(f"{SVG}text") is not None  # labelled with op and bytes
    # Put: from the origin's lane down to the target's; Get: from the target's up to the origin's
    put_y = lanes[("Put", 0, 1)]
    get_y = lanes[("Get", 0, 2)]
    assert put_y[0] < put_y[1] and get_y[0] > get_y[1]
    texts = ["".join(g.itertext()) for g in arrows]
    assert any("Put 8 B" in t for t in texts) and any("Get 16 B" in t for t in texts)
    assert "fence epoch 1" in title_of(groups(svg, "epoch")[0])
    legend = ["".join(g.itertext()) for g in groups(svg, "legend-item")]
    assert legend[:3] == ["Put", "Get", "epoch (one-sided)"]


def test_text_lists_each_epoch_with_its_operations() -> None:
    text = fence_put_get().trace().to_text()
    assert "fence epoch 1 on Allocate window, ranks 0-2: Fence at 0 µs … Fence at 300 µs, " in text
    assert "  1. rank 0 Put → rank 1: 8 B at displacement 0" in text
    assert "  6. rank 2 Get ← rank 1: 16 B at displacement 0" in text
    chart = text.splitlines()[2]
    assert chart.startswith("rank 0 |[Fence") and "P" in chart and "G" in chart
    assert "P/G/A put/get/accumulate (p/g/a its target), = epoch" in text


def test_scale_keeps_the_operations_times() -> None:
    trace = fence_put_get().trace()
    times = event_times(trace)
    assert min(times) == 0.0
    assert pytest.approx(max(times)) == trace.duration
    assert len(times) == 2 * (len(trace.rma_ops) + len(trace.rma_syncs))


def test_traces_without_one_sided_communication_are_drawn_as_before() -> None:
    trace = Trace.from_ranks(p2p_trace().records)
    assert (trace.rma_ops, trace.rma_syncs, trace.epochs) == ([], [], [])
    assert "one-sided" not in trace.summary()
    assert "P/G/A" not in trace.to_text() and "epoch" not in trace.to_svg()


# -- the recorder ------------------------------------------------------------------------
def test_the_recorder_keeps_rma_records_and_skips_quiet_communicators() -> None:
    with tracing.recording() as records:
        t0 = tracing._now()
        tracing.rma_op({"rank": 0, "target": 1, "call": "Put", "bytes": 8}, t0)
        tracing.rma_sync({"rank": 0, "call": "Fence"}, t0)
        tracer = tracing.current
        assert tracer is not None

        class Coll:
            context = 41  # the collective context of point-to-point context 40

        tracing.quiet.add(40)
        try:
            assert tracer.coll_started(Coll(), None) is None
        finally:
            tracing.quiet.discard(40)
    assert [(r["type"], r["call"]) for r in records] == [("rma", "Put"), ("rma_sync", "Fence")]
    assert all(r["t1"] >= r["t0"] == t0 for r in records)
    tracing.rma_op({"rank": 0}, t0)  # not recording: nothing happens


# -- the step-by-step view -------------------------------------------------------------
def test_epoch_steps_walk_through_each_epoch_like_a_collectives_steps() -> None:
    rec = Records(3)
    rec.sync(0, 0, 2, "Post", group=[1, 2])
    for rank in (1, 2):
        rec.sync(rank, 3 + rank, 6, "Start", group=[0])
        rec.op(10 + rank, rank, 0, "Accumulate", 8, op="MAX")
        rec.sync(rank, 20, 21, "Complete", group=[0])
    rec.sync(0, 6, 30, "Wait")
    steps = rec.trace().epoch_steps()
    assert steps.header() == (
        "One-sided communication epoch by epoch — 2 operations in 3 epochs, 3 ranks"
    )
    titles = [frame.title for frame in steps.frames]
    assert titles[0].startswith(
        "Step 1 of 3 — exposure epoch for 1, 2 on Allocate window, rank 0: Post(1, 2) … Wait"
    )
    assert titles[1].startswith("Step 2 of 3 — access epoch to 0 on Allocate window, rank 1:")
    exposure = steps.frames[0]
    assert exposure.messages == [
        "rank 1 Accumulate(MAX) → rank 0: 8 B at displacement 0",
        "rank 2 Accumulate(MAX) → rank 0: 8 B at displacement 0",
    ]
    written = {row.label: (row.cells[2], row.changed[2]) for row in exposure.rows}
    assert written == {
        "rank 0": ("rank 1, rank 2", True),
        "rank 1": ("—", False),
        "rank 2": ("—", False),
    }
    access = steps.frames[1]
    assert [row.cells[1] for row in access.rows] == ["—", "Accumulate(MAX) → 0 (8 B)", "—"]
    # the picture: the ranks, and one arrow per operation from where the data is
    picture = ET.fromstring(access.svg)
    arrows = [g for g in picture.iter(f"{SVG}g") if g.get("class") == "step-msg"]
    assert [title_of(g) for g in arrows] == ["rank 1 → rank 0: Accumulate(MAX) 8 B"]
    text = steps.to_text()
    assert text.count("Step ") == 3 and "window written by" in text
    assert "Step 1 of 3" in steps.to_html()


def test_epoch_steps_of_a_get_point_from_the_target() -> None:
    steps = fence_put_get().trace().epoch_steps()
    (frame,) = steps.frames
    arrows = [g for g in ET.fromstring(frame.svg).iter(f"{SVG}g") if g.get("class") == "step-msg"]
    titles = [title_of(g) for g in arrows]
    assert len(titles) == 6
    assert "rank 2 → rank 0: Get 16 B" in titles  # rank 0's Get from rank 2: data from 2
    assert "rank 0 → rank 1: Put 8 B" in titles


def test_epoch_steps_need_an_epoch() -> None:
    with pytest.raises(ValueError, match="no one-sided communication"):
        Trace.from_ranks(p2p_trace().records).epoch_steps()
