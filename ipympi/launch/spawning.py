"""The launcher's side of ``Comm.Spawn``: check a ``spawn`` request's programs, then start them.

A rank's ``spawn`` control message (:mod:`ipympi.core.control`) lists programs (``apps``),
each with its arguments, its number of processes and its info keys. :func:`plan_apps`
checks every program before any starts, so that a request that cannot be met starts
nothing: the command must be found (a path, absolute or relative to ``wdir``, or a name
looked up in the ``path`` info key's folders, then in ``PATH``) and be an executable
file, ``wdir`` an existing folder, ``host`` this host. The job (``launcher.Job``)
then starts the processes at the next free process indexes, with the environment of
its ranks plus what makes them a world of their own with parents
(:func:`child_environment`), and answers with a ``spawned`` message: their indexes and
one error code per process (``SUCCESS``, or ``ERR_SPAWN`` for every process when the
request is refused, with the reason in ``error``).
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core import control as ctl
from ..core.errors import ERR_SPAWN, SUCCESS

__all__ = [
    "Refused",
    "Start",
    "child_environment",
    "plan_apps",
    "refusal",
    "start_each",
    "this_host",
]


class Refused(Exception):
    """A spawn request that cannot be met (the text says why)."""


@dataclass
class Start:
    """One program to start: its command line, working directory, extra environment,
    how many processes and its number (``APPNUM``)."""

    argv: list[str]
    cwd: str | None
    env: dict[str, str]
    count: int
    appnum: int


def this_host(name: str) -> bool:
    """Whether the ``host`` info value ``name`` names this machine."""
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()}
    return name.strip() in names or name.strip().split(".")[0] == socket.gethostname()


def _resolve(command: str, cwd: str | None, path: str | None, env: Mapping[str, str]) -> str:
    if os.sep in command:
        full = command if os.path.isabs(command) else os.path.join(cwd or os.getcwd(), command)
        if not os.path.exists(full):
            raise Refused(f"command {command!r} does not exist")
        if os.path.isdir(full) or not os.access(full, os.X_OK):
            raise Refused(f"command {command!r} is not an executable file")
        return command
    folders = [f for f in (path or "").split(os.pathsep) if f]
    folders += [f for f in env.get("PATH", os.defpath).split(os.pathsep) if f]
    found = shutil.which(command, path=os.pathsep.join(folders))
    if found is None:
        raise Refused(f"command {command!r} not found")
    return found


def _extra_env(text: str) -> dict[str, str]:
    """The ``env`` info key: lines ``NAME=value``."""
    pairs = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise Refused(f"env line {line!r} is not NAME=value")
        pairs[name.strip()] = value
    return pairs


def plan_apps(apps: Any, env: Mapping[str, str]) -> list[Start]:
    """The programs of a ``spawn`` request, checked; :class:`Refused` if one cannot start."""
    if not isinstance(apps, list) or not apps:
        raise Refused("the request names no program")
    starts = []
    for appnum, app in enumerate(apps):
        if not isinstance(app, dict):
            raise Refused(f"program {appnum} is not described by an object")
        argv, count = app.get("argv"), app.get("maxprocs")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise Refused(f"program {appnum} has no command line")
        if not isinstance(count, int) or count < 1:
            raise Refused(f"program {appnum}: maxprocs {count!r} is not a positive number")
        host = app.get("host")
        if host and not this_host(str(host)):
            raise Refused(f"host {host!r} is not this host ({socket.gethostname()})")
        cwd = app.get("wdir") or None
        if cwd is not None and (not isinstance(cwd, str) or not os.path.isdir(cwd)):
            raise Refused(f"wdir {cwd!r} is not a folder")
        command = _resolve(argv[0], cwd, app.get("path"), env)
        extra = _extra_env(str(app.get("env") or ""))
        starts.append(Start([command, *argv[1:]], cwd, extra, count, appnum))
    return starts


def child_environment(
    base: Mapping[str, str],
    start: Start,
    first: int,
    size: int,
    msg: Mapping[str, Any],
) -> dict[str, str]:
    """What a spawned process adds to its rank environment ``base``: the index of its
    world's first rank, its parents, ``APPNUM`` and the program's ``env`` info."""
    env = dict(base)
    env.update(start.env)
    env[ctl.ENV_WORLD_BASE] = str(first)
    env[ctl.ENV_SIZE] = str(size)
    env[ctl.ENV_APPNUM] = str(start.appnum)
    parents = [int(p) for p in msg["parents"]]  # checked by the job (Job._on_spawn)
    env[ctl.ENV_PARENT] = ctl.encode_parent(int(msg["context"]), int(msg["base"]), parents)
    return env


def start_each(
    msg: Mapping[str, Any],
    starts: list[Start],
    first: int,
    environment: Callable[[int, int], Mapping[str, str]],
    launch: Callable[[int, Start, dict[str, str]], None],
    undo: Callable[[], None],
) -> list[int]:
    """Start every process of ``starts`` at the indexes from ``first``; their indexes.

    ``environment(index, size)`` is the environment a rank at ``index`` of a world of
    ``size`` gets (completed here by :func:`child_environment`); ``launch(index, start,
    env)`` starts one process. When a command cannot be executed, ``undo()`` ends what
    this request started and the request is refused.
    """
    size = sum(start.count for start in starts)
    index = first
    try:
        for start in starts:
            for _ in range(start.count):
                env = child_environment(environment(index, size), start, first, size, msg)
                launch(index, start, env)
                index += 1
    except OSError as exc:  # exec failed: end what this request started, quietly
        undo()
        raise Refused(f"cannot run {exc.filename or 'the command'!r}: {exc.strerror}") from None
    return list(range(first, index))


def refusal(msg: Mapping[str, Any], why: str) -> dict[str, Any]:
    """The ``spawned`` answer refusing ``msg``: ``ERR_SPAWN`` for each process asked for."""
    total = sum(
        int(app.get("maxprocs") or 0) for app in msg.get("apps") or [] if isinstance(app, dict)
    )
    return {
        "type": ctl.SPAWNED,
        "id": msg["id"],
        "ranks": [],
        "errcodes": [ERR_SPAWN] * max(total, 0),
        "error": why,
    }


def accepted(msg: Mapping[str, Any], ranks: list[int]) -> dict[str, Any]:
    """The ``spawned`` answer for processes started as ``ranks``."""
    return {
        "type": ctl.SPAWNED,
        "id": msg["id"],
        "ranks": ranks,
        "errcodes": [SUCCESS] * len(ranks),
    }
