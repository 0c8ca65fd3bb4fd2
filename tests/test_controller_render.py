"""Per-rank output rendering: labels, grouping modes, collapse, partial lines, error composition."""

from __future__ import annotations

from typing import Any

import pytest

from ipympi.notebook.controller.render import GROUPS, OutputRenderer, compose_error, strip_ansi

RED, RESET = "\x1b[0;31m", "\x1b[0m"


class Recorder:
    """A publish callback that keeps every message."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, dict, dict]] = []

    def __call__(self, msg_type: str, content: dict, metadata: dict) -> None:
        self.messages.append((msg_type, content, metadata))

    def view(self) -> list[str]:
        """One readable line per message, and forget them."""
        lines = [_describe(*message) for message in self.messages]
        self.messages.clear()
        return lines


def _describe(msg_type: str, content: dict, metadata: dict) -> str:
    info = metadata.get("ipympi", {})
    if msg_type == "stream" and info.get("label"):
        return f"label: {strip_ansi(content['text']).rstrip()}"
    if msg_type == "stream":
        return f"{content['name']}: {content['text']}"
    if msg_type == "execute_result":
        return f"result{content['metadata']['ipympi']['ranks']}: {content['data']['text/plain']}"
    if msg_type == "clear_output":
        return f"clear[{info['rank']}]"
    return f"{msg_type}[{info['rank']}]: {content['data']['text/plain']}"


def out(rank: int, text: str, name: str = "stdout") -> tuple[int, str, dict]:
    return (rank, "stream", {"name": name, "text": text})


def err(rank: int, text: str) -> tuple[int, str, dict]:
    return out(rank, text, "stderr")


def disp(rank: int, text: str, msg_type: str = "display_data") -> tuple[int, str, dict]:
    content = {"data": {"text/plain": text}, "metadata": {"k": 1}, "transient": {}}
    if msg_type == "update_display_data":
        content["transient"] = {"display_id": "d1"}
    return (rank, msg_type, content)


def result(rank: int, text: str, count: int = 7) -> tuple[int, str, dict]:
    content = {"execution_count": count, "data": {"text/plain": text}, "metadata": {"m": 2}}
    return (rank, "execute_result", content)


def error(rank: int, ename: str, evalue: str, tb: list[str] | None = None, **extra: Any) -> dict:
    return {"ename": ename, "evalue": evalue, "traceback": tb or [f"tb {ename}"], **extra}


def renderer(**options: Any) -> tuple[OutputRenderer, Recorder]:
    rec = Recorder()
    options.setdefault("targets", [0, 1, 2, 3])
    options.setdefault("execution_count", 5)
    return OutputRenderer(rec, **options), rec


def run_cell(batches: list[list[tuple[int, str, dict]]], **options: Any) -> list[str]:
    r, rec = renderer(**options)
    for batch in batches:
        r.feed(batch)
    for rank in options.get("targets", [0, 1, 2, 3]):
        r.rank_done(rank)
    r.finish()
    return rec.view()


# -- streams, streaming in arrival order ------------------------------------------------
def test_identical_lines_in_a_batch_collapse_into_one_message() -> None:
    r, rec = renderer()
    r.feed([out(rank, "hello\n") for rank in range(4)])
    assert rec.messages == [
        (
            "stream",
            {"name": "stdout", "text": "[stdout:0-3] hello\n"},
            {"ipympi": {"ranks": [0, 1, 2, 3]}},
        )
    ]


def test_different_lines_are_published_per_rank_in_arrival_order() -> None:
    r, rec = renderer()
    r.feed([out(2, "two\n"), out(0, "zero\n"), err(1, "oops\n")])
    assert rec.view() == [
        "stdout: [stdout:2] two\n",
        "stdout: [stdout:0] zero\n",
        "stderr: [stderr:1] oops\n",
    ]
    r.feed([out(3, "a\nb\n")])
    assert rec.messages[0][2] == {"ipympi": {"ranks": [3]}}
    assert rec.view() == ["stdout: [stdout:3] a\n[stdout:3] b\n"]


def test_consecutive_lines_of_one_rank_make_one_message() -> None:
    r, rec = renderer()
    r.feed([out(0, "a\n"), out(0, "b\n"), out(1, "c\n"), out(0, "d\n")])
    assert rec.view() == [
        "stdout: [stdout:0] a\n[stdout:0] b\n",
        "stdout: [stdout:1] c\n",
        "stdout: [stdout:0] d\n",
    ]


def test_partial_lines_wait_for_their_end_or_for_the_rank() -> None:
    r, rec = renderer()
    r.feed([out(0, "abc"), out(1, "x")])
    assert rec.view() == []
    r.feed([out(0, "def\ngh")])
    assert rec.view() == ["stdout: [stdout:0] abcdef\n"]
    r.feed([err(0, "e1")])
    r.rank_done(0)
    assert rec.view() == ["stdout: [stdout:0] gh\n", "stderr: [stderr:0] e1\n"]
    r.finish()
    assert rec.view() == ["stdout: [stdout:1] x\n"]


def test_partial_lines_left_at_the_end_collapse() -> None:
    r, rec = renderer()
    r.feed([out(0, "50%"), out(1, "50%")])
    r.finish()
    assert rec.view() == ["stdout: [stdout:0,1] 50%\n"]


def test_empty_lines_and_carriage_returns() -> None:
    r, rec = renderer()
    r.feed([out(0, "a\n\nb\r c\n")])
    assert rec.view() == ["stdout: [stdout:0] a\n[stdout:0]\n[stdout:0] b\r c\n"]


def test_collapse_is_per_batch_while_streaming() -> None:
    r, rec = renderer()
    r.feed([out(0, "hi\n")])
    r.feed([out(1, "hi\n"), out(2, "hi\n")])
    assert rec.view() == ["stdout: [stdout:0] hi\n", "stdout: [stdout:1,2] hi\n"]


def test_collapse_groups_ranks_by_identical_text_at_the_first_position() -> None:
    r, rec = renderer()
    r.feed([out(0, "x\n"), out(1, "y\n"), out(2, "x\n"), out(3, "y\n"), err(2, "x\n")])
    assert rec.view() == [
        "stdout: [stdout:0,2] x\n",
        "stdout: [stdout:1,3] y\n",
        "stderr: [stderr:2] x\n",
    ]


def test_collapse_compares_all_the_text_a_rank_sent_in_the_batch() -> None:
    r, rec = renderer()
    r.feed([out(0, "a\n"), out(1, "a\n"), out(0, "b\n"), out(1, "b\n"), out(2, "a\n")])
    assert rec.view() == ["stdout: [stdout:0,1] a\n[stdout:0,1] b\n", "stdout: [stdout:2] a\n"]


def test_collapse_never_moves_text_across_a_display_of_the_same_rank() -> None:
    r, rec = renderer()
    r.feed([out(0, "a\n"), disp(0, "fig"), out(0, "b\n"), out(1, "a\n"), out(1, "b\n")])
    assert rec.view() == [
        "stdout: [stdout:0] a\n",
        "label: [output:0]",
        "display_data[0]: fig",
        "stdout: [stdout:0] b\n",
        "stdout: [stdout:1] a\n[stdout:1] b\n",
    ]


def test_no_collapse() -> None:
    r, rec = renderer(collapse=False)
    r.feed([out(0, "hi\n"), out(1, "hi\n")])
    assert rec.view() == ["stdout: [stdout:0] hi\n", "stdout: [stdout:1] hi\n"]


def test_labels_off_pass_text_through_unchanged() -> None:
    r, rec = renderer(targets=[0], label=False)
    r.feed([out(0, "10%\r"), out(0, "20%"), out(0, "\ndone\n")])
    r.feed([disp(0, "fig"), result(0, "42")])
    r.rank_done(0)
    r.finish()
    assert [m[1]["text"] for m in rec.messages if m[0] == "stream"] == ["10%\r20%\ndone\n"]
    assert rec.view() == ["stdout: 10%\r20%\ndone\n", "display_data[0]: fig", "result[0]: 42"]


def test_labels_off_still_label_the_processes_the_ranks_spawned() -> None:
    r, rec = renderer(targets=[0], label=False)
    r.feed([out(0, "mine\n"), out(1, "work"), out(1, "er\nhalf"), err(1, "oops\n")])
    r.rank_done(0)
    r.finish()
    assert rec.view() == [
        "stdout: mine\n",
        "stdout: [stdout:1] worker\n",
        "stderr: [stderr:1] oops\n",
        "stdout: [stdout:1] half\n",
    ]


def test_labels_off_with_several_ranks_collapse_nothing() -> None:
    r, rec = renderer(label=False, targets=[0, 1])
    r.feed([out(0, "hi\n"), out(1, "hi\n"), out(1, "x"), result(0, "1"), result(1, "1")])
    r.finish()
    assert rec.view() == ["stdout: hi\n", "stdout: hi\nx", "result[0]: 1", "result[1]: 1"]


def test_unknown_message_types_are_ignored() -> None:
    r, rec = renderer()
    r.feed([(0, "status", {"execution_state": "busy"}), (0, "execute_input", {"code": "1"})])
    r.finish()
    assert rec.messages == []


def test_invalid_group_lists_the_choices() -> None:
    assert GROUPS == ("order", "rank", "type")
    with pytest.raises(
        ValueError, match=r"^group must be one of 'order', 'rank', 'type', not 'ranks'$"
    ):
        renderer(group="ranks")


# -- displays ---------------------------------------------------------------------------
def test_display_label_message_and_metadata() -> None:
    r, rec = renderer()
    original = disp(2, "fig")
    r.feed([original])
    label, display = rec.messages
    assert label == (
        "stream",
        {"name": "stdout", "text": "\x1b[0;90m[output:2]\x1b[0m\n"},
        {"ipympi": {"label": True, "ranks": [2]}},
    )
    assert display == (
        "display_data",
        {
            "data": {"text/plain": "fig"},
            "metadata": {"k": 1, "ipympi": {"rank": 2}},
            "transient": {},
        },
        {"ipympi": {"rank": 2}},
    )
    assert original[2]["metadata"] == {"k": 1}  # the engine's content is not modified


def test_display_labels_repeat_only_when_something_else_came_between() -> None:
    r, rec = renderer()
    r.feed([disp(0, "a"), disp(0, "b"), disp(1, "c"), disp(0, "d"), out(0, "t\n"), disp(0, "e")])
    assert rec.view() == [
        "label: [output:0]",
        "display_data[0]: a",
        "display_data[0]: b",
        "label: [output:1]",
        "display_data[1]: c",
        "label: [output:0]",
        "display_data[0]: d",
        "stdout: [stdout:0] t\n",
        "label: [output:0]",
        "display_data[0]: e",
    ]
    r.feed([disp(0, "f")])
    assert rec.view() == ["display_data[0]: f"]


def test_updates_and_clears_pass_through_without_labels() -> None:
    r, rec = renderer()
    r.feed([disp(1, "a"), disp(1, "b", "update_display_data"), (1, "clear_output", {"wait": True})])
    r.feed([disp(1, "c")])
    assert rec.view() == [
        "label: [output:1]",
        "display_data[1]: a",
        "update_display_data[1]: b",
        "clear[1]",
        "label: [output:1]",
        "display_data[1]: c",
    ]
    r.feed([disp(1, "d", "update_display_data"), (1, "clear_output", {"wait": False})])
    update, clear = rec.messages
    assert update[1] == {
        "data": {"text/plain": "d"},
        "metadata": {"k": 1, "ipympi": {"rank": 1}},
        "transient": {"display_id": "d1"},
    }
    assert clear == ("clear_output", {"wait": False}, {"ipympi": {"rank": 1}})


def test_update_between_displays_keeps_the_label() -> None:
    r, rec = renderer()
    r.feed([disp(0, "a"), disp(1, "b", "update_display_data"), disp(0, "c")])
    assert rec.view() == [
        "label: [output:0]",
        "display_data[0]: a",
        "update_display_data[1]: b",
        "display_data[0]: c",
    ]


# -- results ----------------------------------------------------------------------------
def test_equal_results_are_held_to_the_end_and_collapsed() -> None:
    r, rec = renderer()
    r.feed([result(rank, "42", count=rank + 1) for rank in range(4)] + [out(0, "x\n")])
    for rank in range(4):
        r.rank_done(rank)
    assert rec.view() == ["stdout: [stdout:0] x\n"]
    r.finish()
    label, res = rec.messages
    assert label == (
        "stream",
        {"name": "stdout", "text": f"{RED}Out[0-3:5]:{RESET}\n"},
        {"ipympi": {"label": True, "ranks": [0, 1, 2, 3]}},
    )
    assert res == (
        "execute_result",
        {
            "execution_count": 5,
            "data": {"text/plain": "42"},
            "metadata": {
                "m": 2,
                "ipympi": {"rank": 0, "ranks": [0, 1, 2, 3], "engine_execution_count": 1},
            },
        },
        {"ipympi": {"rank": 0, "ranks": [0, 1, 2, 3]}},
    )


def test_different_results_are_grouped_in_rank_order() -> None:
    lines = run_cell([[result(3, "odd"), result(1, "odd"), result(2, "even"), result(0, "even")]])
    assert lines == [
        "label: Out[0,2:5]:",
        "result[0, 2]: even",
        "label: Out[1,3:5]:",
        "result[1, 3]: odd",
    ]


def test_results_compare_the_whole_data_dict() -> None:
    r, rec = renderer(targets=[0, 1])
    second = result(1, "same")
    second[2]["data"]["text/html"] = "<b>same</b>"
    r.feed([result(0, "same"), second])
    r.finish()
    assert rec.view() == [
        "label: Out[0:5]:",
        "result[0]: same",
        "label: Out[1:5]:",
        "result[1]: same",
    ]


def test_without_collapse_a_result_follows_its_rank_output() -> None:
    r, rec = renderer(collapse=False)
    r.feed([out(1, "partial"), result(1, "1"), result(0, "0")])
    r.rank_done(1)
    assert rec.view() == ["stdout: [stdout:1] partial\n", "label: Out[1:5]:", "result[1]: 1"]
    r.finish()
    assert rec.view() == ["label: Out[0:5]:", "result[0]: 0"]


def test_results_and_errors_are_recorded_and_errors_not_published() -> None:
    r, rec = renderer()
    e = error(1, "ZeroDivisionError", "division by zero")
    r.feed([result(0, "42"), (1, "error", e)])
    r.finish()
    assert r.errors == {1: e}
    assert r.results == {0: result(0, "42")[2]}
    assert [m[0] for m in rec.messages] == ["stream", "execute_result"]


def test_the_data_is_never_labelled() -> None:
    r, rec = renderer(targets=[0])
    r.feed([result(0, "42")])
    r.finish()
    assert rec.messages[-1][1]["data"] == {"text/plain": "42"}


# -- streaming in rank order ------------------------------------------------------------
def test_rank_order_streams_the_live_rank_and_holds_the_others() -> None:
    r, rec = renderer(group="rank")
    r.feed([out(1, "one\n"), out(0, "zero\n"), out(2, "two\n"), out(3, "three\n")])
    assert rec.view() == ["stdout: [stdout:0] zero\n"]
    r.rank_done(2)
    assert rec.view() == []
    r.feed([out(0, "zero again\n"), out(1, "one again")])
    assert rec.view() == ["stdout: [stdout:0] zero again\n"]
    r.rank_done(0)  # 1 becomes live: its held output appears
    assert rec.view() == ["stdout: [stdout:1] one\n"]
    r.feed([out(1, "!\n"), out(3, "more\n")])
    assert rec.view() == ["stdout: [stdout:1] one again!\n"]
    r.rank_done(1)  # 2 is done already: flushed and skipped, 3 becomes live
    assert rec.view() == ["stdout: [stdout:2] two\n", "stdout: [stdout:3] three\n[stdout:3] more\n"]
    r.feed([out(3, "live\n")])
    assert rec.view() == ["stdout: [stdout:3] live\n"]


def test_rank_order_collapses_ranks_flushed_together() -> None:
    r, rec = renderer(group="rank")
    r.feed([out(rank, "hi\n") for rank in range(4)])
    r.rank_done(3)
    r.rank_done(2)
    r.rank_done(1)
    assert rec.view() == ["stdout: [stdout:0] hi\n"]
    r.rank_done(0)
    assert rec.view() == ["stdout: [stdout:1-3] hi\n"]


def test_rank_order_finish_flushes_in_rank_order() -> None:
    r, rec = renderer(group="rank", collapse=False)
    r.feed([out(2, "b"), result(2, "r2"), out(1, "a\n"), disp(1, "fig"), out(0, "z")])
    r.finish()
    assert rec.view() == [
        "stdout: [stdout:0] z\n",
        "stdout: [stdout:1] a\n",
        "label: [output:1]",
        "display_data[1]: fig",
        "stdout: [stdout:2] b\n",
        "label: Out[2:5]:",
        "result[2]: r2",
    ]


def test_rank_order_without_collapse_publishes_results_with_their_rank() -> None:
    r, rec = renderer(group="rank", collapse=False, targets=[0, 1])
    r.feed([result(1, "r1"), out(1, "x\n")])
    r.rank_done(1)
    r.feed([result(0, "r0")])
    r.rank_done(0)
    assert rec.view() == [
        "label: Out[0:5]:",
        "result[0]: r0",
        "stdout: [stdout:1] x\n",
        "label: Out[1:5]:",
        "result[1]: r1",
    ]


def test_rank_order_with_collapse_holds_results_to_the_end() -> None:
    r, rec = renderer(group="rank", targets=[0, 1])
    r.feed([result(0, "r"), out(0, "a\n"), result(1, "r"), out(1, "b\n")])
    r.rank_done(0)
    r.rank_done(1)
    assert rec.view() == ["stdout: [stdout:0] a\n", "stdout: [stdout:1] b\n"]
    r.finish()
    assert rec.view() == ["label: Out[0,1:5]:", "result[0, 1]: r"]


# -- output held until the end ----------------------------------------------------------
BATCHES = [
    [out(1, "one\n"), out(0, "hi\n"), err(1, "warn\n")],
    [disp(0, "fig0"), out(1, "hi\n"), result(1, "r"), result(0, "r")],
    [out(0, "tail"), disp(1, "fig1"), out(2, "hi\n")],
]


def test_held_order_publishes_nothing_until_the_end() -> None:
    r, rec = renderer(stream=False)
    for batch in BATCHES:
        r.feed(batch)
    for rank in range(4):
        r.rank_done(rank)
    assert rec.messages == []
    r.finish()
    assert rec.view() == [
        "stdout: [stdout:1] one\n",
        "stdout: [stdout:0] hi\n",
        "stderr: [stderr:1] warn\n",
        "label: [output:0]",
        "display_data[0]: fig0",
        "stdout: [stdout:1] hi\n",
        "stdout: [stdout:0] tail\n",
        "label: [output:1]",
        "display_data[1]: fig1",
        "stdout: [stdout:2] hi\n",
        "label: Out[0,1:5]:",
        "result[0, 1]: r",
    ]


def test_held_order_collapses_over_the_whole_cell_and_merges_adjacent_text() -> None:
    lines = run_cell(
        [[out(0, "a\n")], [out(0, "b\n"), out(1, "a\n")], [out(1, "b\n"), out(2, "c")]],
        stream=False,
    )
    assert lines == ["stdout: [stdout:0,1] a\n[stdout:0,1] b\n", "stdout: [stdout:2] c\n"]


def test_held_rank_groups_each_rank_output() -> None:
    lines = run_cell(BATCHES, stream=False, group="rank")
    assert lines == [
        "stdout: [stdout:0] hi\n[stdout:0] tail\n",
        "label: [output:0]",
        "display_data[0]: fig0",
        "label: Out[0,1:5]:",
        "result[0, 1]: r",
        "stdout: [stdout:1] one\n[stdout:1] hi\n",
        "stderr: [stderr:1] warn\n",
        "label: [output:1]",
        "display_data[1]: fig1",
        "stdout: [stdout:2] hi\n",
    ]


def test_held_rank_collapses_identical_full_text_at_the_first_rank() -> None:
    batches = [
        [out(1, "same\n"), out(0, "other\n"), out(3, "same"), err(3, "e\n"), out(2, "other\n")]
    ]
    lines = run_cell(batches, stream=False, group="rank")
    assert lines == [
        "stdout: [stdout:0,2] other\n",
        "stdout: [stdout:1,3] same\n",
        "stderr: [stderr:3] e\n",
    ]
    lines = run_cell(batches, stream=False, group="rank", collapse=False)
    assert lines == [
        "stdout: [stdout:0] other\n",
        "stdout: [stdout:1] same\n",
        "stdout: [stdout:2] other\n",
        "stdout: [stdout:3] same\n",
        "stderr: [stderr:3] e\n",
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_type_groups_stdout_stderr_displays_results(stream: bool) -> None:
    r, rec = renderer(stream=stream, group="type")
    for batch in BATCHES:
        r.feed(batch)
        assert rec.messages == []
    r.finish()
    assert rec.view() == [
        "stdout: [stdout:0] hi\n[stdout:0] tail\n",
        "stdout: [stdout:1] one\n[stdout:1] hi\n",
        "stdout: [stdout:2] hi\n",
        "stderr: [stderr:1] warn\n",
        "label: [output:0]",
        "display_data[0]: fig0",
        "label: [output:1]",
        "display_data[1]: fig1",
        "label: Out[0,1:5]:",
        "result[0, 1]: r",
    ]


def test_type_collapses_identical_stdout() -> None:
    lines = run_cell([[out(r, "hello\n") for r in (3, 1, 0, 2)] + [err(2, "!\n")]], group="type")
    assert lines == ["stdout: [stdout:0-3] hello\n", "stderr: [stderr:2] !\n"]


@pytest.mark.parametrize("group", GROUPS)
def test_held_clear_output_discards_only_its_rank_output(group: str) -> None:
    batches = [
        [out(0, "old\n"), disp(0, "old"), out(1, "keep\n"), disp(0, "u", "update_display_data")],
        [(0, "clear_output", {"wait": True}), out(0, "new\n")],
    ]
    lines = run_cell(batches, stream=False, group=group)
    assert "clear[0]" not in lines
    assert sorted(lines) == sorted(
        ["stdout: [stdout:1] keep\n", "update_display_data[0]: u", "stdout: [stdout:0] new\n"]
    )


def test_labels_off_when_held() -> None:
    lines = run_cell(
        [[out(0, "a"), out(0, "b\n"), out(0, "c")], [result(0, "1")]],
        stream=False,
        label=False,
        targets=[0],
    )
    assert lines == ["stdout: ab\nc", "result[0]: 1"]


def test_finish_is_final() -> None:
    r, rec = renderer(stream=False)
    r.feed([out(0, "x\n")])
    r.finish()
    r.finish()
    r.feed([out(0, "late\n"), (0, "error", error(0, "E", "v"))])
    r.rank_done(0)
    assert rec.view() == ["stdout: [stdout:0] x\n"]
    assert r.errors == {}


def test_ranks_outside_the_targets_are_still_shown() -> None:
    r, rec = renderer(group="rank", targets=[0])
    r.feed([out(5, "stray\n"), out(0, "mine\n")])
    r.rank_done(0)
    r.finish()
    assert rec.view() == ["stdout: [stdout:0] mine\n", "stdout: [stdout:5] stray\n"]


# -- the cell's error -------------------------------------------------------------------
def test_one_failing_rank() -> None:
    tb = ["\x1b[31m---\x1b[0m", "ZeroDivisionError: division by zero"]
    composed = compose_error(
        {2: error(2, "ZeroDivisionError", "division by zero", tb)}, [0, 1, 2, 3]
    )
    assert composed == {
        "ename": "ZeroDivisionError",
        "evalue": "division by zero",
        "traceback": [
            "rank 2 of 4 raised ZeroDivisionError: division by zero",
            f"{RED}[2:execute]{RESET}",
            *tb,
        ],
    }


def test_identical_tracebacks_are_shown_once() -> None:
    errors = {
        3: error(3, "ZeroDivisionError", "division by zero", ["\x1b[1;31mline\x1b[0m", "end"]),
        1: error(1, "ZeroDivisionError", "division by zero", ["line", "end"]),
    }
    composed = compose_error(errors, range(4))
    assert composed["traceback"] == [
        "ranks 1,3 of 4 raised ZeroDivisionError: division by zero",
        f"{RED}[1,3:execute]{RESET}",
        "line",
        "end",
    ]


def test_different_errors_are_listed_by_name() -> None:
    errors = {
        2: error(2, "KeyError", "'b'", ["tb2"]),
        1: error(1, "KeyError", "'a'", ["tb1"]),
        0: error(0, "ValueError", "bad", ["tb0"]),
    }
    composed = compose_error(errors, [0, 1, 2, 3])
    assert composed["ename"] == "ValueError"
    assert composed["evalue"] == "bad"
    assert composed["traceback"] == [
        "3 ranks of 4 raised exceptions: rank 0 ValueError, ranks 1,2 KeyError",
        f"{RED}[0:execute]{RESET}",
        "tb0",
        f"{RED}[1:execute]{RESET}",
        "tb1",
        f"{RED}[2:execute]{RESET}",
        "tb2",
    ]


def test_same_exception_with_different_values() -> None:
    errors = {0: error(0, "KeyError", "'a'"), 1: error(1, "KeyError", "'b'")}
    assert (
        compose_error(errors, [0, 1, 2])["traceback"][0]
        == "ranks 0,1 of 3 raised KeyError (rank 0: 'a')"
    )


def test_every_rank_failing_the_same_way() -> None:
    errors = {r: error(r, "RuntimeError", "boom", ["same"]) for r in range(4)}
    composed = compose_error(errors, [0, 1, 2, 3])
    assert composed["traceback"] == [
        "all 4 ranks raised RuntimeError: boom",
        f"{RED}[0-3:execute]{RESET}",
        "same",
    ]


def test_targets_that_are_not_the_first_ranks() -> None:
    composed = compose_error({3: error(3, "OSError", "")}, [3, 1])
    assert composed["traceback"][0] == "rank 3 of ranks 1,3 raised OSError"


def test_waiting_ranks_are_described_with_singular_and_plural() -> None:
    waiting = {
        0: "waiting in comm.Barrier()",
        3: "waiting in comm.Barrier()",
        1: "waiting in comm.Barrier()",
        4: "waiting in comm.recv(source=2)",
        2: "failed rank: left out",
    }
    composed = compose_error(
        {2: error(2, "ZeroDivisionError", "division by zero")}, range(5), waiting
    )
    assert composed["traceback"][0] == (
        "rank 2 of 5 raised ZeroDivisionError: division by zero; "
        "ranks 0,1,3 were waiting in comm.Barrier(); "
        "rank 4 was waiting in comm.recv(source=2)"
    )


def test_interrupted_ranks_say_where_they_were() -> None:
    errors = {
        0: error(0, "KeyboardInterrupt", "", ["kb"], where="recv(source=1, tag=0) at <cell 3>:2"),
        1: error(1, "KeyboardInterrupt", "", ["kb"], where="in comm.Barrier() at <cell 3>:4"),
        2: error(2, "KeyboardInterrupt", "", ["kb"], where="in comm.Barrier() at <cell 3>:4"),
        3: error(3, "KeyboardInterrupt", "", ["kb"]),
    }
    composed = compose_error(errors, range(4))
    assert composed["ename"] == "KeyboardInterrupt"
    assert composed["traceback"] == [
        "interrupted: rank 0 in recv(source=1, tag=0) at <cell 3>:2; "
        "ranks 1,2 in comm.Barrier() at <cell 3>:4; rank 3",
        f"{RED}[0-3:execute]{RESET}",
        "kb",
    ]


def test_a_real_exception_outranks_interrupts() -> None:
    errors = {
        0: error(0, "KeyboardInterrupt", "", ["kb"], where="in comm.Barrier()"),
        2: error(2, "ZeroDivisionError", "division by zero", ["zd"]),
    }
    composed = compose_error(errors, range(4), {1: "waiting in comm.Barrier()"})
    assert composed["ename"] == "ZeroDivisionError"
    assert composed["evalue"] == "division by zero"
    assert composed["traceback"] == [
        "rank 2 of 4 raised ZeroDivisionError: division by zero; "
        "interrupted: rank 0 in comm.Barrier(); rank 1 was waiting in comm.Barrier()",
        f"{RED}[0:execute]{RESET}",
        "kb",
        f"{RED}[2:execute]{RESET}",
        "zd",
    ]


def test_a_missing_traceback_is_made_from_the_exception() -> None:
    composed = compose_error({0: {"ename": "ValueError", "evalue": "bad"}}, [0])
    assert composed["traceback"] == [
        "rank 0 raised ValueError: bad",
        f"{RED}[0:execute]{RESET}",
        "ValueError: bad",
    ]


def test_no_errors_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="at least one rank"):
        compose_error({}, [0])


def test_strip_ansi() -> None:
    assert (
        strip_ansi("\x1b[0;31m[1:execute]\x1b[0m x\x1b[38;5;12my\x1b]0;title\x07")
        == "[1:execute] xy"
    )
    assert strip_ansi("plain") == "plain"


def test_errors_without_targets_or_values() -> None:
    composed = compose_error({1: {"ename": "StopIteration"}}, [])
    assert composed == {
        "ename": "StopIteration",
        "evalue": "",
        "traceback": ["rank 1 raised StopIteration", f"{RED}[1:execute]{RESET}", "StopIteration"],
    }
