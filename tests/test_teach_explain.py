"""Collectives explained step by step, from hand-built records with payloads (no processes)."""

from __future__ import annotations

import sys
import types
import xml.etree.ElementTree as ET
from typing import Any

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
    pickled,
)

from ipympi.teach.explain import Explanation, describe_value


def popcount(n: int) -> int:
    return bin(n).count("1")


def allreduce_explanation(size: int = 4) -> tuple[Explanation, dict[int, np.ndarray]]:
    recorder, inputs = allreduce_trace(size)
    total = sum(inputs.values())
    before = {r: {"a": inputs[r], "b": np.zeros(2)} for r in inputs}
    after = {r: {"a": inputs[r], "b": total} for r in inputs}
    call = "comm.Allreduce(a, b)"
    return Explanation.from_ranks(call, recorder.records, "float64", before, after), inputs


def test_allreduce_frames_states_and_messages() -> None:
    explanation, inputs = allreduce_explanation(4)
    assert explanation.algorithm == "allreduce_recursive_doubling"
    assert explanation.size == 4 and len(explanation.steps) == 2
    assert explanation.header() == (
        "comm.Allreduce(a, b) — algorithm allreduce_recursive_doubling, 4 ranks, 2 steps"
    )
    frames = explanation.frames
    assert len(frames) == 4
    assert frames[0].columns == ["rank", "a", "b"]
    assert [row.cells for row in frames[0].rows] == [
        [describe_value(inputs[r]), "[0. 0.]"] for r in range(4)
    ]
    # after step 1 each rank holds its pair's sum; after step 2 the total
    pair = {r: inputs[r] + inputs[r ^ 1] for r in range(4)}
    total = sum(inputs.values())
    step1, step2 = frames[1], frames[2]
    assert step1.title == "Step 1 of 2 — exchange at distance 1"
    assert step1.columns == ["rank", "before", "after"]
    assert [row.cells for row in step1.rows] == [
        [describe_value(inputs[r]), describe_value(pair[r])] for r in range(4)
    ]
    assert [row.cells for row in step2.rows] == [
        [describe_value(pair[r]), describe_value(total)] for r in range(4)
    ]
    assert all(row.changed == [False, True] for row in step1.rows + step2.rows)
    assert step1.messages == [
        f"rank {src} → rank {src ^ 1}: {describe_value(inputs[src])}" for src in range(4)
    ]
    assert "rank 0 → rank 1: [1. 10.]" in step1.messages
    assert step2.messages[0] == f"rank 0 → rank 2: {describe_value(pair[0])}"
    last = frames[-1]
    assert last.title.startswith("After the call")
    assert [row.changed for row in last.rows] == [[False, True]] * 4
    assert [row.cells[1] for row in last.rows] == [describe_value(total)] * 4


def test_step_pictures_have_one_arrow_per_message() -> None:
    explanation, _ = allreduce_explanation(4)
    for frame, messages in zip(explanation.frames[1:-1], explanation.steps):
        root = ET.fromstring(frame.svg)
        arrows = [
            g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "step-msg"
        ]
        boxes = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "rank"]
        assert len(arrows) == len(messages) and len(boxes) == 4
    assert explanation.frames[0].svg == "" and explanation.frames[-1].svg == ""


@pytest.mark.parametrize(("size", "root"), [(3, 0), (5, 0), (5, 3)])
def test_binomial_bcast_states_follow_the_tree(size: int, root: int) -> None:
    data = np.arange(3, dtype=np.int32) + 7
    recorder = Recorder(size)
    schedule = bcast_binomial(size, root, data.tobytes())
    recorder.collective("Bcast", "bcast_binomial", schedule, T0, root=root)
    explanation = Explanation.from_ranks(
        f"comm.Bcast(x, root={root})", recorder.records, "int32", {}, {}
    )
    depth = {rank: popcount((rank - root) % size) for rank in range(size)}
    assert len(explanation.steps) == max(depth.values())
    full, empty = describe_value(data), describe_value(np.zeros(3, dtype=np.int32))
    for k, frame in enumerate(explanation.frames[1:-1], start=1):
        for rank, row in zip(range(size), frame.rows):
            has_before, has_after = depth[rank] <= k - 1, depth[rank] <= k
            assert row.cells == [full if has_before else empty, full if has_after else empty]
            assert row.changed == [False, has_after and not has_before]
        assert all(line.endswith(f": {full}") for line in frame.messages)
        senders = {int(line.split()[1]) for line in frame.messages}
        assert all(depth[s] == k - 1 for s in senders)
    assert f"root {root}" in explanation.header()
    # no user buffers given: the first and last frames show dashes
    assert all(row.cells == ["—"] for row in explanation.frames[0].rows)


def test_causal_steps_when_ranks_fold_first() -> None:
    inputs = {rank: np.array([rank + 1.0, -1.0]) for rank in range(3)}
    recorder = Recorder(3)
    schedule = allreduce_recursive_doubling_any(inputs)
    recorder.collective("Allreduce", "allreduce_recursive_doubling", schedule, T0)
    explanation = Explanation.from_ranks(
        "comm.Allreduce(a, b)", recorder.records, "float64", {}, {}
    )
    total = sum(inputs.values())
    step1, step2 = explanation.frames[1:3]
    # step 1: 0 folds into 1 and 2 sends to 1; only rank 1's fold round is complete
    assert sorted(step1.messages) == [
        f"rank 0 → rank 1: {describe_value(inputs[0])}",
        f"rank 2 → rank 1: {describe_value(inputs[2])}",
    ]
    assert [row.cells[1] for row in step1.rows] == [
        describe_value(inputs[0]),
        describe_value(inputs[0] + inputs[1]),
        describe_value(inputs[2]),
    ]
    assert [row.cells[1] for row in step2.rows] == [describe_value(total)] * 3
    assert "do not line up" in explanation.to_text()


def test_lower_case_call_payloads_are_unpickled() -> None:
    value = {"step": 3, "name": "<b>wave</b>"}
    recorder = Recorder(2)
    schedule = bcast_binomial(2, 0, pickled(value), initial=pickled(None))
    recorder.collective("bcast", "bcast_objects", schedule, T0, root=0)
    explanation = Explanation.from_ranks(
        "comm.bcast(obj, root=0)", recorder.records, None, {0: {"obj": value}, 1: {}}, {}
    )
    (step,) = explanation.frames[1:-1]
    assert step.messages == [f"rank 0 → rank 1: {value!r}"]
    assert step.rows[1].cells == ["None", repr(value)]
    page = explanation.to_html()
    assert "<b>wave</b>" not in page and "&lt;b&gt;wave&lt;/b&gt;" in page


def test_undecodable_bytes_list_states_and_large_arrays() -> None:
    big = np.arange(1000, dtype=np.float64)
    recorder = Recorder(2)
    schedule = {
        0: [
            ScheduledRound(
                "pairwise step 1",
                sends=[(1, b"\x01\x02\x03")],  # 3 bytes: not float64, not a pickle
                recvs=[(1, 16)],
                before=[b"\x00" * 16, big],
                after=[np.arange(2.0).tobytes(), big],
            )
        ],
        1: [
            ScheduledRound(
                "pairwise step 1",
                sends=[(0, np.arange(2.0).tobytes())],
                recvs=[(0, 3)],
                before=None,
                after=None,
            )
        ],
    }
    recorder.collective("Alltoall", "alltoallw_pairwise", schedule, T0)
    explanation = Explanation.from_ranks("comm.Alltoall(s, r)", recorder.records, "float64", {}, {})
    (step,) = explanation.frames[1:-1]
    assert sorted(step.messages) == ["rank 0 → rank 1: 3 bytes", "rank 1 → rank 0: [0. 1.]"]
    before, after = step.rows[0].cells
    assert before == "[[0. 0.], float64[1000] [0. 1. 2. … 998. 999.]]"
    assert after == "[[0. 1.], float64[1000] [0. 1. 2. … 998. 999.]]"
    assert step.rows[0].changed == [False, True]
    assert step.rows[1].cells == ["—", "—"] and step.rows[1].changed == [False, False]


def test_describe_value_is_compact() -> None:
    assert describe_value(np.array([1.0, 2.0])) == "[1. 2.]"
    assert describe_value(np.array([[1, 2], [3, 4]])) == "[[1 2] [3 4]]"
    assert describe_value(np.zeros((50, 40), dtype=np.int8)) == "int8[50x40] [0 0 0 … 0 0]"
    assert describe_value("x" * 500, limit=20) == "'" + "x" * 18 + "…"
    assert describe_value(list(range(20))).endswith("… (20 items)]")

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert "repr failed" in describe_value(Broken())


def test_barrier_has_steps_without_state() -> None:
    recorder = Recorder(4)
    recorder.collective("Barrier", "barrier_dissemination", barrier_dissemination(4), T0)
    explanation = Explanation.from_ranks("comm.Barrier()", recorder.records, None, {}, {})
    assert len(explanation.steps) == 2
    step = explanation.frames[1]
    assert "rank 0 → rank 1: 0 bytes" in step.messages
    assert all(row.cells == ["—", "—"] for row in step.rows)


def test_text_html_and_mimebundle() -> None:
    explanation, _ = allreduce_explanation(4)
    text = explanation.to_text()
    assert text.splitlines()[0] == explanation.header()
    assert "Step 2 of 2 — exchange at distance 2" in text
    assert "  rank 0 | [1. 10.] | [3. 30.] *" in text
    page = explanation.to_html()
    assert page.count('class="ipympi-frame"') == len(explanation.frames)
    assert page.count("<svg") == len(explanation.steps)
    assert "background:#fff1a8" in page
    bundle = explanation._repr_mimebundle_()
    assert bundle == {"text/html": page, "text/plain": text}
    assert repr(explanation) == f"<Explanation: {explanation.header()}>"


def test_odd_call_text_is_escaped() -> None:
    recorder, _ = allreduce_trace(2)
    before = {0: {"<x>": "</td><script>"}, 1: {"<x>": 1}}
    explanation = Explanation.from_ranks(
        "comm.Allreduce(<x>, y) & co", recorder.records, "float64", before, {}
    )
    page = explanation.to_html()
    assert "<script>" not in page and "<x>" not in page
    assert "&lt;/td&gt;&lt;script&gt;" in page and "comm.Allreduce(&lt;x&gt;, y) &amp; co" in page


def test_choosing_the_collective_and_bad_input() -> None:
    recorder, _ = allreduce_trace(2)
    recorder.collective("Bcast", "bcast_binomial", bcast_binomial(2, 0, b"ab"), T0 + 1e-3)
    chosen = Explanation.from_ranks("comm.Bcast(x)", recorder.records, "uint8", {}, {})
    assert chosen.algorithm == "bcast_binomial"
    with pytest.raises(ValueError, match=r"several collectives \(Allreduce, Bcast\)"):
        Explanation.from_ranks("comm.Scan(x, y)", recorder.records, None, {}, {})
    with pytest.raises(ValueError, match="hold no collective call"):
        Explanation.from_ranks("comm.Barrier()", {0: [], 1: []}, None, {}, {})
    with pytest.raises(ValueError, match="not a numpy dtype"):
        Explanation.from_ranks("comm.Bcast(x)", recorder.records, "no-such-type", {}, {})
    with pytest.raises(ValueError, match="text of the collective call"):
        Explanation.from_ranks("  ", recorder.records, None, {}, {})
    with pytest.raises(ValueError, match="before: a mapping"):
        Explanation.from_ranks("comm.Bcast(x)", recorder.records, None, [], {})  # type: ignore[arg-type]


def test_widget_is_none_without_ipywidgets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import raises ImportError
    explanation, _ = allreduce_explanation(2)
    assert explanation.widget() is None


class _Widget:
    def __init__(self, *children: Any, **traits: Any) -> None:
        self.children = children[0] if children else []
        self.__dict__.update(traits)
        self.observers: list[Any] = []

    def observe(self, handler: Any, names: str) -> None:
        self.observers.append((handler, names))


def test_widget_steps_through_the_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    links = []
    fake = types.ModuleType("ipywidgets")
    for name in ("HTML", "IntSlider", "Play", "VBox", "HBox"):
        setattr(fake, name, type(name, (_Widget,), {}))
    fake.jslink = lambda a, b: links.append((a, b))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ipywidgets", fake)
    explanation, _ = allreduce_explanation(4)
    box = explanation.widget()
    header, controls, output = box.children
    play, slider = controls.children
    assert header.value.startswith("<div") and "allreduce_recursive_doubling" in header.value
    assert (slider.min, slider.max, play.max) == (0, len(explanation.frames) - 1, 3)
    assert links == [((play, "value"), (slider, "value"))]
    assert output.value == explanation.frame_html(0)
    ((handler, names),) = slider.observers
    assert names == "value"
    handler({"new": 2})
    assert output.value == explanation.frame_html(2)
    assert "Step 2 of 2" in output.value


def test_a_local_round_after_the_last_message_belongs_to_the_last_step() -> None:
    blocks = {0: np.array([1, 2], dtype=np.int64), 1: np.array([3, 4], dtype=np.int64)}
    # the root (rank 1) receives into scratch as [own, other] and rotates into rank order
    scratch = np.concatenate([blocks[1], blocks[0]])
    ordered = np.concatenate([blocks[0], blocks[1]])
    schedule = {
        0: [ScheduledRound("send subtree to parent", sends=[(1, blocks[0].tobytes())])],
        1: [
            ScheduledRound(
                "receive subtree",
                recvs=[(0, 16)],
                before=np.concatenate([blocks[1], np.zeros(2, dtype=np.int64)]),
                after=scratch,
            ),
            ScheduledRound("local: rotate into place", before=scratch, after=ordered),
        ],
    }
    recorder = Recorder(2)
    recorder.collective("Gather", "gather_binomial", schedule, T0, root=1)
    explanation = Explanation.from_ranks(
        "comm.Gather(a, b, root=1)", recorder.records, "int64", {}, {}
    )
    (step,) = explanation.frames[1:-1]
    assert step.rows[1].cells == ["[3 4 0 0]", "[1 2 3 4]"]
    assert step.rows[0].cells == ["—", "—"]
