"""The merged trace of a cell and its drawings, from hand-built records (no processes)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from trace_samples import (
    T0,
    Recorder,
    ScheduledRound,
    allreduce_recursive_doubling_any,
    allreduce_trace,
    barrier_dissemination,
    bcast_binomial,
    p2p_trace,
)

from ipympi.teach.timescale import TimeScale, event_times
from ipympi.teach.trace import Trace
from ipympi.teach.units import format_bytes, format_time

SVG = "{http://www.w3.org/2000/svg}"


def groups(svg: str, cls: str) -> list[ET.Element]:
    """The ``<g>`` elements of ``svg`` whose class list holds ``cls``."""
    root = ET.fromstring(svg)
    return [g for g in root.iter(f"{SVG}g") if cls in (g.get("class") or "").split()]


def title_of(element: ET.Element) -> str:
    title = element.find(f"{SVG}title")
    assert title is not None, ET.tostring(element)
    return title.text or ""


def popcount(n: int) -> int:
    return bin(n).count("1")


# -- model ------------------------------------------------------------------------------
def test_point_to_point_pairing_and_unmatched_sides() -> None:
    recorder = p2p_trace()
    # two more messages 0 -> 1 on tag 7 pair in order; a tag-9 receive has no traced send
    recorder.p2p(T0 + 60e-6, T0 + 61e-6, 0, 1, 8, tag=7)
    recorder.p2p(T0 + 62e-6, T0 + 63e-6, 0, 1, 24, tag=7)
    recorder.recv(T0 + 70e-6, 2, 1, 4, tag=9)
    trace = Trace.from_ranks(recorder.records)

    assert trace.ranks == [0, 1, 2]
    assert len(trace) == 5
    by_send = {round((m.t_send - T0) * 1e6, 1): m for m in trace.messages}
    assert [round((by_send[t].t_recv - T0) * 1e6, 1) for t in (12.3, 60.0, 62.0)] == [
        40.1,
        61.0,
        63.0,
    ]
    assert by_send[62.0].nbytes == 24 and by_send[62.0].recv_record["bytes"] == 24
    isend = by_send[20.0]
    assert (isend.call, isend.recv_call, isend.tag, isend.src, isend.dst) == (
        "Isend",
        "Irecv",
        3,
        1,
        2,
    )
    lone = by_send[50.0]
    assert lone.t_recv is None and lone.recv_record is None and not lone.matched
    assert [(r["rank"], r["peer"], r["tag"]) for r in trace.unmatched_receives] == [(2, 1, 9)]
    assert all(m.coll is None and m.round is None for m in trace.messages)
    assert trace.collectives == []


def test_pairing_keeps_contexts_apart_and_adds_lanes_for_peers() -> None:
    recorder = Recorder(2)
    recorder.send(T0, 0, 1, 8, tag=0, context=4, comm="row")
    recorder.send(T0 + 1e-6, 0, 1, 16, tag=0, context=0)
    recorder.recv(T0 + 2e-6, 1, 0, 16, tag=0, context=0)
    recorder.recv(T0 + 3e-6, 1, 0, 8, tag=0, context=4, comm="row")
    recorder.send(T0 + 4e-6, 1, 5, 1, tag=0)  # rank 5 recorded nothing: it still gets a lane
    trace = Trace.from_ranks(recorder.records)
    pairs = {(m.context, m.nbytes): m.recv_record["bytes"] for m in trace.messages if m.matched}
    assert pairs == {(4, 8): 8, (0, 16): 16}
    assert trace.ranks == [0, 1, 5]


def test_times_are_relative_to_the_earliest_record() -> None:
    trace = Trace.from_ranks(p2p_trace().records)
    assert trace.start == pytest.approx(T0 + 12.3e-6)
    assert trace.duration == pytest.approx(50e-6 - 12.3e-6)
    assert [r.get("t") for r in trace] == sorted(r.get("t") for r in trace.records)
    assert len(list(trace)) == 5


def test_allreduce_collective_and_its_rounds() -> None:
    recorder, _ = allreduce_trace(4)
    trace = Trace.from_ranks(recorder.records)
    (coll,) = trace.collectives
    assert (coll.call, coll.comm, coll.algorithm) == (
        "Allreduce",
        "MPI_COMM_WORLD",
        "allreduce_recursive_doubling",
    )
    assert sorted(coll.spans) == [0, 1, 2, 3]
    assert all(len(span.rounds) == 2 for span in coll.spans.values())
    assert all(span.t0 <= span.rounds[0].t0 <= span.t1 for span in coll.spans.values())
    assert coll.n_rounds == 2 and len(trace) == 8 and len(coll.messages) == 8
    assert coll.rounds_aligned()
    steps = coll.steps()
    assert [sorted((m.src, m.dst) for m in step) for step in steps] == [
        [(0, 1), (1, 0), (2, 3), (3, 2)],
        [(0, 2), (1, 3), (2, 0), (3, 1)],
    ]
    assert all(m.step == m.round == m.recv_round for m in trace.messages)
    assert all(m.coll == coll.key for m in trace.messages)


@pytest.mark.parametrize(("size", "root"), [(3, 0), (5, 0), (5, 2), (6, 1)])
def test_binomial_bcast_steps_follow_causality(size: int, root: int) -> None:
    recorder = Recorder(size)
    recorder.collective(
        "Bcast", "bcast_binomial", bcast_binomial(size, root, b"12345678"), T0, root=root
    )
    trace = Trace.from_ranks(recorder.records)
    (coll,) = trace.collectives
    # A rank at tree depth h (h set bits in its distance from the root) hears in step h.
    for message in coll.messages:
        assert message.step == popcount((message.dst - root) % size)
    assert len(coll.steps()) == max(popcount(r) for r in range(size))
    rounds = {rank: len(span.rounds) for rank, span in coll.spans.items()}
    assert rounds[root] == 1
    # every rank hears from exactly one parent
    assert sorted(m.dst for m in coll.messages) == sorted(set(range(size)) - {root})
    text = trace.to_text()
    word = "round" if coll.rounds_aligned() else "step"
    assert f"  {word} 1 (send to children): " in text
    if size == 5:  # rank 3 receives in its first round, but in step 2: rounds do not line up
        assert not coll.rounds_aligned()
        assert "  step 2 (send to children): " in text


def test_steps_when_ranks_fold_first() -> None:
    inputs = {rank: np.array([rank + 1.0]) for rank in range(3)}
    recorder = Recorder(3)
    recorder.collective(
        "Allreduce",
        "allreduce_recursive_doubling",
        allreduce_recursive_doubling_any(inputs),
        T0,
    )
    (coll,) = Trace.from_ranks(recorder.records).collectives
    steps = {(m.src, m.dst): m.step for m in coll.messages}
    # 0 folds into 1 while 2 sends its value to 1; 1 answers 2 and unfolds to 0 afterwards
    assert steps == {(0, 1): 1, (2, 1): 1, (1, 2): 2, (1, 0): 2}
    assert not coll.rounds_aligned()


def test_steps_of_a_collective_with_many_rounds() -> None:
    rounds = 1500  # deeper than Python's recursion limit
    schedule = {
        rank: [
            ScheduledRound(f"ring step {k}", sends=[(1 - rank, b"ab")], recvs=[(1 - rank, 2)])
            for k in range(rounds)
        ]
        for rank in (0, 1)
    }
    recorder = Recorder(2)
    recorder.collective("Allgather", "allgather_ring", schedule, T0)
    (coll,) = Trace.from_ranks(recorder.records).collectives
    assert all(m.step == m.round for m in coll.messages)
    assert len(coll.steps()) == rounds and coll.rounds_aligned()


def test_truncated_trace_keeps_orphaned_collective_messages() -> None:
    recorder, _ = allreduce_trace(2)
    for rank in (0, 1):  # the "coll" records were dropped
        recorder.records[rank] = [r for r in recorder.records[rank] if r["type"] != "coll"]
    recorder.truncate(0, 17)
    trace = Trace.from_ranks(recorder.records)
    assert trace.truncated and trace.dropped == 17
    (coll,) = trace.collectives
    assert coll.spans == {} and len(coll.messages) == 2 and coll.call == "Allreduce"
    assert "truncated (17 records dropped)" in repr(trace)
    ET.fromstring(trace.to_svg())
    assert "truncated" in trace.to_text()


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ({0: [42]}, "rank 0, record 0: a trace record is a dict, not int"),
        ({0: [{"type": "hop"}]}, "unknown record type 'hop'"),
        ({0: [{"type": "send", "t": 1.0, "rank": 0}]}, "send record lacks peer, context"),
        ({1: [{"type": "truncated", "rank": 0}]}, "record of rank 0 given as rank 1's"),
        ({"0": []}, "ranks are ints"),
        ({0: "records"}, "expected a list of records"),
    ],
)
def test_bad_records_are_clear_errors(records: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Trace.from_ranks(records)


def test_records_must_be_a_mapping() -> None:
    with pytest.raises(TypeError, match="mapping of rank to records"):
        Trace.from_ranks([[]])  # type: ignore[arg-type]


# -- units and the time scale ---------------------------------------------------------------
def test_time_and_size_units() -> None:
    assert [format_time(t) for t in (0, 12.3e-6, 84e-6, 4.56e-3, 1.2, 250.0)] == [
        "0 µs",
        "12.3 µs",
        "84 µs",
        "4.56 ms",
        "1.2 s",
        "250 s",
    ]
    assert format_time(250e-6, unit_of=3e-3) == "0.25 ms"
    assert [format_bytes(n) for n in (0, 8, 1023, 1536, 3 << 20)] == [
        "0 B",
        "8 B",
        "1023 B",
        "1.5 KiB",
        "3 MiB",
    ]


def test_long_idle_gap_becomes_a_break_and_keeps_the_later_collective_readable() -> None:
    recorder, _ = allreduce_trace(4, start=T0)
    recorder.p2p(T0 + 20e-6, T0 + 25e-6, 0, 1, 8)
    again = allreduce_recursive_doubling_any({r: np.ones(2) for r in range(4)})
    recorder.collective("Allreduce", "allreduce_recursive_doubling", again, T0 + 3.0)
    trace = Trace.from_ranks(recorder.records)
    scale = TimeScale(event_times(trace), trace.duration, 0, 800, break_width=26)
    (gap,) = scale.breaks
    assert gap.t1 - gap.t0 > 2.9 and gap.x1 - gap.x0 == 26
    late = trace.collectives[1]
    width = scale.x(late.t1 - trace.start) - scale.x(late.t0 - trace.start)
    assert width > 0.2 * 800  # a linear axis would give it 0.0004 % of the width
    assert scale.x(0) == 0 and scale.x(trace.duration) == pytest.approx(800)
    xs = [scale.x(t) for t in sorted(event_times(trace))]
    assert xs == sorted(xs)
    svg = trace.to_svg()
    (drawn,) = groups(svg, "break")
    assert "idle for 3 s" in title_of(drawn)
    assert "≈" in trace.to_text()
    ticks = scale.ticks(spacing=80)
    assert any(t.label == "3 s" for t in ticks) and any(t.label.startswith("+") for t in ticks)


def test_no_break_when_activity_is_spread_out() -> None:
    times = [i * 1e-3 for i in range(11)]
    scale = TimeScale(times, 10e-3, 10, 500, break_width=26)
    assert scale.breaks == []
    assert scale.x(5e-3) == pytest.approx(260)


# -- SVG ------------------------------------------------------------------------------------
def test_svg_has_one_arrow_per_message_and_one_span_per_rank_and_collective() -> None:
    recorder, _ = allreduce_trace(4)
    schedule = bcast_binomial(4, 1, b"abcd")
    recorder.collective("Bcast", "bcast_binomial", schedule, T0 + 50e-6, root=1)
    recorder.p2p(T0 + 80e-6, T0 + 90e-6, 3, 0, 800, tag=7)
    recorder.send(T0 + 95e-6, 2, 1, 8, tag=1, call="Isend")
    recorder.recv(T0 + 99e-6, 1, 3, 4, tag=9)
    recorder.p2p(T0 + 96e-6, T0 + 97e-6, 2, 2, 4, tag=2)  # to itself
    trace = Trace.from_ranks(recorder.records)
    svg = trace.to_svg(width=700)
    root = ET.fromstring(svg)
    assert root.get("width") == "700"
    arrows = groups(svg, "msg")
    assert len(arrows) == len(trace) == 8 + 3 + 3
    spans = groups(svg, "span")
    assert len(spans) == sum(len(c.spans) for c in trace.collectives) == 8
    assert len(groups(svg, "unmatched")) == 1 and len(groups(svg, "orphan")) == 1
    lanes = [t.text for t in root.iter(f"{SVG}text") if (t.text or "").startswith("rank ")]
    assert lanes == ["rank 0", "rank 1", "rank 2", "rank 3"]
    tips = [title_of(g) for g in arrows]
    assert any("round 1: exchange at distance 1" in tip and "16 B" in tip for tip in tips)
    assert any("Send rank 3 → rank 0" in tip and "tag 7" in tip for tip in tips)
    assert any("receive not traced" in tip for tip in tips)
    span_tips = [title_of(g) for g in spans]
    assert all("algorithm: " in tip for tip in span_tips)
    assert any("Bcast on MPI_COMM_WORLD, root 1" in tip for tip in span_tips)
    legend = [title for g in groups(svg, "legend-item") for title in g.itertext()]
    assert legend[:2] == ["Allreduce", "Bcast"] and "point-to-point" in legend
    # arrows are coloured by collective, point-to-point in one neutral colour
    call_of = {c.key: c.call for c in trace.collectives}
    colours: dict[str | None, set[str]] = {}
    for g, message in zip(arrows, trace.messages):
        assert g.get("data-src") == str(message.src)
        stroke = next(e.get("stroke") for e in g if e.get("stroke"))
        colours.setdefault(call_of.get(message.coll), set()).add(stroke)
    assert sorted(colours, key=str) == ["Allreduce", "Bcast", None]
    assert all(len(c) == 1 for c in colours.values())
    assert len(set().union(*colours.values())) == 3


def test_round_boundaries_are_marked_and_numbered() -> None:
    recorder, _ = allreduce_trace(2)
    svg = Trace.from_ranks(recorder.records).to_svg()
    for span in groups(svg, "span"):
        numbers = [t.text for t in span.iter(f"{SVG}text") if (t.text or "").isdigit()]
        assert numbers == ["1"]  # one round each (2 ranks), numbered
    recorder, _ = allreduce_trace(4)
    svg = Trace.from_ranks(recorder.records).to_svg()
    for span in groups(svg, "span"):
        numbers = [t.text for t in span.iter(f"{SVG}text") if (t.text or "").isdigit()]
        assert numbers == ["1", "2"]
        assert len(span.findall(f"{SVG}line")) >= 1  # the boundary before round 2


def test_sixteen_rank_barrier() -> None:
    recorder = Recorder(16)
    recorder.collective(
        "Barrier", "barrier_dissemination", barrier_dissemination(16), T0, skew=2e-6
    )
    trace = Trace.from_ranks(recorder.records)
    (coll,) = trace.collectives
    assert len(trace) == 64 and coll.n_rounds == 4
    assert [len(step) for step in coll.steps()] == [16, 16, 16, 16]
    svg = trace.to_svg()
    root = ET.fromstring(svg)
    assert len(groups(svg, "msg")) == 64 and len(groups(svg, "span")) == 16
    assert int(root.get("height")) < 600
    text = trace.to_text(width=100)
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "  round 4 (dissemination distance 8): 0→8 0 B, 1→9 0 B," in text
    assert "rank 15 |" in text


def test_many_ranks_still_render() -> None:
    recorder = Recorder(40)
    recorder.collective("Barrier", "barrier_dissemination", barrier_dissemination(40), T0)
    trace = Trace.from_ranks(recorder.records)
    svg = trace.to_svg()
    assert len(groups(svg, "msg")) == len(trace) == 40 * 6
    assert "rank 39" in trace.to_text()


def test_odd_names_are_escaped() -> None:
    recorder = Recorder(2)
    name = 'w<&>"\x01'
    recorder.p2p(T0, T0 + 1e-6, 0, 1, 8, call="Send<script>", comm=name)
    schedule = barrier_dissemination(2)
    recorder.collective("Barrier</text>", "alg<&>", schedule, T0 + 2e-6, comm=name)
    trace = Trace.from_ranks(recorder.records)
    svg = trace.to_svg()
    root = ET.fromstring(svg)  # well-formed despite the names
    assert "<script>" not in svg and "\x01" not in svg
    texts = "".join(root.itertext())
    assert "Send<script>" in texts and "Barrier</text>" in texts and "alg<&>" in texts
    assert 'w<&>"' in texts
    assert "Send<script> 0 → 1" in trace.to_text()


def test_empty_traces() -> None:
    for records in ({}, {0: [], 1: []}):
        trace = Trace.from_ranks(records)
        assert len(trace) == 0 and trace.empty and list(trace) == []
        assert trace.duration == 0.0
        assert "no messages" in repr(trace)
        svg = trace.to_svg()
        assert "no messages" in "".join(ET.fromstring(svg).itertext())
        assert trace.to_text().startswith("Trace: no messages")
    assert Trace.from_ranks({0: [], 1: []}).ranks == [0, 1]


# -- text -----------------------------------------------------------------------------------
def test_text_lane_chart_and_event_list() -> None:
    recorder, _ = allreduce_trace(4)
    recorder.p2p(T0 + 30e-6, T0 + 40.1e-6, 0, 1, 800, tag=7)
    recorder.send(T0 + 45e-6, 1, 2, 8, tag=1, call="Isend", comm="row_comm")
    recorder.recv(T0 + 50e-6, 3, 0, 4, tag=9)
    trace = Trace.from_ranks(recorder.records)
    text = trace.to_text(width=90)
    lines = text.splitlines()
    assert lines[0] == f"Trace: {trace.summary()}"
    assert "0 µs" in lines[1]
    chart = [line for line in lines if line.startswith("rank ")]
    assert [line.split("|")[0].strip() for line in chart] == [f"rank {r}" for r in range(4)]
    assert all(len(line) == 90 for line in chart)
    assert all("[Allreduce" in line for line in chart)
    assert "S" in chart[0] and "R" in chart[1]
    duration = format_time(trace.collectives[0].duration)
    assert (
        f"Allreduce on MPI_COMM_WORLD — allreduce_recursive_doubling, 2 rounds, {duration}" in text
    )
    assert "  round 1 (exchange at distance 1): 0→1 16 B, 1→0 16 B, 2→3 16 B, 3→2 16 B" in text
    assert "  round 2 (exchange at distance 2): 0→2 16 B, 1→3 16 B, 2→0 16 B, 3→1 16 B" in text
    assert "     30 µs  Send 0 → 1  tag 7  800 B  (Recv, 40.1 µs)" in text
    assert "     45 µs  Isend 1 → 2  tag 1  8 B  on row_comm  (receive not traced)" in text
    assert "     50 µs  Recv 3 ← 0  tag 9  4 B  (send not traced)" in text
    events = lines[lines.index("") + 1 :]
    assert events[0].startswith("Allreduce") and events[-1].endswith("(send not traced)")


def test_mimebundle_and_repr() -> None:
    trace = Trace.from_ranks(p2p_trace().records)
    bundle = trace._repr_mimebundle_()
    assert set(bundle) == {"image/svg+xml", "text/html", "text/plain"}
    assert bundle["image/svg+xml"] in bundle["text/html"]
    assert bundle["text/plain"] == trace.to_text()
    ET.fromstring(bundle["image/svg+xml"])
    assert repr(trace) == "<Trace: 3 ranks, 3 messages, 0 collectives, 37.7 µs>"
    with pytest.raises(ValueError, match="width"):
        trace.to_svg(width=10)
    with pytest.raises(ValueError, match="width"):
        trace.to_text(width=5)
