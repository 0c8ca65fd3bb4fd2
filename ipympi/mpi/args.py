"""Integer arguments as mpi4py takes them: one check per kind of argument.

mpi4py passes ranks, tags, roots, colors and keys to C ``int`` parameters, and
converts a Python object to one as Cython does: an ``int`` (or subclass, so
``True`` is 1) as it is, any other object through its ``__int__`` (a float is
truncated, ``nprocs / 2`` is rank 1, a numpy integer is its value), and an object
without ``__int__`` (``'1'``, ``None``, an object with only ``__index__``) is a
``TypeError``. A value outside the C ``int`` range is an ``OverflowError``.
Sequences of integers (dimensions, edges, group ranks) are stricter: each item
must be an integer (``operator.index``), so ``[1.0]`` is a ``TypeError``.

A converted value is then checked for its kind (``ERR_RANK``, ``ERR_TAG``,
``ERR_ROOT``), so that no argument reaches the progress engine unchecked. The
checks are for entry points: each returns the plain ``int`` to use, and a caller
on a hot path tests ``type(x) is int`` and its range inline first, calling these
only when that fails.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from ..core.constants import ANY_SOURCE, ANY_TAG, PROC_NULL, ROOT, TAG_UB_VALUE
from ..core.errors import ERR_RANK, ERR_ROOT, ERR_TAG
from ..core.errors import Exception as MPIException

if TYPE_CHECKING:
    from .commimpl import CommImpl

__all__ = [
    "c_int",
    "c_ints",
    "dest_rank",
    "inter_root",
    "recv_tag",
    "root_rank",
    "send_tag",
    "source_rank",
]

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1


def c_int(value: Any) -> int:
    """``value`` as a C ``int``, converted as mpi4py converts its integer arguments."""
    if type(value) is not int:
        convert = getattr(type(value), "__int__", None)
        if convert is None:
            raise TypeError("an integer is required")
        value = int(convert(value))
    if not INT_MIN <= value <= INT_MAX:
        raise OverflowError("value too large to convert to int")
    return value


def c_ints(values: Any) -> list[int]:
    """A sequence of C ``int`` values; each item must be an integer (``__index__``)."""
    out = [operator.index(v) for v in values]
    for v in out:
        if not INT_MIN <= v <= INT_MAX:
            raise OverflowError("value too large to convert to int")
    return out


def dest_rank(impl: CommImpl, dest: Any, call: str) -> int:
    """A destination: a rank of the (remote) group, or ``PROC_NULL``; else ``ERR_RANK``."""
    dest = c_int(dest)
    size = len(impl.remote_world_ranks)
    if not 0 <= dest < size and dest != PROC_NULL:
        raise MPIException(
            ERR_RANK,
            f"{call}: dest {dest} is not a rank of {impl.label} (ranks 0..{size - 1} or PROC_NULL)",
        )
    return dest


def source_rank(impl: CommImpl, source: Any, call: str) -> int:
    """A source: a rank of the (remote) group, ``ANY_SOURCE`` or ``PROC_NULL``."""
    source = c_int(source)
    size = len(impl.remote_world_ranks)
    if not 0 <= source < size and source not in (ANY_SOURCE, PROC_NULL):
        raise MPIException(
            ERR_RANK,
            f"{call}: source {source} is not a rank of {impl.label} "
            f"(ranks 0..{size - 1}, ANY_SOURCE or PROC_NULL)",
        )
    return source


def send_tag(tag: Any, call: str) -> int:
    """A tag to send with: ``0..TAG_UB``; else ``ERR_TAG``."""
    tag = c_int(tag)
    if not 0 <= tag <= TAG_UB_VALUE:
        raise MPIException(ERR_TAG, f"{call}: tag {tag} is not in 0..TAG_UB ({TAG_UB_VALUE})")
    return tag


def recv_tag(tag: Any, call: str) -> int:
    """A tag to receive or probe with: ``0..TAG_UB`` or ``ANY_TAG``; else ``ERR_TAG``."""
    tag = c_int(tag)
    if not 0 <= tag <= TAG_UB_VALUE and tag != ANY_TAG:
        raise MPIException(
            ERR_TAG, f"{call}: tag {tag} is not in 0..TAG_UB ({TAG_UB_VALUE}) or ANY_TAG"
        )
    return tag


def root_rank(impl: CommImpl, root: Any, call: str) -> int:
    """The root of a collective on an intracommunicator: a rank; else ``ERR_ROOT``."""
    if type(root) is not int:
        root = c_int(root)
    if not 0 <= root < impl.size:
        c_int(root)  # a value beyond C int is an OverflowError, as in mpi4py
        raise MPIException(
            ERR_ROOT, f"{call}: root {root} is not a rank of {impl.label} (size {impl.size})"
        )
    return root


def inter_root(impl: CommImpl, root: Any, call: str) -> int:
    """The root of a collective on an intercommunicator: ``ROOT`` (the root itself),
    ``PROC_NULL`` (the rest of its group) or a rank of the remote group."""
    root = c_int(root)
    size = len(impl.remote_world_ranks)
    if not 0 <= root < size and root not in (ROOT, PROC_NULL):
        raise MPIException(
            ERR_ROOT,
            f"{call}: root {root} must be ROOT, PROC_NULL or a rank of the remote group "
            f"(size {size})",
        )
    return root
