"""Typemaps (:mod:`ipympi.core.typemap`): the scalars every constructor computes at once agree
with the arrays built later from the pieces, and building a datatype builds no arrays.

The arrays themselves are checked against hand-computed typemaps and MPICH in
``test_derived_datatypes.py``; here random nestings of every constructor are checked for
consistency between the two tiers, without processes.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from ipympi.core import typemap as tm
from ipympi.core.constants import DISTRIBUTE_BLOCK, DISTRIBUTE_CYCLIC, ORDER_C, ORDER_F
from ipympi.mpi import datatype as D

BASES = ["CHAR", "SHORT", "INT", "DOUBLE", "LONG_DOUBLE", "DOUBLE_INT", "SHORT_INT", "C_BOOL",
         "INTEGER16"]  # fmt: skip


def random_type(rng: random.Random, depth: int) -> D.Datatype:
    """A datatype built by a random nesting of constructors (``depth`` levels)."""
    if depth == 0:
        return getattr(D, rng.choice(BASES))
    old = random_type(rng, depth - 1)
    kind = rng.choice(
        ["contiguous", "vector", "hvector", "indexed", "hindexed_block", "struct", "resized",
         "subarray", "darray", "dup"]
    )  # fmt: skip
    if kind == "contiguous":
        return old.Create_contiguous(rng.randint(0, 4))
    if kind == "vector":
        return old.Create_vector(rng.randint(1, 4), rng.randint(0, 3), rng.randint(-4, 5))
    if kind == "hvector":
        return old.Create_hvector(rng.randint(1, 4), rng.randint(1, 3), rng.randint(-40, 40))
    if kind == "indexed":
        n = rng.randint(1, 4)
        lengths = [rng.randint(0, 3) for _ in range(n)]
        return old.Create_indexed(lengths, [rng.randint(-5, 9) for _ in range(n)])
    if kind == "hindexed_block":
        disps = [rng.randint(-50, 50) for _ in range(rng.randint(1, 4))]
        return old.Create_hindexed_block(rng.randint(1, 2), disps)
    if kind == "struct":
        n = rng.randint(1, 4)
        types = [old] + [random_type(rng, rng.randint(0, depth - 1)) for _ in range(n - 1)]
        return D.Datatype.Create_struct(
            [rng.randint(0, 3) for _ in range(n)], [rng.randint(-30, 60) for _ in range(n)], types
        )
    if kind == "resized":
        return old.Create_resized(rng.randint(-8, 8), rng.randint(0, 64))
    if kind == "subarray":
        sizes = [rng.randint(1, 4) for _ in range(rng.randint(1, 3))]
        subsizes = [rng.randint(0, s) for s in sizes]
        starts = [rng.randint(0, s - n) for s, n in zip(sizes, subsizes)]
        return old.Create_subarray(sizes, subsizes, starts, rng.choice([ORDER_C, ORDER_F]))
    if kind == "darray":
        return old.Create_darray(
            4, rng.randint(0, 3), [5, 6], [DISTRIBUTE_BLOCK, DISTRIBUTE_CYCLIC], [3, 2], [2, 2],
            rng.choice([ORDER_C, ORDER_F]),
        )  # fmt: skip
    return old.Dup()


def scalars_from_arrays(layout: tm.Layout) -> dict[str, Any]:
    """What the scalars of a layout must be, recomputed from its arrays."""
    table = tm.leaves()
    sig_leaf, sig_count = layout.sig_leaf, layout.sig_count
    off, length = layout.off, layout.len
    return {
        "size": sum(table[int(i)].size * int(c) for i, c in zip(sig_leaf, sig_count)),
        "packed": sum(table[int(i)].packed * int(c) for i, c in zip(sig_leaf, sig_count)),
        "run_bytes": int(length.sum()),
        "nelem": sum(len(table[int(i)].parts) * int(c) for i, c in zip(sig_leaf, sig_count)),
        "leaf_set": {int(i) for i in sig_leaf},
        "msg_ok": all(table[int(i)].msg_ok for i in sig_leaf),
        "data": (int(off.min()), int((off + length).max())) if len(off) else (0, 0),
    }


@pytest.mark.parametrize("seed", range(300))
def test_scalars_agree_with_arrays(seed: int) -> None:
    rng = random.Random(seed)
    layout = random_type(rng, rng.randint(1, 3))._impl.layout
    expected = scalars_from_arrays(layout)
    assert layout.packed == expected["packed"]  # pairs: with their padding
    assert layout.size == expected["size"] == expected["run_bytes"]
    assert layout.nelem == expected["nelem"]
    assert set(layout.leaf_set) == expected["leaf_set"]
    assert layout.msg_ok == expected["msg_ok"]
    assert (layout.data_lo, layout.data_hi) == expected["data"]
    if layout.packed:
        assert layout.true_lb <= layout.data_lo and layout.data_hi <= layout.true_ub
        assert int(layout.pos[0]) == 0
        assert int(layout.pos[-1] + layout.len[-1]) <= layout.packed  # pairs end in padding


def test_constructing_decoding_and_freeing_build_no_arrays() -> None:
    inner = D.Datatype.Create_struct([1, 2], [0, 8], [D.INT, D.DOUBLE])
    outer = inner.Create_subarray([3, 4], [2, 2], [1, 1]).Create_resized(0, 400)
    vector = D.DOUBLE.Create_vector(1000, 2, 3).Commit()
    for datatype in (inner, outer, vector):
        datatype.decode()
        datatype.Get_contents()
        assert datatype._impl.layout._runs is None and datatype._impl.layout._sig is None
    assert outer.Get_extent() == (0, 400) and outer.size == 4 * 20
    assert vector.Get_true_extent() == (0, (999 * 3 + 2) * 8)
    for datatype in (inner, outer, vector):
        datatype.Free()


def test_resized_and_single_struct_share_their_childs_arrays() -> None:
    vector = D.DOUBLE.Create_vector(3, 1, 2)
    child = vector._impl.layout
    for made in (vector.Create_resized(-8, 64), D.Datatype.Create_struct([1], [0], [vector])):
        layout = made._impl.layout
        assert layout.off is child.off and layout.sig_leaf is child.sig_leaf


def test_large_struct_runs_are_the_fields_in_order() -> None:
    n = 1000
    types = [D.INT, D.DOUBLE] * (n // 2)
    disps = [16 * i for i in range(n)]  # gaps between the fields: one run each
    layout = D.Datatype.Create_struct([1] * n, disps, types)._impl.layout
    sizes = [4, 8] * (n // 2)
    assert layout.off.tolist() == disps
    assert layout.len.tolist() == sizes
    assert layout.pos.tolist() == np.concatenate(([0], np.cumsum(sizes[:-1]))).tolist()
    assert len(layout.sig_leaf) == n
