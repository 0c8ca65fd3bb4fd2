"""Pure pieces of one-sided communication, without ranks: target specs, datatype runs,
shared segments and single-copy transfers within this process."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ipympi import MPI
from ipympi.core.typemap_copy import runs
from ipympi.mpi.buffers import send_buffer
from ipympi.mpi.win_ops import _basic, _target_spec
from ipympi.progress.largebuf import remote_copy
from ipympi.progress.shm import Segment


def test_target_spec_forms() -> None:
    origin = send_buffer(np.zeros(5, "i"))
    assert _target_spec(None, origin) == (0, 5, MPI.INT)
    assert _target_spec(3, origin) == (3, 5, MPI.INT)
    assert _target_spec((2,), origin) == (2, 5, MPI.INT)
    assert _target_spec([1, 2], origin) == (1, 2, MPI.INT)
    assert _target_spec((1, 10, MPI.SHORT), origin) == (1, 10, MPI.SHORT)
    assert _target_spec((1, None, "d"), origin) == (1, 5, MPI.DOUBLE)
    with pytest.raises(ValueError):
        _target_spec((1, 2, MPI.INT, 4), origin)
    with pytest.raises(ValueError):
        _target_spec("x", origin)


def test_basic_type_of_derived_types() -> None:
    vector = MPI.DOUBLE.Create_vector(3, 1, 2)
    assert _basic(vector) == MPI.DOUBLE
    assert _basic(MPI.INT) == MPI.INT
    pair = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.INT, MPI.DOUBLE])
    assert _basic(pair) is None
    vector.Free()
    pair.Free()


def test_runs_of_a_vector() -> None:
    vector = MPI.INT.Create_vector(3, 1, 2).Commit()
    off, length, pos = runs(vector._impl.layout, 2)
    # extent 20: the 2nd element starts at byte 20, right after the 1st one's last int
    assert [int(x) for x in off] == [0, 8, 16, 28, 36]
    assert [int(x) for x in length] == [4, 4, 8, 4, 4]  # adjacent runs merged
    assert [int(x) for x in pos] == [0, 4, 8, 16, 20]
    assert [len(a) for a in runs(vector._impl.layout, 0)] == [0, 0, 0]
    vector.Free()


def test_segment_maps_alias_and_unlink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ipympi.progress.shm.segment_folder", lambda: str(tmp_path))
    one = Segment.create(64, prefix="test")
    two = Segment.open(one.name, 64)
    one.unlink()
    assert list(tmp_path.iterdir()) == []  # the name is gone, the memory stays
    one.array[3] = 42
    assert two.array[3] == 42
    assert one.try_lock(0, 1, exclusive=True)  # the same process never conflicts
    one.unlock(0, 1)
    one.close()
    two.close()
    empty = Segment.create(0, prefix="test")
    assert empty.array.nbytes == 0 and empty.address == 0
    empty.unlink()
    empty.close()


def test_remote_copy_pieces_within_this_process() -> None:
    source = np.arange(16, dtype=np.uint8)
    target = np.zeros(16, dtype=np.uint8)
    here, there = int(source.ctypes.data), int(target.ctypes.data)
    try:
        remote_copy(os.getpid(), [(here, there + 8, 4), (here + 4, there, 2)], write=True)
    except OSError as exc:  # a kernel that forbids process_vm_* even on oneself
        pytest.skip(f"process_vm_writev not permitted: {exc}")
    assert list(target[8:12]) == [0, 1, 2, 3] and list(target[:2]) == [4, 5]
    back = np.zeros(4, dtype=np.uint8)
    remote_copy(os.getpid(), [(int(back.ctypes.data), there + 8, 4)], write=False)
    assert list(back) == [0, 1, 2, 3]
