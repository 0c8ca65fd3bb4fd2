"""Splitting MPICH mpiexec's marked output by process group and rank (no processes)."""

from __future__ import annotations

from ipympi.notebook.controller.hydraout import HydraOutput


def marker(out: HydraOutput, group: int, rank: int) -> bytes:
    pattern = out.option()[1]
    return pattern.replace("%g", str(group)).replace("%r", str(rank)).encode()


def test_chunks_go_to_their_group_and_rank_also_when_a_read_cuts_a_marker() -> None:
    out = HydraOutput(3)
    data = (
        marker(out, 0, 1)
        + b"engine line\n"
        + marker(out, 1, 0)
        + b"child 0 says"
        + marker(out, 1, 1)
        + b"child 1\n"
        + marker(out, 1, 0)
        + b" hello\n"
    )
    cut = data.index(b"child 1") - 3  # inside the third marker
    pieces = out.split(7, data[:cut], False) + out.split(7, data[cut:], False)
    assert pieces == [
        (0, 1, b"engine line\n"),
        (1, 0, b"child 0 says"),
        (1, 1, b"child 1\n"),
        (1, 0, b" hello\n"),
    ]
    # text without a marker continues the last writer's chunk
    assert out.split(7, b"more", True) == [(1, 0, b"more")]


def test_a_forged_marker_is_text() -> None:
    out, other = HydraOutput(2), HydraOutput(2)
    assert out.split(3, marker(other, 1, 0) + b"x", True) == [(0, 0, marker(other, 1, 0) + b"x")]


def test_spawned_processes_are_numbered_after_the_ranks_group_by_group() -> None:
    out = HydraOutput(3)
    out.split(5, marker(out, 1, 0) + b"a" + marker(out, 1, 1) + b"b", False)
    out.split(5, marker(out, 2, 2) + b"c", False)
    assert [out.index(1, 0), out.index(1, 1)] == [3, 4]
    assert [out.index(2, 0), out.index(2, 2)] == [5, 7]
