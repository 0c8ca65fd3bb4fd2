"""Copies that typemaps describe: gather, scatter and the external32 conversion.

All functions work on 1-D ``uint8`` numpy arrays viewing memory. Runs of one length are
moved together: as strided views when their offsets form an arithmetic progression (a
vector), otherwise with one fancy-index operation over a *window* view, an array whose
item ``k`` is the bytes starting at byte ``k``. No Python loop runs per element.

Callers check that every offset lies inside the buffers first; the functions here trust
their arguments.
"""

from __future__ import annotations

from typing import Any

from .extfloat import ExternalFloats
from .lazynumpy import np
from .typemap import Layout, leaves
from .typemap_count import complete_bytes

__all__ = ["ext32_size", "from_external", "gather", "runs", "scatter", "to_external"]

_UINTS: dict[int, np.dtype[Any]] = {}  # unsigned integer dtypes by size, filled on first use


def _uints() -> dict[int, np.dtype[Any]]:
    if not _UINTS:
        _UINTS.update({size: np.dtype(f"u{size}") for size in (1, 2, 4, 8)})
    return _UINTS


def _bytes_dtype(length: int) -> np.dtype[Any]:
    """A dtype of ``length`` opaque bytes (unsigned ints where one fits)."""
    found = _uints().get(length)
    return found if found is not None else np.dtype((np.void, length))


def _step(index: np.ndarray) -> int | None:
    """The common difference of ``index`` if it is an arithmetic progression."""
    if len(index) == 1:
        return 0
    step = int(index[1] - index[0])
    if len(index) == 2 or bool((np.diff(index) == step).all()):
        return step
    return None


def _strided(buf: np.ndarray, dtype: np.dtype[Any], index: np.ndarray, step: int) -> np.ndarray:
    return np.ndarray(
        shape=(len(index),), dtype=dtype, buffer=buf, offset=int(index[0]), strides=(step,)
    )


def _window(buf: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    return np.ndarray(
        shape=(buf.nbytes - dtype.itemsize + 1,), dtype=dtype, buffer=buf, strides=(1,)
    )


def _read(buf: np.ndarray, dtype: np.dtype[Any], index: np.ndarray) -> np.ndarray:
    """Items of ``dtype`` at byte offsets ``index`` (a view when it can be one)."""
    step = _step(index)
    if step is not None:
        return _strided(buf, dtype, index, step)
    return _window(buf, dtype)[index]


def _write(buf: np.ndarray, dtype: np.dtype[Any], index: np.ndarray, values: np.ndarray) -> None:
    """Store ``values`` as items of ``dtype`` at byte offsets ``index`` (casting)."""
    step = _step(index)
    if step is not None:
        _strided(buf, dtype, index, step)[...] = values
    else:
        _window(buf, dtype)[index] = values


def _move(
    src: np.ndarray, src_at: np.ndarray, dst: np.ndarray, dst_at: np.ndarray, length: np.ndarray
) -> None:
    """Copy ``length[i]`` bytes from ``src[src_at[i]:]`` to ``dst[dst_at[i]:]``."""
    if not len(length):
        return
    first = int(length[0])
    if bool((length == first).all()):
        groups = [(first, src_at, dst_at)]
    else:
        sizes, which = np.unique(length, return_inverse=True)
        groups = [(int(n), src_at[which == k], dst_at[which == k]) for k, n in enumerate(sizes)]
    for size, source, target in groups:
        dtype = _bytes_dtype(size)
        _write(dst, dtype, target, _read(src, dtype, source))


def _plan(layout: Layout, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runs (memory offset, length, packed position) of ``count`` elements."""
    if count == 1:
        return layout.off, layout.len, layout.pos
    cached = layout._cache.get("plan")
    if cached is not None and cached[0] == count:
        return cached[1]
    index = np.arange(count, dtype=np.int64)[:, None]
    off = (layout.off[None, :] + index * layout.extent).ravel()
    pos = (layout.pos[None, :] + index * layout.packed).ravel()
    length = np.tile(layout.len, count)
    if len(off) > 1:
        joined = (off[1:] == off[:-1] + length[:-1]) & (pos[1:] == pos[:-1] + length[:-1])
        if joined.any():
            starts = np.flatnonzero(np.concatenate(([True], ~joined)))
            off, length, pos = off[starts], np.add.reduceat(length, starts), pos[starts]
    plan = (off, length, pos)
    layout._cache["plan"] = (count, plan)
    return plan


def runs(layout: Layout, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The byte runs of ``count`` elements: (memory offset, length, packed position),
    adjacent runs merged; for copies that other code makes run by run."""
    if count <= 0 or not len(layout.off):
        empty: np.ndarray = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    return _plan(layout, count)


def gather(
    layout: Layout, src: np.ndarray, origin: int, count: int, out: np.ndarray, start: int = 0
) -> None:
    """Pack ``count`` elements whose first origin is byte ``origin`` of ``src`` into
    ``out[start : start + count * layout.packed]``.

    Padding of pair leaves in the packed form is left as it is in ``out``.
    """
    if count <= 0 or not len(layout.off):
        return
    off, length, pos = _plan(layout, count)
    _move(src, off + origin, out, pos + start, length)


def scatter(
    layout: Layout,
    packed: np.ndarray,
    start: int,
    count: int,
    nbytes: int,
    dst: np.ndarray,
    origin: int,
) -> None:
    """Unpack up to ``nbytes`` bytes of ``packed[start:]`` into ``count`` elements of
    ``dst`` whose first origin is byte ``origin``.

    Only whole basic elements are stored; memory of the rest, and of anything that is
    not in the typemap, keeps its contents.
    """
    limit = min(complete_bytes(layout, nbytes), count * layout.packed)
    if limit <= 0 or not len(layout.off):
        return
    count = -(-limit // layout.packed)
    off, length, pos = _plan(layout, count)
    if limit < count * layout.packed:
        keep = pos < limit
        off, pos = off[keep], pos[keep]
        length = np.minimum(length[keep], limit - pos)
    _move(packed, pos + start, dst, off + origin, length)


# --- external32 --------------------------------------------------------------------------


def _native(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype used to read a part for conversion (characters as unsigned codes)."""
    if dtype.kind in "SU":
        return _uints()[dtype.itemsize]
    return dtype


def _ext32_plan(
    layout: Layout,
) -> tuple[int, list[tuple[Any, Any, np.ndarray, np.ndarray, ExternalFloats | None]]]:
    """For one element: its external32 size and, per (leaf, part), the native and
    external dtypes, byte positions and the conversion of long doubles (``None``: numpy
    converts by casting). Raises ValueError naming an unsupported leaf."""
    cached = layout._cache.get("ext32")
    if cached is not None:
        return cached
    table = leaves()
    packed = np.array([leaf.packed for leaf in table], dtype=np.int64)
    ext = np.array([leaf.ext32_size or 0 for leaf in table], dtype=np.int64)
    for leaf_id in layout.leaf_ids:
        leaf = table[int(leaf_id)]
        if leaf.ext32 is None:
            raise ValueError(f"{leaf.name} has no external32 conversion in ipympi")
    sig_leaf, sig_count = layout.sig_leaf, layout.sig_count
    native_start = np.cumsum(packed[sig_leaf] * sig_count) - packed[sig_leaf] * sig_count
    ext_start = np.cumsum(ext[sig_leaf] * sig_count) - ext[sig_leaf] * sig_count
    steps: list[tuple[Any, Any, np.ndarray, np.ndarray, ExternalFloats | None]] = []
    for leaf_id in layout.leaf_ids:
        leaf = table[int(leaf_id)]
        assert leaf.ext32 is not None
        entries = np.flatnonzero(sig_leaf == leaf_id)
        counts = sig_count[entries]
        total = int(counts.sum())
        within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        native_base = np.repeat(native_start[entries], counts) + within * leaf.packed
        ext_base = np.repeat(ext_start[entries], counts) + within * int(ext[leaf_id])
        ext_offset = 0
        for (offset, dtype), part in zip(leaf.parts, leaf.ext32):
            at = (native_base + offset, ext_base + ext_offset)
            if isinstance(part, ExternalFloats):
                steps.append((part.native, part.external, *at, part))
            else:
                steps.append((_native(dtype), part, *at, None))
            ext_offset += part.itemsize
    size = int((ext[sig_leaf] * sig_count).sum())
    plan = (size, steps)
    layout._cache["ext32"] = plan
    return plan


def ext32_size(layout: Layout) -> int:
    """Bytes of one element in external32 form (ValueError if not convertible)."""
    return _ext32_plan(layout)[0]


def _repeat(index: np.ndarray, count: int, stride: int) -> np.ndarray:
    if count == 1:
        return index
    return (index[None, :] + np.arange(count, dtype=np.int64)[:, None] * stride).ravel()


def to_external(
    layout: Layout, packed: np.ndarray, count: int, out: np.ndarray, start: int
) -> None:
    """Convert ``count`` packed elements into external32 form at ``out[start:]``."""
    size, steps = _ext32_plan(layout)
    for native, ext, native_at, ext_at, floats in steps:
        values = _read(packed, native, _repeat(native_at, count, layout.packed))
        if floats is not None:
            values = floats.encode(values)
        _write(out, ext, _repeat(ext_at, count, size) + start, values)


def from_external(
    layout: Layout, data: np.ndarray, start: int, count: int, packed: np.ndarray
) -> None:
    """Convert ``count`` elements in external32 form at ``data[start:]`` to packed form."""
    size, steps = _ext32_plan(layout)
    for native, ext, native_at, ext_at, floats in steps:
        values = _read(data, ext, _repeat(ext_at, count, size) + start)
        if floats is not None:
            values = floats.decode(values)
        _write(packed, native, _repeat(native_at, count, layout.packed), values)
