"""``MPIPoolExecutor`` from a stock IPython kernel: functions and classes defined in cells
are tasks, a task's error shows its worker's traceback, and the workers end with the pool.

mpi4py pickles a task's function by reference, which the workers cannot resolve for
what a notebook defines; ipympi sends it by value (``ipympi.mpi.byvalue``). The kernel
is ipykernel's own (``python3``), with no MPI session: the kernel process is a world of
one that spawns the workers.
"""

from __future__ import annotations

import pytest
from conftest import wait_gone
from kernel_helpers import KernelSession, cmdline, descendants, error_text, kernel_env, stream_text

pytestmark = pytest.mark.timeout(120)

DEFINITIONS = '''
import numpy as np

SCALE = 3

def helper(x):
    return x * SCALE

def task(n):
    return int(np.sum(helper(np.arange(n))))

def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)

class Point:
    """A point on a line."""

    def __init__(self, x):
        self.x = x

    def norm(self):
        return abs(self.x)

    @staticmethod
    def origin():
        return Point(0)

def boom(x):
    raise ValueError(f"bad {x}")
'''

USE = """
from ipympi.mpi4py.futures import MPIPoolExecutor
with MPIPoolExecutor(4) as ex:
    print(list(ex.map(task, range(5))))
    print(list(ex.map(fact, [5, 6], chunksize=2)))
    print(list(ex.map(Point.norm, [Point(-2), Point(3)])))
    print(ex.submit(lambda p: p.norm() * 10, Point(-4)).result())
    print(ex.submit(lambda: Point.origin().x + SCALE).result())
    print(type(ex.submit(Point, 5).result()).__name__)
"""

FAIL = """
with MPIPoolExecutor(2) as ex:
    ex.submit(boom, 7).result()
"""


def test_a_stock_kernel_maps_cell_functions_over_spawned_workers() -> None:
    with KernelSession("python3", kernel_env()) as kernel:
        kernel.ok(DEFINITIONS)
        out = stream_text(kernel.ok(USE, timeout=90))
        assert out.splitlines() == [
            "[0, 0, 3, 9, 18]",
            "[120, 720]",
            "[2, 3]",
            "40",
            "3",
            "Point",
        ], out
        reply, messages = kernel.execute(FAIL, timeout=90)
        assert reply["content"]["status"] == "error"
        [error] = [m for m in messages if m["msg_type"] == "error"]
        assert error["content"]["ename"] == "ValueError"
        assert error["content"]["evalue"] == "bad 7"
        text = "\n".join(error_text(error))
        assert "Worker 0 of 2" in text or "Worker 1 of 2" in text, text
        assert 'raise ValueError(f"bad {x}")' in text, text  # the cell's line, in the worker

        # The pools' workers end with the pools; the kernel keeps the supervisor it
        # became a job with (and its process template) for the next pool, until it ends.
        def workers() -> list[int]:
            return [
                p for p in descendants(kernel.pid)
                if not any(m in cmdline(p) for m in ("launch.supervisor", "launch.template"))
            ]  # fmt: skip

        assert wait_gone(workers(), 20) == [], [cmdline(p) for p in workers()]
        kept = descendants(kernel.pid)
        assert kept, "no supervisor"
    assert wait_gone(kept, 20) == [], [cmdline(p) for p in kept]
