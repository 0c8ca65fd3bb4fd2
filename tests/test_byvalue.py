"""Functions and classes of a notebook sent with what they read (``byvalue.dumps(capture=True)``),
as ``MPIPoolExecutor`` sends them from a notebook; no processes."""

from __future__ import annotations

import builtins
import linecache
import pickle
import traceback

import pytest

from ipympi.mpi import byvalue

CELL = '''
import math

SCALE = 3

def helper(x):
    return x * SCALE

def task(n):
    return sum(helper(i) for i in range(n)) + int(math.sqrt(16))

def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)

class Point:
    """A point."""
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x

    def norm(self):
        return abs(self.x)

    @classmethod
    def at(cls, x):
        return cls(x)

    @property
    def double(self):
        return 2 * self.x

def boom():
    raise ValueError("bad")
'''


def notebook() -> dict:
    """A notebook's namespace: what a cell defined, as ``__main__``'s."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    filename = "<notebook cell>"
    linecache.cache[filename] = (len(CELL), None, CELL.splitlines(True), filename)
    exec(compile(CELL, filename, "exec"), namespace)
    return namespace


def elsewhere(data: bytes) -> tuple[object, dict]:
    """Unpickle where nothing of the notebook exists; the namespace it filled."""
    linecache.cache.pop("<notebook cell>", None)
    namespace = {"__builtins__": builtins, "__name__": "__main__"}
    return byvalue.loads(data, namespace), namespace


def test_functions_take_the_globals_they_read_and_modules_go_by_name() -> None:
    nb = notebook()
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        byvalue.dumps(nb["Point"])  # without capture, a class of __main__ goes by name
    (task, fact), namespace = elsewhere(byvalue.dumps((nb["task"], nb["fact"]), capture=True))
    assert task(3) == 3 * (0 + 1 + 2) + 4
    assert fact(6) == 720  # a recursive function finds itself
    assert namespace["SCALE"] == 3 and namespace["math"].__name__ == "math"


def test_classes_with_slots_methods_classmethods_and_properties() -> None:
    nb = notebook()
    (cls, point), namespace = elsewhere(byvalue.dumps((nb["Point"], nb["Point"](-5)), capture=True))
    assert cls.__name__ == "Point" and cls.__doc__ == "A point." and namespace["Point"] is cls
    assert isinstance(point, cls) and point.norm() == 5 and point.double == -10
    assert cls.at(7).x == 7 and cls.__slots__ == ("x",)
    with pytest.raises(AttributeError):
        point.y = 1  # the slots are real slots


def test_a_traceback_where_it_runs_shows_the_cell_s_line() -> None:
    nb = notebook()
    boom, _ = elsewhere(byvalue.dumps(nb["boom"], capture=True))
    try:
        boom()
    except ValueError as exc:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert 'raise ValueError("bad")' in text, text
