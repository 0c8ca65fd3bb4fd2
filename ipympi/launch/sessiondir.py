"""Session directories: private, marked with their owner, removed at every end, reaped when stale.

Every job, session and world of ipympi keeps its ipc sockets in a directory
``ipympi-XXXXXXXX`` made by :func:`make_session_dir` in the temporary folder
(``TMPDIR``). Such a directory must not outlive the process that made it:

- an ordinary end (the job's or session's ``close``, an exception, ``atexit``)
  calls :func:`remove_session_dir`;
- SIGTERM and SIGHUP, whose default action ends a process without ``atexit``,
  first remove every directory the process made (:func:`remove_on_signals`),
  then do what they did before;
- SIGKILL cannot be caught: the next :func:`make_session_dir` in the same
  folder reaps the directories whose owner is gone (:func:`reap_stale`).

The owner is written into the directory (file ``owner``: pid, the process's
start time in clock ticks since boot and the pid namespace), so that a
recycled pid does not keep a stale directory alive. A directory is reaped only
when all of these hold: it belongs to this user, its owner file can be read,
its owner lived in this pid namespace, and no process with that pid and start
time exists. A directory of another user, of a process in another container,
of an older version (no owner file) or in the making is never touched.

A world on a real MPI (MPICH) maps shared-memory files ``/dev/shm/mpich_shm_*``
that MPICH removes only in ``MPI_Finalize``; a rank killed before that leaves
them. Each rank notes the ones it maps, with their inode, in its world's
directory (:func:`note_shared_memory`); removing or reaping the directory
removes exactly those files, and only while they are still the same inode.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
from typing import Any

from ..progress.shm import noted

__all__ = [
    "PREFIX",
    "make_session_dir",
    "note_shared_memory",
    "reap_stale",
    "remove_on_signals",
    "remove_session_dir",
]

PREFIX = "ipympi-"
OWNER_FILE = "owner"
SHM_NOTE = "shm-"  # a rank's note of the shared-memory files it maps: shm-<rank>
SHM_DIR = "/dev/shm"
# what MPICH's shared-memory files are called, ipympi's boards (``progress.shmcoll``) and rings
# (``progress.shmring``)
SHM_PREFIXES = ("mpich_shm_", "ipympi-coll-", "ipympi-ring-")
_MAX_IPC_PATH = 100  # sun_path is 108 bytes on Linux, 104 on macOS

_made: set[str] = set()  # directories this process made and has not removed (a set
# operation is atomic, so a signal handler may read it at any time)
_previous: dict[int, Any] = {}  # signal -> the handler before remove_on_signals


def _forget_in_child() -> None:
    """A forked child owns none of its parent's directories."""
    _made.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


# -- the owner of a directory ----------------------------------------------------------
def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), None if unknown or gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def _owner_line(pid: int) -> str:
    return f"{pid} {_start_time(pid) or '-'} {_pid_namespace() or '-'}\n"


def _owner_gone(text: str) -> bool:
    """Whether the owner that ``text`` (an owner file) names is surely gone."""
    parts = text.split()
    if len(parts) != 3 or not parts[0].isdigit():
        return False
    pid, started, namespace = int(parts[0]), parts[1], parts[2]
    if namespace != (_pid_namespace() or "-"):
        return False  # another container's process: it cannot be seen from here
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    now = _start_time(pid)
    return started != "-" and now is not None and now != started  # the pid was reused


# -- making and removing ---------------------------------------------------------------
def make_session_dir() -> str:
    """A private (0700) directory short enough to hold ipc socket paths.

    Stale directories in the same folder are reaped first (see the module docstring).
    """
    parent = tempfile.gettempdir()
    if len(os.path.join(parent, PREFIX + "x" * 8)) + 8 > _MAX_IPC_PATH and os.path.isdir("/tmp"):
        parent = "/tmp"
    reap_stale(parent)
    path = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    os.chmod(path, 0o700)
    _made.add(path)
    with open(os.path.join(path, OWNER_FILE), "w") as owner:
        owner.write(_owner_line(os.getpid()))
    return path


def remove_session_dir(path: str | None) -> None:
    """Remove ``path`` with the shared-memory files its ranks noted (no error if gone)."""
    if path is None:
        return
    _remove_tree(path)
    _made.discard(path)


def _remove_tree(path: str) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            if name.startswith(SHM_NOTE):
                _remove_noted_shm(os.path.join(root, name))
    shutil.rmtree(path, ignore_errors=True)


def reap_stale(parent: str) -> list[str]:
    """Remove the ``ipympi-*`` directories in ``parent`` whose owner is gone; their paths."""
    reaped: list[str] = []
    uid = os.getuid() if hasattr(os, "getuid") else None
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return reaped
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if uid is not None and entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            with open(os.path.join(entry.path, OWNER_FILE)) as owner:
                text = owner.read()
        except OSError:
            continue
        if _owner_gone(text):
            _remove_tree(entry.path)
            reaped.append(entry.path)
    return reaped


# -- on signals --------------------------------------------------------------------------
def remove_on_signals(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)) -> None:
    """Remove this process's directories when one of ``signals`` comes, then carry on.

    The handler before this one runs next; where that was the default action
    (to end the process), the signal is delivered again with it. Call from the
    main thread; calling again changes nothing.
    """
    for signum in signals:
        if signum in _previous:
            continue
        _previous[signum] = signal.signal(signum, _on_signal)


def _on_signal(signum: int, frame: Any) -> None:
    for path in list(_made):
        remove_session_dir(path)
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        sys.stderr.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


# -- shared memory of a real MPI -----------------------------------------------------------
def note_shared_memory(directory: str, rank: int) -> list[str]:
    """Note in ``directory`` the MPI shared-memory files this process maps; their paths."""
    found: dict[str, str] = {}
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.readlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split(maxsplit=5)
        path = parts[5].strip() if len(parts) == 6 else ""
        name = os.path.basename(path)
        if os.path.dirname(path) != SHM_DIR or not name.startswith(SHM_PREFIXES):
            continue
        with contextlib.suppress(OSError):
            found[path] = noted(path)
    if found:
        note = os.path.join(directory, f"{SHM_NOTE}{rank}")
        with contextlib.suppress(OSError), open(note, "w") as out:
            out.writelines(found.values())
    return list(found)


def _remove_noted_shm(note: str) -> None:
    try:
        with open(note) as lines:
            entries = [line.split(maxsplit=2) for line in lines]
    except OSError:
        return
    for entry in entries:
        if len(entry) != 3:
            continue
        dev, ino, path = entry[0], entry[1], entry[2].strip()
        name = os.path.basename(path)
        if os.path.dirname(path) != SHM_DIR or not name.startswith(SHM_PREFIXES):
            continue
        with contextlib.suppress(OSError):
            st = os.stat(path)
            if (str(st.st_dev), str(st.st_ino)) == (dev, ino):
                os.unlink(path)
