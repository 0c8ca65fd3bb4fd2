"""What the launcher's command line needs before the job's machinery: names, statuses, a
rank's environment.

``python -m ipympi.run`` starts a job's rank template (:mod:`ipympi.launch.template`)
before it imports the launcher's event loop, pyzmq and the agents of several hosts, so
that the template's import of MPI and the launcher's own imports run side by side. What
both the early start and the launcher use lives here, importing nothing heavy: the
launcher's name, exit statuses and ways to start hosts' agents (in the command's help
and options), the environment of a job and of each rank, and the parent-death hook
every process the launcher starts gets.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from typing import Callable

from .. import mpi4py as mpi4py_name
from ..core import control as ctl

__all__ = [
    "DEADLOCK_STATUS",
    "LAUNCHERS",
    "PROG",
    "THREAD_VARS",
    "TIMEOUT_STATUS",
    "job_environment",
    "rank_environment",
]

PROG = "ipympi.run"
TIMEOUT_STATUS = 124  # like timeout(1)
# When no rank can progress: next to the timeout's 124, below the 126/127 of a
# program that cannot run and the 128+n of deaths by signal; mpiexec has none.
DEADLOCK_STATUS = 125
LAUNCHERS = ("auto", "local", "ssh", "srun")  # how a host's agent may be started
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_PR_SET_PDEATHSIG = 1


def job_environment(base: Mapping[str, str] | None) -> dict[str, str]:
    """The environment a job's ranks share: ``base`` (default: this process's), where
    ``import mpi4py`` gives ipympi unless that is switched off."""
    env = dict(os.environ if base is None else base)
    mpi4py_name.rank_environment(env)
    return env


def rank_environment(
    base: Mapping[str, str], rank: int, size: int, session_dir: str, key: str, cpus: int | None
) -> dict[str, str]:
    """The environment of ``rank``: ``base`` plus the ``IPYMPI_*`` variables.

    When ranks fill every core (``size >= cpus``), BLAS/OpenMP thread pools
    default to one thread, unless ``base`` sets them: oversubscribed pools make
    numpy-heavy jobs several times slower.
    """
    env = dict(base)
    env[ctl.ENV_RANK], env[ctl.ENV_SIZE] = str(rank), str(size)
    env[ctl.ENV_SESSION_DIR], env[ctl.ENV_CTL] = session_dir, ctl.control_address(session_dir)
    env[ctl.ENV_KEY], env["PYTHONUNBUFFERED"] = key, "1"
    if cpus is not None and size >= cpus:
        for var in THREAD_VARS:
            env.setdefault(var, "1")
    return env


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that SIGKILLs the child when its parent thread dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec
