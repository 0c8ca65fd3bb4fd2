"""Unit tests of the file-view arithmetic (``ipympi.core.fileview``), without processes."""

from __future__ import annotations

import numpy as np
import pytest

from ipympi.core import constants as K
from ipympi.core.fileview import Tiling, amode_problem


def brute(tiling: Tiling, start: int, nbytes: int) -> list[int]:
    """The file offset of every stream byte, by walking the instances one by one."""
    where = []
    inst = 0
    while len(where) < start + nbytes:
        for off, length in zip(tiling.off.tolist(), tiling.length.tolist()):
            base = tiling.disp + inst * tiling.extent + off
            where.extend(range(base, base + length))
        inst += 1
    return where[start : start + nbytes]


def expand(offs: np.ndarray, lens: np.ndarray) -> list[int]:
    return [o + i for o, n in zip(offs.tolist(), lens.tolist()) for i in range(n)]


@pytest.mark.parametrize(
    ("disp", "off", "length", "extent"),
    [
        (0, [0], [4], 4),  # contiguous
        (10, [0, 8], [4, 4], 16),  # vector
        (3, [4, 0, 12], [2, 4, 4], 20),  # out of order, with holes
        (0, [0, 4], [4, 4], 8),  # runs that touch: merged
        (7, [2], [3], 9),  # resized with a leading hole
    ],
)
def test_segments_match_a_byte_walk(disp: int, off: list[int], length: list[int], extent: int):
    tiling = Tiling(disp, np.array(off), np.array(length), extent)
    for start in range(0, 25, 3):
        for nbytes in (0, 1, 5, 17, 40):
            offs, lens = tiling.segments(start, nbytes)
            assert expand(offs, lens) == brute(tiling, start, nbytes)
            if len(offs) > 1:  # merged: no segment ends where the next begins
                assert np.all(offs[1:] != (offs + lens)[:-1])


def test_touching_runs_merge_into_one_segment():
    tiling = Tiling(100, np.array([0, 4]), np.array([4, 4]), 8)
    offs, lens = tiling.segments(0, 64)
    assert offs.tolist() == [100] and lens.tolist() == [64]


def test_interleaved_views_cover_the_file_once():
    ranks, piece = 4, 4096
    seen = []
    for r in range(ranks):
        tiling = Tiling(r * piece, np.array([0]), np.array([piece]), ranks * piece)
        offs, lens = tiling.segments(0, 8 * piece)
        assert len(offs) == 8
        seen += expand(offs, lens)
    assert sorted(seen) == list(range(ranks * 8 * piece))


def test_byte_offset():
    tiling = Tiling(10, np.array([0, 8]), np.array([4, 4]), 16)
    assert [tiling.byte_offset(i) for i in (0, 3, 4, 7, 8, 12)] == [10, 13, 18, 21, 26, 34]


def test_a_filetype_without_data_is_an_error():
    with pytest.raises(ValueError):
        Tiling(0, np.array([0]), np.array([0]), 4).segments(0, 4)


@pytest.mark.parametrize(
    ("amode", "ok"),
    [
        (K.MODE_RDONLY, True),
        (K.MODE_RDWR | K.MODE_CREATE | K.MODE_EXCL | K.MODE_DELETE_ON_CLOSE, True),
        (K.MODE_WRONLY | K.MODE_SEQUENTIAL | K.MODE_APPEND | K.MODE_UNIQUE_OPEN, True),
        (0, False),
        (K.MODE_RDONLY | K.MODE_WRONLY, False),
        (K.MODE_RDONLY | K.MODE_CREATE, False),
        (K.MODE_RDONLY | K.MODE_EXCL, False),
        (K.MODE_RDWR | K.MODE_SEQUENTIAL, False),
        (K.MODE_RDWR | 4096, False),
    ],
)
def test_amode_problem(amode: int, ok: bool):
    assert (amode_problem(amode) is None) == ok
