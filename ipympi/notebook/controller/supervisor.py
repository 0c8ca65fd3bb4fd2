"""The controller's handle on the engine supervisor process.

A :class:`~ipympi.notebook.controller.cluster.Cluster` forks its engines through one
``python -m ipympi.notebook.engine`` process, the supervisor, because the threaded
controller kernel must not fork itself. :class:`SupervisorProcess` starts that
process with the session's environment, writes commands to its stdin, turns
what it writes to its stdout into event dicts, and stops it. The pipe
protocol (one JSON object per line: ``spawn``/``exit`` commands, ``ready``/
``spawned``/``exited`` events) is described in :mod:`ipympi.notebook.engine.supervisor`.

This class only manages the process and parses its pipe. What the events mean
for the engines and for the requests waiting on them is the cluster's
business: it polls :attr:`SupervisorProcess.fd` with its sockets and handles the
events :meth:`SupervisorProcess.read` returns.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from ...launch.jsonlines import JsonLinesProcess
from ...launch.launcher import THREAD_VARS, _die_with_parent

__all__ = ["SupervisorProcess", "engine_environment", "start_early", "take_early"]


def engine_environment(env: Mapping[str, str], ranks: int) -> dict[str, str]:
    """The environment of a world's engines: ``env`` with the engines' defaults.

    When the ranks fill every core, BLAS/OpenMP thread pools default to one
    thread (unless ``env`` sets them), as in
    :func:`ipympi.launch.launcher.rank_environment`; figures are drawn inline.
    """
    env = dict(env)
    cpus = os.cpu_count()
    if cpus is not None and ranks >= cpus:
        for var in THREAD_VARS:
            env.setdefault(var, "1")
    env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class SupervisorProcess(JsonLinesProcess):
    """One running ``python -m ipympi.notebook.engine`` process and its pipes.

    ``env`` is the session's environment; ``ranks`` is the size of the world
    it is started for (see :func:`engine_environment`). The process gets its
    own session, so the notebook's SIGINT reaches the ranks only through the
    controller, and on Linux it dies with the controller. ``argv`` starts it
    elsewhere (on another host, through ssh or srun: see
    :mod:`ipympi.notebook.controller.hosts`), where the engines' environment comes with
    each ``spawn``; what such a supervisor (or its ssh) says on stderr is kept.
    """

    def __init__(
        self, env: Mapping[str, str], ranks: int, argv: Sequence[str] | None = None
    ) -> None:
        super().__init__(
            [sys.executable, "-m", "ipympi.notebook.engine"] if argv is None else argv,
            engine_environment(env, ranks) if argv is None else env,
            capture_stderr=argv is not None,
            preexec=_die_with_parent(),
        )


# A supervisor started before the session that will use it (see start_early),
# with the engines' environment it was started with.
_early: tuple[dict[str, str], SupervisorProcess] | None = None


def start_early(env: Mapping[str, str], ranks: int) -> None:
    """Start a supervisor now, for a session of ``ranks`` ranks about to be made.

    The ``ipympi`` kernel calls this before its own imports, so that the
    supervisor imports IPython and numpy while the kernel imports ipykernel:
    on two cores the session is ready about a third of a second sooner.
    """
    global _early
    if _early is None:
        _early = (engine_environment(env, ranks), SupervisorProcess(env, ranks))


def take_early(
    env: Mapping[str, str], ranks: int
) -> tuple[SupervisorProcess, dict[str, str]] | None:
    """The supervisor :func:`start_early` started, if it suits a session of ``ranks``
    ranks with ``env`` and still runs, with the variables its engines must get on
    top of its own environment (the kernel sets some, e.g. ``PAGER``, after the
    early start); else None, and one that does not suit is stopped."""
    global _early
    early, _early = _early, None
    if early is None:
        return None
    had, process = early
    wanted = engine_environment(env, ranks)
    if process.alive and set(had) <= set(wanted):
        return process, {name: value for name, value in wanted.items() if had.get(name) != value}
    process.stop(0.5)
    return None
