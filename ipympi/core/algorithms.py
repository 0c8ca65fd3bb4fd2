"""Data-movement collective algorithms, one generator per algorithm.

Each generator runs on one rank and yields :class:`~ipympi.mpi.coll.runner.Round`
objects, one per step of the algorithm, so its rounds stay explicit (traces
and teaching views draw them). Data are byte memoryviews; blocks are sliced,
never copied element by element. Ranks are communicator ranks. Every
algorithm is correct for any number of ranks, not only powers of two:

* barrier: dissemination, ceil(log2 p) rounds;
* bcast: binomial tree (small), scatter + ring allgather (large);
* gather/scatter: binomial trees; the v-variants: one round at the root;
* allgather: Bruck's algorithm (small, log rounds), ring (large); allgatherv: ring;
* alltoall(v/w): pairwise exchange, p - 1 rounds.

Lower-case (object) variants move pickles of lists of objects along the same
trees.

Every round carries the rank's working data as ``Round.state`` (the buffer
being filled or sent, the scratch space of the trees and of Bruck's algorithm,
the list of pickles being moved; nothing for the barrier), which traces
snapshot to explain the algorithm step by step. Where the result is produced
by a local step after the last message (rotating gathered blocks into rank
order, copying a rank's own block out of scratch space), that step is a
round without messages labelled ``local: ...``, whose state becomes the result:
traces show where the final reordering happens, and runners pass over it at once
when nothing is traced (``schedule.is_local``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from .schedule import Algorithm, Round

__all__ = [
    "allgather_bruck",
    "allgather_objects",
    "allgather_ring",
    "allgatherv_ring",
    "alltoall_objects",
    "alltoallw_pairwise",
    "barrier_dissemination",
    "bcast_binomial",
    "bcast_objects",
    "bcast_scatter_allgather",
    "binomial_peers",
    "binomial_subtrees",
    "bruck_rounds",
    "dissemination_peers",
    "gather_binomial",
    "gather_objects",
    "gatherv_linear",
    "rotate",
    "scatter_binomial",
    "scatter_objects",
    "scatterv_linear",
]

_EMPTY = memoryview(bytearray())


def _parent_distance(rel: int) -> int:
    """Distance to the parent in the binomial tree of relative rank ``rel`` (0 at the root).

    The parent of ``rel`` is ``rel`` with its lowest set bit cleared.
    """
    return rel & -rel


def _child_distances(rel: int, size: int) -> list[int]:
    """Distances ``d`` to the children ``rel + d`` in the binomial tree, farthest first."""
    top = rel & -rel if rel else 1 << (size - 1).bit_length()
    distances = []
    mask = top >> 1
    while mask > 0:
        if rel + mask < size:
            distances.append(mask)
        mask >>= 1
    return distances


def _local_step(label: str, state: Any) -> Round:
    """A round without messages: a local step, which traces show and runners pass over."""
    return Round(f"local: {label}", state=state)


def _subtree(rel: int, size: int) -> int:
    """Number of ranks in the binomial subtree rooted at relative rank ``rel``."""
    if rel == 0:
        return size
    return min(rel & -rel, size - rel)


def rotate(out: memoryview, src: memoryview, shift: int) -> None:
    """Copy ``src`` into ``out`` (as long) rotated left by ``shift`` bytes:
    ``out[i] = src[(i + shift) % len]``. Trees and Bruck's algorithm hold blocks in
    ranks relative to a root or to the rank itself; this puts them in rank order."""
    cut = src.nbytes - shift
    out[:cut] = src[shift:]
    out[cut:] = src[:shift]


# -- barrier --------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def dissemination_peers(rank: int, size: int) -> tuple[tuple[int, int, int], ...]:
    """``(distance, send to, receive from)`` of each round of the dissemination barrier."""
    rounds = []
    k = 1
    while k < size:
        rounds.append((k, (rank + k) % size, (rank - k) % size))
        k <<= 1
    return tuple(rounds)


def barrier_dissemination(rank: int, size: int) -> Algorithm:
    """Round k: notify rank + 2^k, hear from rank - 2^k. ceil(log2 p) rounds."""
    for k, to, frm in dissemination_peers(rank, size):
        yield Round(f"dissemination distance {k}", sends=[(to, b"")], recvs=[(frm, _EMPTY)])


# -- bcast ----------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def binomial_peers(rank: int, size: int, root: int) -> tuple[int | None, tuple[int, ...]]:
    """``(parent, children)`` of ``rank`` in the binomial tree rooted at ``root``
    (parent None at the root; children farthest first, the order they are sent to)."""
    rel = (rank - root) % size
    up = _parent_distance(rel)
    parent = (rank - up) % size if up else None
    return parent, tuple((rank + d) % size for d in _child_distances(rel, size))


@functools.lru_cache(maxsize=256)
def binomial_subtrees(
    rank: int, size: int, root: int
) -> tuple[int | None, int, tuple[tuple[int, int, int], ...]]:
    """``(parent, ranks, children)`` of ``rank`` in the binomial tree rooted at
    ``root``, for gathering and scattering blocks along it: ``ranks`` is the size of
    this rank's subtree, and each child comes as ``(child, first, count)``: its
    subtree holds the ``count`` relative ranks from this rank's relative rank +
    ``first`` on. Children farthest first (the order scatter sends in; gather
    receives nearest first)."""
    rel = (rank - root) % size
    parent, children = binomial_peers(rank, size, root)
    subtrees = tuple(
        (child, d, _subtree(rel + d, size))
        for child, d in zip(children, _child_distances(rel, size))
    )
    return parent, _subtree(rel, size), subtrees


def bcast_binomial(rank: int, size: int, root: int, mem: memoryview) -> Algorithm:
    """Binomial tree: receive from the parent, then send to each child."""
    parent, children = binomial_peers(rank, size, root)
    if parent is not None:
        yield Round("receive from parent", recvs=[(parent, mem)], state=mem)
    if children:
        yield Round("send to children", sends=[(child, mem) for child in children], state=mem)


def _blocks(nbytes: int, parts: int) -> list[tuple[int, int]]:
    """Split ``nbytes`` into ``parts`` nearly equal (start, stop) ranges."""
    base, extra = divmod(nbytes, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def bcast_scatter_allgather(rank: int, size: int, root: int, mem: memoryview) -> Algorithm:
    """Large broadcast (van de Geijn): binomial scatter of p pieces, then a ring allgather.

    Each rank moves about 2 n (p-1)/p bytes instead of n log p.
    """
    rel = (rank - root) % size
    blocks = _blocks(mem.nbytes, size)  # piece i belongs to relative rank i

    def span(first: int, count: int) -> memoryview:
        return mem[blocks[first][0] : blocks[min(first + count, size) - 1][1]]

    up = _parent_distance(rel)
    if up:
        pieces = span(rel, _subtree(rel, size))
        yield Round("scatter: receive pieces", recvs=[((rank - up) % size, pieces)], state=mem)
    sends = [
        ((rank + d) % size, span(rel + d, _subtree(rel + d, size)))
        for d in _child_distances(rel, size)
    ]
    if sends:
        yield Round("scatter: send pieces", sends=sends, state=mem)
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        send_piece = (rel - step) % size
        recv_piece = (rel - step - 1) % size
        yield Round(
            f"allgather ring step {step + 1}",
            sends=[(right, span(send_piece, 1))],
            recvs=[(left, span(recv_piece, 1))],
            state=mem,
        )


def bcast_objects(rank: int, size: int, root: int, data: bytes | None) -> Algorithm:
    """Lower-case bcast: the root's pickle travels down a binomial tree."""
    rel = (rank - root) % size
    up = _parent_distance(rel)
    if up:
        rnd = Round("receive from parent", recvs=[((rank - up) % size, None)])
        (op,) = yield rnd
        data = bytes(op.data)
        rnd.state = data
    children = [((rank + d) % size, data) for d in _child_distances(rel, size)]
    if children:
        yield Round("send to children", sends=children, state=data)
    return data


# -- gather / scatter -------------------------------------------------------------
def gather_binomial(
    rank: int, size: int, root: int, block: memoryview, out: memoryview | None
) -> Algorithm:
    """Binomial gather of equal blocks; ``out`` (root only) gets them in rank order.

    Each rank collects its subtree's blocks in relative-rank order in a scratch
    buffer and sends them to its parent; the root rotates them into place.
    """
    n = block.nbytes
    parent, count, children = binomial_subtrees(rank, size, root)
    scratch = memoryview(bytearray(n * count))
    scratch[:n] = block
    for child, first, got in reversed(children):
        yield Round(
            f"receive subtree of {got}",
            recvs=[(child, scratch[first * n : (first + got) * n])],
            state=scratch,
        )
    if parent is not None:
        yield Round("send subtree to parent", sends=[(parent, scratch)], state=scratch)
        return
    assert out is not None
    rotate_step = _local_step("rotate into place", scratch)
    yield rotate_step
    # scratch holds relative ranks 0..p-1; relative rank i is rank (i + root) % p.
    rotate(out, scratch, (size - root) * n)
    rotate_step.state = out


def scatter_binomial(
    rank: int, size: int, root: int, src: memoryview | None, block: memoryview
) -> Algorithm:
    """Binomial scatter of equal blocks from ``src`` (root only) into ``block``."""
    n = block.nbytes
    parent, count, children = binomial_subtrees(rank, size, root)
    scratch = memoryview(bytearray(n * count))
    if parent is None:
        assert src is not None
        rotate(scratch, src, root * n)
    else:
        yield Round("receive subtree from parent", recvs=[(parent, scratch)], state=scratch)
    sends = [(child, scratch[first * n : (first + got) * n]) for child, first, got in children]
    if sends:
        yield Round("send subtrees to children", sends=sends, state=scratch)
    own = _local_step("copy own block out", scratch)
    yield own
    block[:] = scratch[:n]
    own.state = block


def gatherv_linear(
    rank: int,
    size: int,
    root: int,
    block: memoryview | None,
    outs: Sequence[memoryview] | None,
) -> Algorithm:
    """Gatherv: every rank sends its block to the root in one round.

    ``outs`` (root only) are the per-rank destination views; ``block`` is None
    at a root using IN_PLACE.
    """
    if rank != root:
        yield Round("send to root", sends=[(root, block)], state=block)
        return
    assert outs is not None
    if block is not None and outs[root].nbytes:
        outs[root][:] = block
    recvs = [(r, outs[r]) for r in range(size) if r != root]
    if recvs:
        yield Round("receive from every rank", recvs=recvs, state=outs)


def scatterv_linear(
    rank: int,
    size: int,
    root: int,
    ins: Sequence[memoryview] | None,
    block: memoryview | None,
) -> Algorithm:
    """Scatterv: the root sends each rank its block in one round."""
    if rank != root:
        yield Round("receive from root", recvs=[(root, block)], state=block)
        return
    assert ins is not None
    if block is not None and ins[root].nbytes:
        block[:] = ins[root]
    sends = [(r, ins[r]) for r in range(size) if r != root]
    if sends:  # the root's state is its own block (in ``ins`` with IN_PLACE)
        yield Round("send to every rank", sends=sends, state=ins[root] if block is None else block)


def gather_objects(rank: int, size: int, root: int, data: bytes) -> Algorithm:
    """Lower-case gather: pickled lists of (rank, pickle) pairs up a binomial tree."""
    import pickle

    rel = (rank - root) % size
    items: list[tuple[int, bytes]] = [(rank, data)]
    mask = 1
    while mask < size:
        if rel & mask:
            wire = pickle.dumps(items, pickle.HIGHEST_PROTOCOL)
            yield Round("send subtree to parent", sends=[((rank - mask) % size, wire)], state=items)
            return None
        if rel + mask < size:
            (op,) = yield Round(
                "receive subtree", recvs=[((rank + mask) % size, None)], state=items
            )
            items.extend(pickle.loads(op.data))
        mask <<= 1
    order = _local_step("sort into rank order", items)
    yield order
    result = [pickled for _, pickled in sorted(items)]
    order.state = result
    return result


def scatter_objects(rank: int, size: int, root: int, pickles: list[bytes] | None) -> Algorithm:
    """Lower-case scatter: sublists of pickles down a binomial tree."""
    import pickle

    rel = (rank - root) % size
    # mine[i] is the pickle for relative rank rel + i
    mine: list[bytes] = []
    if rel == 0:
        assert pickles is not None
        mine = [pickles[(i + root) % size] for i in range(size)]
    up = _parent_distance(rel)
    if up:
        rnd = Round("receive subtree from parent", recvs=[((rank - up) % size, None)], state=mine)
        (op,) = yield rnd
        mine = pickle.loads(op.data)
        rnd.state = mine
    sends = [
        (
            (rank + d) % size,
            pickle.dumps(mine[d : d + _subtree(rel + d, size)], pickle.HIGHEST_PROTOCOL),
        )
        for d in _child_distances(rel, size)
    ]
    if sends:
        yield Round("send subtrees to children", sends=sends, state=mine)
    own = _local_step("keep own object", mine)
    yield own
    own.state = mine[0]
    return mine[0]


# -- allgather ------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def bruck_rounds(rank: int, size: int) -> tuple[tuple[int, int, int, int], ...]:
    """``(send to, receive from, have, count)`` of each round of Bruck's allgather:
    send the first ``count`` blocks held, receive ``count`` blocks stored after
    the ``have`` already held."""
    rounds = []
    have = 1
    dist = 1
    while dist < size:
        count = min(dist, size - have)
        rounds.append(((rank - dist) % size, (rank + dist) % size, have, count))
        have += count
        dist <<= 1
    return tuple(rounds)


def allgather_bruck(rank: int, size: int, block: memoryview, out: memoryview) -> Algorithm:
    """Bruck's allgather: ceil(log2 p) rounds for any p, then one local rotation.

    After round k each rank holds the blocks of ranks rank .. rank + 2^(k+1) - 1
    (mod p), stored from its own block on.
    """
    n = block.nbytes
    scratch = memoryview(bytearray(n * size))
    scratch[:n] = block
    for to, frm, have, count in bruck_rounds(rank, size):
        yield Round(
            f"Bruck distance {(rank - to) % size}",
            sends=[(to, scratch[: count * n])],
            recvs=[(frm, scratch[have * n : (have + count) * n])],
            state=scratch,
        )
    rotate_step = _local_step("rotate into place", scratch)
    yield rotate_step
    rotate(out, scratch, (size - rank) * n)
    rotate_step.state = out


def allgather_ring(rank: int, size: int, block: memoryview | None, out: memoryview) -> Algorithm:
    """Ring allgather for large blocks: p - 1 rounds, each passing one block on."""
    n = out.nbytes // size
    if block is not None:
        out[rank * n : (rank + 1) * n] = block
    yield from allgatherv_ring(
        rank, size, [out[r * n : (r + 1) * n] for r in range(size)], state=out
    )


def allgatherv_ring(
    rank: int, size: int, views: Sequence[memoryview], state: Any = None
) -> Algorithm:
    """Ring allgather of variable blocks already in place in ``views[rank]``.

    ``state`` (for traces) is the whole receive buffer when the caller has one;
    by default the list of blocks.
    """
    if state is None:
        state = views
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        send_block = (rank - step) % size
        recv_block = (rank - step - 1) % size
        yield Round(
            f"ring step {step + 1}",
            sends=[(right, views[send_block])],
            recvs=[(left, views[recv_block])],
            state=state,
        )


def allgather_objects(rank: int, size: int, data: bytes) -> Algorithm:
    """Lower-case allgather: Bruck's algorithm on lists of pickles."""
    import pickle

    have = [data]
    dist = 1
    while dist < size:
        count = min(dist, size - len(have))
        wire = pickle.dumps(have[:count], pickle.HIGHEST_PROTOCOL)
        (op,) = yield Round(
            f"Bruck distance {dist}",
            sends=[((rank - dist) % size, wire)],
            recvs=[((rank + dist) % size, None)],
            state=have,
        )
        have.extend(pickle.loads(op.data))
        dist <<= 1
    rotate = _local_step("rotate into place", have)
    yield rotate
    # have[i] came from rank (rank + i) % size
    result = [have[(r - rank) % size] for r in range(size)]
    rotate.state = result
    return result


# -- alltoall ---------------------------------------------------------------------------
def alltoallw_pairwise(
    rank: int, size: int, sends: Sequence[memoryview], recvs: Sequence[memoryview]
) -> Algorithm:
    """Pairwise exchange: in round i, send to rank + i and receive from rank - i.

    ``sends[r]``/``recvs[r]`` are the blocks for/from rank r (any sizes, so this
    serves Alltoall, Alltoallv and Alltoallw). With IN_PLACE the caller passes
    copies of the outgoing blocks.
    """
    if recvs[rank].nbytes:
        recvs[rank][:] = sends[rank]
    for i in range(1, size):
        dst, src = (rank + i) % size, (rank - i) % size
        yield Round(
            f"pairwise step {i}",
            sends=[(dst, sends[dst])],
            recvs=[(src, recvs[src])],
            state=recvs,
        )


def alltoall_objects(rank: int, size: int, pickles: Sequence[bytes]) -> Algorithm:
    """Lower-case alltoall: pairwise exchange of pickles."""
    out: list[Any] = [None] * size
    out[rank] = pickles[rank]
    for i in range(1, size):
        dst, src = (rank + i) % size, (rank - i) % size
        (op,) = yield Round(
            f"pairwise step {i}", sends=[(dst, pickles[dst])], recvs=[(src, None)], state=out
        )
        out[src] = bytes(op.data)
    return out
