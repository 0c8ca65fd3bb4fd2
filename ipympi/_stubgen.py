"""Write ``ipympi/MPI.pyi``, the type stub of :mod:`ipympi.MPI`, from the live module.

``ipympi.MPI`` builds its namespace at run time, so a type checker cannot read its names
from the source. This script imports the module and writes what it finds: each class
with its bases and members (signatures and annotations as the implementation declares
them), each function, and each constant typed by its value's type (``COMM_WORLD:
Intracomm``, ``ANY_SOURCE: int``, ``SUM: Op``). The stub is committed; a test runs
:func:`generate` again and fails when the committed file differs, so a new class or
method in the implementation shows up as a stale stub, never as a silently missing one.

    python -m ipympi._stubgen           # rewrite ipympi/MPI.pyi
    python -m ipympi._stubgen --check   # exit 1 if it is out of date

Annotations that name something the stub cannot name (a private helper type) are
written as ``Any``; :func:`generate` counts them.
"""

from __future__ import annotations

import argparse
import collections.abc
import inspect
import sys
import types
import typing
from pathlib import Path
from typing import Any

__all__ = ["STUB", "generate", "main"]

STUB = Path(__file__).with_name("MPI.pyi")

# mpi4py's private names that programs and mpi4py.util use (``MPI._typealign``, ...).
PRIVATE = ("_addressof", "_comm_lock", "_comm_lock_table", "_handleof", "_sizeof", "_typealign")

# The special methods a user calls through syntax; other dunders are left out.
DUNDERS = frozenset(
    (
        *("__init__", "__new__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"),
        *("__hash__", "__bool__", "__int__", "__index__", "__len__", "__iter__", "__next__"),
        *("__getitem__", "__setitem__", "__delitem__", "__contains__", "__enter__"),
        *("__exit__", "__call__", "__buffer__", "__release_buffer__", "__reduce__"),
        *("__copy__", "__deepcopy__", "__dlpack__", "__dlpack_device__"),
    )
)

_HEADER = '''"""Types of :mod:`ipympi.MPI`, generated from the implementation.

Do not edit: ``python -m ipympi._stubgen`` writes this file (a test checks it is current).
"""
'''


class _Writer:
    """Formats annotations and collects what the stub must import or declare."""

    def __init__(self, module: types.ModuleType, exported: dict[str, Any]) -> None:
        self.module = module
        self.exported = exported
        self.public_types: dict[int, str] = {}
        for key, value in exported.items():  # the first name of a class with two
            if isinstance(value, type):
                self.public_types.setdefault(id(value), key)
        self.imports: set[str] = set()
        self.typing_names: set[str] = set()
        self.extensions: set[str] = set()  # names from typing_extensions
        self.shadowed: set[str] = set(exported)
        self.helpers: dict[str, type] = {}  # private classes the stub must declare
        self.unnamed = 0
        self.own: dict[int, str] = {}  # private ancestors of the class being written

    # -- annotations ----------------------------------------------------------------
    def type_name(self, tp: Any) -> str:
        """The stub's spelling of an annotation object."""
        if tp is None or tp is type(None):
            return "None"
        if tp is Any:
            return self._typing("Any")
        if tp is Ellipsis:
            return "..."
        if tp is _SELF:
            self.extensions.add("Self")
            return "Self"
        origin = typing.get_origin(tp)
        if origin is not None:
            return self._generic(tp, origin, typing.get_args(tp))
        if isinstance(tp, type):
            return self._class(tp)
        if isinstance(tp, (typing.TypeVar, str, typing.ForwardRef)):
            return self._any()
        if isinstance(tp, list):  # the parameters of Callable[[...], R]
            return "[" + ", ".join(self.type_name(t) for t in tp) + "]"
        return self._any()

    def _generic(self, tp: Any, origin: Any, args: tuple[Any, ...]) -> str:
        if origin is typing.Union or origin is _UNION_TYPE:
            names = [self.type_name(a) for a in args]
            return " | ".join(dict.fromkeys(names))
        if origin is typing.Literal:
            return self._typing("Literal") + "[" + ", ".join(map(repr, args)) + "]"
        if origin is typing.ClassVar or origin is typing.Final:
            return self.type_name(args[0]) if args else self._any()
        if origin is collections.abc.Callable and args and args[0] is not Ellipsis:
            params = "[" + ", ".join(self.type_name(a) for a in args[0]) + "]"
            return f"{self.type_name(origin)}[{params}, {self.type_name(args[-1])}]"
        head = self.type_name(origin)
        if not args or head == self._any():
            return head
        return head + "[" + ", ".join(self.type_name(a) for a in args) + "]"

    def _class(self, cls: type) -> str:
        public = self.own.get(id(cls)) or self.public_types.get(id(cls))
        if public is not None:
            return public
        module = cls.__module__
        if module == "builtins":
            name = cls.__qualname__
            if name in self.shadowed:
                self.imports.add("builtins")
                return f"builtins.{name}"
            return name
        if module.startswith("ipympi"):
            if cls.__name__.startswith("_") and self._declare(cls):
                return cls.__name__
            return self._any()
        if module in ("typing", "typing_extensions", "collections.abc") or module.startswith("_"):
            module = "collections.abc" if hasattr(collections.abc, cls.__name__) else "typing"
        module = {"numpy._core.multiarray": "numpy", "numpy.core.multiarray": "numpy"}.get(
            module, module
        )
        if "<" in cls.__qualname__:
            return self._any()
        self.imports.add(module.split(".")[0] if module.startswith("numpy") else module)
        if module.startswith("numpy"):
            return f"numpy.{cls.__qualname__}"
        return f"{module}.{cls.__qualname__}"

    def _declare(self, cls: type) -> bool:
        """Declare a private class of the implementation (the type of an exported value)."""
        known = self.helpers.get(cls.__name__)
        if known is not None:
            return known is cls
        if any(isinstance(v, cls) for v in self.exported.values()):
            self.helpers[cls.__name__] = cls
            return True
        return False

    def _typing(self, name: str) -> str:
        self.typing_names.add(name)
        return name

    def _any(self) -> str:
        self.unnamed += 1
        return self._typing("Any")

    # -- signatures ---------------------------------------------------------------------
    def signature(self, name: str, fn: Any, kind: str = "function", indent: str = "") -> str:
        """``def name(...) -> R: ...`` of a function, method, static or class method."""
        target = inspect.unwrap(fn)
        try:
            sig = inspect.signature(target)
        except (TypeError, ValueError):
            return f"{indent}def {name}(*args: Any, **kwargs: Any) -> Any: ...\n"
        hints = _hints(target, self.exported)
        params, seen_kw_only, previous = [], False, None
        for index, param in enumerate(sig.parameters.values()):
            if previous is inspect.Parameter.POSITIONAL_ONLY and param.kind not in (
                inspect.Parameter.POSITIONAL_ONLY,
            ):
                params.append("/")
            if param.kind is inspect.Parameter.KEYWORD_ONLY and not seen_kw_only:
                params.append("*")
                seen_kw_only = True
            text = param.name
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                text, seen_kw_only = "*" + text, True
            elif param.kind is inspect.Parameter.VAR_KEYWORD:
                text = "**" + text
            bound = (
                index == 0
                and kind in ("method", "classmethod")
                and param.kind
                in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            )
            if not bound:
                annotation = hints.get(param.name, _MISSING)
                text += ": " + (
                    self._typing("Any") if annotation is _MISSING else self.type_name(annotation)
                )
            if param.default is not inspect.Parameter.empty:
                text += " = ..."
            params.append(text)
            previous = param.kind
        if previous is inspect.Parameter.POSITIONAL_ONLY:
            params.append("/")
        ret = hints.get("return", _MISSING)
        if name == "__init__" and ret is _MISSING:
            ret = None
        returns = self._typing("Any") if ret is _MISSING else self.type_name(ret)
        decorator = {"staticmethod": "@staticmethod\n", "classmethod": "@classmethod\n"}
        head = indent + decorator[kind] if kind in decorator else ""
        return f"{head}{indent}def {name}({', '.join(params)}) -> {returns}: ...\n"


_MISSING = object()
_UNION_TYPE = getattr(types, "UnionType", typing.Union)  # ``X | Y`` (Python 3.10+)

# Methods of C types (numpy's, object's) that a class dict can hold: not the stub's to show.
_C_METHODS = (
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.BuiltinFunctionType,
    types.ClassMethodDescriptorType,
)


class _SelfType:
    """Stands for ``Self`` (imported for type checking only) while annotations are read."""


_SELF = _SelfType()


def _hints(fn: Any, names: dict[str, Any]) -> dict[str, Any]:
    """The evaluated annotations of ``fn``; one that does not evaluate is left out.

    A name the function's module imports only for type checking is looked up among
    ``names`` (the exported ones: ``Comm``, ``Group``, ...); ``Self`` is itself.
    """
    try:
        return typing.get_type_hints(fn)
    except Exception:  # a name only imported for type checking
        pass
    namespace = {**names, **getattr(fn, "__globals__", {}), "Self": _SELF}
    hints = {}
    for key, text in getattr(fn, "__annotations__", {}).items():
        try:
            hints[key] = eval(text, namespace) if isinstance(text, str) else text
        except Exception:  # written as Any
            continue
    return hints


# --- classes ---------------------------------------------------------------------------------


def _class(writer: _Writer, name: str, cls: type, subclasses: list[type]) -> str:
    """``class name(bases): members`` of an implementation class.

    Members that every one of two or more exported ``subclasses`` defines are shown
    on the class too (``Comm.Bcast``: each communicator kind implements it, as mpi4py
    declares it on ``Comm``).
    """
    bases = _stub_bases(writer, cls)
    sources = _member_sources(writer, cls, bases)
    writer.own = {id(k): name for k in sources}
    lines = [f"class {name}({', '.join(writer.type_name(b) for b in bases)}):\n" if bases
             else f"class {name}:\n"]  # fmt: skip
    members = _members(writer, cls)
    for attr, (owner, value) in members.items():
        text = _member(writer, owner, attr, value)
        if _changes_kind(bases, attr, value):  # Grequest.Start, a class method
            text = text.rstrip("\n") + "  # type: ignore[override]\n"
        lines.append(text)
    seen = set(members)
    for attr, annotation in _class_annotations(sources).items():
        if attr not in seen and not attr.startswith("_"):
            seen.add(attr)
            lines.append(f"    {attr}: {writer.type_name(annotation)}\n")
    for attr, value in _instance_attributes(writer, cls).items():
        if attr not in seen:
            seen.add(attr)
            lines.append(f"    {attr}: {writer.type_name(type(value))}\n")
    if len(subclasses) >= 2:
        each = [_members(writer, k) for k in subclasses]
        for attr, (owner, value) in each[0].items():
            public = not attr.startswith("_") and inspect.isfunction(value)
            everywhere = all(
                attr in other and inspect.isfunction(other[attr][1]) for other in each[1:]
            )
            if attr not in seen and public and everywhere:
                seen.add(attr)
                lines.append(_member(writer, owner, attr, value))
    if issubclass(cls, _ndarray()) and "__buffer__" not in seen:
        lines.append("    def __buffer__(self, flags: int, /) -> memoryview: ...\n")
    writer.own = {}
    if len(lines) == 1:
        lines.append("    ...\n")
    return "".join(lines)


def _changes_kind(bases: list[type], attr: str, value: Any) -> bool:
    """Whether ``value`` overrides a base's method by a method of another kind."""
    for base in bases:
        if not base.__module__.startswith("ipympi"):
            continue
        inherited = inspect.getattr_static(base, attr, None)
        if inherited is not None and not attr.startswith("__"):
            return type(inherited) is not type(value)
    return False


def _ndarray() -> type:
    import numpy  # only to recognise array subclasses

    return numpy.ndarray


def _members(writer: _Writer, cls: type) -> dict[str, tuple[type, Any]]:
    """The members the stub shows on ``cls``: name -> (defining class, value)."""
    found: dict[str, tuple[type, Any]] = {}
    for owner in _member_sources(writer, cls, _stub_bases(writer, cls)):
        for attr, value in list(vars(owner).items()):
            if attr in found or not (attr in DUNDERS or not attr.startswith("_")):
                continue
            if inspect.getattr_static(cls, attr) is not value or isinstance(value, _C_METHODS):
                continue  # overridden further down the MRO, or a C type's
            found[attr] = (owner, value)
    return found


def _descendants(cls: type) -> list[type]:
    """Every subclass of ``cls``, nearest first."""
    found: list[type] = []
    todo = list(cls.__subclasses__())
    while todo:
        klass = todo.pop(0)
        if klass not in found:
            found.append(klass)
            todo += klass.__subclasses__()
    return found


def _instance_attributes(writer: _Writer, cls: type) -> dict[str, Any]:
    """The public attributes that an exported instance of ``cls`` holds itself."""
    for value in writer.exported.values():
        if type(value) is cls and hasattr(value, "__dict__"):
            return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return {}


def _stub_bases(writer: _Writer, cls: type) -> list[type]:
    """The nearest exported (or outside) classes among ``cls``'s ancestors."""
    found: list[type] = []
    for ancestor in cls.__mro__[1:]:
        if ancestor is object or ancestor is typing.Generic:
            continue
        outside = not ancestor.__module__.startswith("ipympi")
        shown = id(ancestor) in writer.public_types or outside
        if shown and not any(issubclass(f, ancestor) for f in found):
            found.append(ancestor)
    return found


def _member_sources(writer: _Writer, cls: type, bases: list[type]) -> list[type]:
    """``cls`` and its private ancestors (mixins) whose members it shows as its own."""
    return [
        k
        for k in cls.__mro__
        if k is cls
        or (
            k.__module__.startswith("ipympi")
            and id(k) not in writer.public_types
            and not any(issubclass(b, k) for b in bases)
        )
    ]


def _class_annotations(sources: list[type]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for klass in reversed(sources):
        try:
            merged.update(typing.get_type_hints(klass))
        except Exception:  # a name only imported for type checking
            continue
    return merged


def _member(writer: _Writer, owner: type, attr: str, value: Any) -> str:
    if attr == "__new__":
        return writer.signature(attr, getattr(value, "__func__", value), "method", "    ")
    if attr == "__hash__" and value is None:
        return f"    __hash__: {writer._typing('ClassVar')}[None]  # type: ignore[assignment]\n"
    if isinstance(value, staticmethod):
        return writer.signature(attr, value.__func__, "staticmethod", "    ")
    if isinstance(value, classmethod):
        return writer.signature(attr, value.__func__, "classmethod", "    ")
    if isinstance(value, property):
        text = "    @property\n" + writer.signature(attr, value.fget, "method", "    ")
        if value.fset is not None:
            setter = writer.signature(attr, value.fset, "method", "    ")
            text += f"    @{attr}.setter\n{setter}"
        return text
    if inspect.isfunction(value):
        return writer.signature(attr, value, "method", "    ")
    if callable(value) and hasattr(value, "__wrapped__"):
        return writer.signature(attr, value, "method", "    ")
    if isinstance(value, types.MemberDescriptorType):
        hints = typing.get_type_hints(owner) if hasattr(owner, "__annotations__") else {}
        return f"    {attr}: {writer.type_name(hints.get(attr, Any))}\n"
    return f"    {attr}: {writer.type_name(type(value))}\n"


# --- the module ---------------------------------------------------------------------------


def generate() -> str:
    """The text of ``MPI.pyi`` for the ``ipympi.MPI`` importable now."""
    from . import MPI  # the module this script describes

    names = sorted(set(MPI.__all__))
    exported = {name: getattr(MPI, name) for name in names}
    writer = _Writer(MPI, exported)
    constants, functions, classes, aliases = [], [], [], []
    for name, value in exported.items():
        if isinstance(value, type) and writer.public_types[id(value)] != name:
            aliases.append(f"{name} = {writer.public_types[id(value)]}\n")
        elif isinstance(value, type):
            subclasses = [
                k
                for k in _descendants(value)
                if id(k) in writer.public_types and value in _stub_bases(writer, k)
            ]
            classes.append(_class(writer, name, value, subclasses))
        elif inspect.isroutine(value) or (callable(value) and hasattr(value, "__wrapped__")):
            functions.append(writer.signature(name, value))
        else:
            constants.append(f"{name}: {writer.type_name(type(value))}\n")
    for name in PRIVATE:
        value = getattr(MPI, name, None)
        if value is None:
            continue
        if callable(value):
            functions.append(writer.signature(name, value))
        else:
            constants.append(f"{name}: {writer.type_name(type(value))}\n")
    helpers = []
    done: set[str] = set()
    while set(writer.helpers) - done:  # declaring one may name another
        for name in sorted(set(writer.helpers) - done):
            done.add(name)
            helpers.append(_class(writer, name, writer.helpers[name], []))
    head = [_HEADER, "\n"]
    stdlib = getattr(sys, "stdlib_module_names", {"builtins", "collections", "typing"})
    plain = sorted(m for m in writer.imports if m.split(".")[0] in stdlib)
    head += [f"import {module}\n" for module in plain]
    if writer.typing_names:
        head.append(f"from typing import {', '.join(sorted(writer.typing_names))}\n")
    third = [f"import {module}\n" for module in sorted(set(writer.imports) - set(plain))]
    if writer.extensions:
        third.append(f"from typing_extensions import {', '.join(sorted(writer.extensions))}\n")
    if third:
        head += ["\n", *third]
    listed = "".join(f'    "{name}",\n' for name in names)
    body = ["\n", f"__all__ = [\n{listed}]\n\n", *constants, "\n", *functions]
    for text in [*classes, *helpers]:
        body += ["\n", text]
    if aliases:
        body += ["\n", *aliases]
    return "".join(head + body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ipympi._stubgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if MPI.pyi is stale")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        current = STUB.read_text(encoding="utf-8") if STUB.exists() else ""
        if current != text:
            print(f"{STUB.name} is out of date: run python -m ipympi._stubgen", file=sys.stderr)
            return 1
        return 0
    STUB.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
