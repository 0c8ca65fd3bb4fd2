"""The arithmetic of two-phase collective I/O (:mod:`ipympi.core.twophase`), no processes."""

from __future__ import annotations

import numpy as np
import pytest

from ipympi.core import twophase as tp

I64 = np.int64


def arr(*values: int) -> np.ndarray:
    return np.array(values, I64)


def test_interleaved_means_the_ranks_ranges_overlap() -> None:
    assert tp.interleaved([(0, 10), (5, 20)])
    assert tp.interleaved([None, (100, 200), (0, 150)])
    assert not tp.interleaved([(0, 10), (10, 20), None])
    assert not tp.interleaved([(0, 10)])
    assert not tp.interleaved([(5, 5), (0, 10)])  # an empty range overlaps nothing


def test_cells_cover_the_range_in_aligned_domains_and_rounds() -> None:
    a = tp.ALIGN
    bounds, rounds = tp.cell_bounds(100, 10 * a + 7, 3, 2 * a)
    assert rounds == 2  # domains of 4 ALIGN blocks (11 blocks / 3), 2 blocks a round
    assert bounds.tolist() == [100, 2 * a, 4 * a, 6 * a, 8 * a, 10 * a, 10 * a + 7]
    assert (np.diff(bounds) >= 0).all()
    # more aggregators than blocks: the last domains are empty, the bounds still ordered
    bounds, rounds = tp.cell_bounds(0, 10, 4, 1 << 24)
    assert rounds == 1 and bounds.tolist() == [0, 10, 10, 10, 10]
    assert tp.cell_bounds(5, 5, 2, 100)[0].tolist() == [5, 5]


def test_split_cuts_segments_at_cell_bounds_and_keeps_data_places() -> None:
    bounds = arr(0, 10, 20, 30)
    pieces = tp.split(arr(5, 18, 25), arr(10, 3, 5), bounds)
    assert pieces.cell.tolist() == [0, 1, 1, 2, 2]
    assert pieces.start.tolist() == [5, 10, 18, 20, 25]
    assert pieces.length.tolist() == [5, 5, 2, 1, 5]
    assert pieces.data.tolist() == [0, 5, 10, 12, 13]
    # a segment over several whole cells
    pieces = tp.split(arr(0), arr(30), bounds)
    assert pieces.cell.tolist() == [0, 1, 2] and pieces.length.tolist() == [10, 10, 10]
    assert len(tp.split(arr(), arr(), bounds).cell) == 0


def test_runs_join_touching_and_overlapping_pieces() -> None:
    starts, lens = tp.runs(arr(20, 0, 4, 10, 12), arr(5, 4, 2, 5, 1))
    assert starts.tolist() == [0, 10, 20] and lens.tolist() == [6, 5, 5]


@pytest.mark.parametrize("width", [1, 3, 8])
def test_copy_pieces_regular_and_irregular(width: int) -> None:
    rng = np.random.default_rng(width)
    src = rng.integers(0, 255, 64 * width, dtype=np.uint8)
    frm = np.arange(0, 64, 2, dtype=I64) * width
    at = rng.permutation(32).astype(I64) * width
    lens = np.full(32, width, I64)
    for fast in (True, False):
        dst = np.zeros(32 * width, np.uint8)
        if fast:
            tp.copy_pieces(dst, at, src, frm, lens)
        else:  # lengths that differ take the piece-by-piece path
            tp.copy_pieces(dst, at[:-1], src, frm[:-1], lens[:-1])
            tp.copy_pieces(dst, at[-1:], src, frm[-1:], lens[-1:] + 0)
        expect = np.zeros_like(dst)
        for a, f in zip(at.tolist(), frm.tolist()):
            expect[a : a + width] = src[f : f + width]
        assert (dst == expect).all()
    dst = np.zeros(7, np.uint8)
    tp.copy_pieces(dst, arr(4, 0), np.arange(1, 6, dtype=np.uint8), arr(0, 2), arr(2, 3))
    assert dst.tolist() == [3, 4, 5, 0, 1, 2, 0]  # pieces of several lengths


def test_bytes_before_eof_stop_at_the_first_short_segment() -> None:
    offs, lens = arr(0, 100, 50), arr(10, 10, 10)
    assert tp.bytes_before_eof(offs, lens, 1000) == 30
    assert tp.bytes_before_eof(offs, lens, 105) == 15
    assert tp.bytes_before_eof(offs, lens, 55) == 10  # stops at offset 100's segment
    assert tp.bytes_before_eof(offs, lens, 0) == 0
