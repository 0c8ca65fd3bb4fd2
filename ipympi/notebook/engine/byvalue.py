"""Functions sent to the ranks by value: code, defaults and closure, not a module path.

A function defined in a notebook cell (or a lambda) lives in the notebook's
``__main__``, which the ranks do not have, so plain pickle cannot send it.
:func:`dumps` pickles such a function as its code object (``marshal``), its
defaults, keyword defaults and closure cells; the closure's values, arguments
and results go through the same pickler, so a lambda inside a list works too.
On the rank :func:`loads` rebuilds it with the rank's own user namespace as its
globals, as IPython Parallel does: a name the function reads that is not an
argument is looked up on the rank when it runs (``lambda: thread.is_alive()``
reads the rank's ``thread``), and ``global x`` assigns the rank's ``x``.
Lambdas and nested functions of other modules go by value too (plain pickle
cannot send them); top-level functions of modules are pickled by reference.

The controller and the ranks run the same Python (one interpreter's ``marshal``
format), as ipympi's launchers ensure.
"""

from __future__ import annotations

import contextlib
import io
import marshal
import pickle
import threading
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["call_part", "dumps", "loads", "map_part"]

_EMPTY = "<ipympi empty cell>"  # a closure cell with no value yet
_local = threading.local()  # the namespace that functions being rebuilt take as globals


def _by_value(func: Any) -> bool:
    """The notebook's functions, and lambdas and nested functions anywhere (which plain
    pickle cannot send at all)."""
    if getattr(func, "__module__", None) in (None, "__main__"):
        return True
    return func.__name__ == "<lambda>" or "<locals>" in func.__qualname__


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, types.FunctionType) and _by_value(obj):
            cells = []
            for cell in obj.__closure__ or ():
                try:
                    cells.append(cell.cell_contents)
                except ValueError:
                    cells.append(_EMPTY)
            state = (
                marshal.dumps(obj.__code__),
                obj.__name__,
                obj.__qualname__,
                obj.__defaults__,
                obj.__kwdefaults__,
                tuple(cells) if obj.__closure__ is not None else None,
                obj.__doc__,
                dict(obj.__dict__),
            )
            return _rebuild, state
        return NotImplemented


def dumps(obj: Any) -> bytes:
    """Pickle ``obj``, sending the notebook's functions (and lambdas) by value."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


@contextlib.contextmanager
def _globals(namespace: dict[str, Any]) -> Iterator[None]:
    before = getattr(_local, "namespace", None)
    _local.namespace = namespace
    try:
        yield
    finally:
        _local.namespace = before


def loads(data: bytes, namespace: dict[str, Any]) -> Any:
    """Unpickle ``data``; functions sent by value get ``namespace`` as their globals."""
    with _globals(namespace):
        return pickle.loads(data)


def _rebuild(
    code: bytes,
    name: str,
    qualname: str,
    defaults: tuple[Any, ...] | None,
    kwdefaults: dict[str, Any] | None,
    cells: tuple[Any, ...] | None,
    doc: str | None,
    attributes: dict[str, Any],
) -> types.FunctionType:
    namespace = getattr(_local, "namespace", None)
    if namespace is None:
        namespace = {"__builtins__": __builtins__}
    closure = None
    if cells is not None:
        closure = tuple(
            types.CellType()
            if isinstance(value, str) and value == _EMPTY
            else types.CellType(value)
            for value in cells
        )
    func = types.FunctionType(marshal.loads(code), namespace, name, defaults, closure)
    func.__qualname__ = qualname
    func.__kwdefaults__ = kwdefaults
    func.__doc__ = doc
    func.__dict__.update(attributes)
    return func


def map_part(func: Any, *parts: Any) -> list[Any]:
    """A rank's share of ``view.map``: ``func`` on each item of its parts."""
    return list(map(func, *parts))


def call_part(func: Any, *parts: Any) -> list[Any]:
    """A rank's share of a ``@view.parallel`` function: ``func`` on its parts, as a list."""
    value = func(*parts)
    return value if isinstance(value, list) else list(value)
