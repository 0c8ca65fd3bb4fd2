"""The point-to-point, thread and deadlock-report tests again, over shared rings.

Ranks make a ring to a peer only after many frames to it (``progress.shmring``), so
most tests run on datagrams alone. Here every test of those modules runs again with a
ring from the first frame (``IPYMPI_SHM_P2P_AFTER=1``): matching order, probes,
cancels, the send modes, progress while a rank computes, errors, several threads in
MPI at once, and the reports of a deadlock behave the same on both ways.
"""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest
import test_launcher_deadlock
import test_p2p_blocking
import test_p2p_errors
import test_p2p_modes
import test_p2p_nonblocking
import test_p2p_probe
import test_p2p_progress
import test_threads
from test_p2p_ring import run_mpi  # noqa: F401  (the fixture: a ring from the first frame)

from ipympi.progress.shm import total_store_order

pytestmark = pytest.mark.skipif(not total_store_order(), reason="rings need Linux on x86-64")

MODULES: tuple[ModuleType, ...] = (
    test_p2p_blocking,
    test_p2p_errors,
    test_p2p_modes,
    test_p2p_nonblocking,
    test_p2p_probe,
    test_p2p_progress,
    test_threads,
    test_launcher_deadlock,
)


def _collect() -> None:
    """Each module's tests that start jobs (``run_mpi``, which this module's fixture
    gives the rings) here, named after their module."""
    for module in MODULES:
        short = module.__name__.removeprefix("test_")
        for name, test in vars(module).items():
            if name.startswith("test_") and "run_mpi" in inspect.signature(test).parameters:
                globals()[f"{name}__{short}"] = test


_collect()
