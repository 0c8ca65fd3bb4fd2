"""Functions sent by value: code, defaults and closure, not a module path.

A function defined in a notebook cell (or a lambda) lives in the notebook's
``__main__``, which the receiving process does not have, so plain pickle cannot send
it. :func:`dumps` pickles such a function as its code object (``marshal``), its
defaults, keyword defaults and closure cells; the closure's values, arguments and
results go through the same pickler, so a lambda inside a list works too. Lambdas and
nested functions of other modules go by value too (plain pickle cannot send them);
top-level functions of modules are pickled by reference.

Two uses, two ways to find a function's global names:

* IPython Parallel's views (``capture=False``): :func:`loads` rebuilds the function
  with the rank's own user namespace as its globals, as IPython Parallel does: a name
  the function reads that is not an argument is looked up on the rank when it runs
  (``lambda: thread.is_alive()`` reads the rank's ``thread``), and ``global x``
  assigns the rank's ``x``.
* Tasks of ``MPIPoolExecutor`` sent from a notebook (``capture=True``): the workers
  have nothing of the notebook, so the global names a function's code reads go with
  it (other functions of the notebook by value in turn, modules by name), and so do
  the classes the notebook defines (their methods by value), as cloudpickle does.

The sender and the receiver run the same Python (one interpreter's ``marshal``
format), as ipympi's launchers ensure.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import io
import linecache
import marshal
import os
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
    def __init__(self, file: io.BytesIO, capture: bool) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.capture = capture

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
            if not self.capture:
                return _rebuild, state
            # the globals after the function itself (a recursive function names itself)
            return _rebuild, state, _context(obj), None, None, _set_context
        if not self.capture:
            return NotImplemented
        if isinstance(obj, types.ModuleType) and obj.__name__ != "__main__":
            return importlib.import_module, (obj.__name__,)
        if isinstance(obj, type) and obj.__module__ == "__main__":
            attributes = {
                k: v
                for k, v in vars(obj).items()
                if k not in ("__dict__", "__weakref__") and not _is_slot(v)
            }
            slots = vars(obj).get("__slots__")
            made = (obj.__name__, obj.__qualname__, obj.__bases__, type(obj), slots)
            return _make_class, made, attributes, None, None, _set_attributes
        if isinstance(obj, (classmethod, staticmethod)):
            return type(obj), (obj.__func__,)
        if isinstance(obj, property):
            return property, (obj.fget, obj.fset, obj.fdel, obj.__doc__)
        return NotImplemented


def _is_slot(value: Any) -> bool:
    return isinstance(value, (types.MemberDescriptorType, types.GetSetDescriptorType))


def _global_names(code: types.CodeType) -> set[str]:
    """The global names ``code`` and the code nested in it (comprehensions, inner
    functions, lambdas) may read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _captured(func: types.FunctionType) -> dict[str, Any]:
    """The values of the global names ``func`` reads, from its own globals."""
    namespace = func.__globals__
    return {
        name: namespace[name]
        for name in sorted(_global_names(func.__code__))
        if name in namespace and name != "__builtins__"
    }


def _context(func: types.FunctionType) -> tuple[dict[str, Any], str, list[str]]:
    """What a function sent with its globals takes along: those globals, and the lines
    of its cell (a file only the sender's ``linecache`` has), so that a traceback
    raised where it runs shows its source."""
    filename = func.__code__.co_filename
    lines = linecache.getlines(filename) if not os.path.exists(filename) else []
    return _captured(func), filename, lines


def _set_context(func: types.FunctionType, context: tuple[dict[str, Any], str, list[str]]) -> None:
    captured, filename, lines = context
    func.__globals__.update(captured)
    if lines and filename not in linecache.cache:
        # no modification time: linecache.checkcache keeps the entry
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)


def _make_class(name: str, qualname: str, bases: tuple[type, ...], meta: type, slots: Any) -> type:
    namespace: dict[str, Any] = {"__module__": "__main__"}
    if slots is not None:
        namespace["__slots__"] = slots
    cls = meta(name, bases, namespace)
    cls.__qualname__ = qualname
    # Named in the namespace being filled, so that the receiver can send its instances
    # back by reference (as ``__main__.<name>``) when that namespace is its __main__'s.
    into = getattr(_local, "namespace", None)
    if into is not None and qualname == name:
        into[name] = cls
    return cls


def _set_attributes(cls: type, attributes: dict[str, Any]) -> None:
    for key, value in attributes.items():
        if key not in ("__module__", "__slots__", "__qualname__", "__doc__"):
            setattr(cls, key, value)
    if "__doc__" in attributes:
        with contextlib.suppress(AttributeError, TypeError):
            cls.__doc__ = attributes["__doc__"]


def dumps(obj: Any, capture: bool = False) -> bytes:
    """Pickle ``obj``, sending the notebook's functions (and lambdas) by value;
    ``capture``: with the globals they read, and the notebook's classes (see above)."""
    buffer = io.BytesIO()
    _Pickler(buffer, capture).dump(obj)
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
        namespace = {"__builtins__": builtins}
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
