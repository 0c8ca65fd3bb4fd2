"""Shared fixtures: run real MPI programs on N ranks through the launcher."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    for key in [k for k in env if k.startswith("IPYMPI_")]:
        del env[key]
    return env


RunMPI = Callable[..., subprocess.CompletedProcess]


@pytest.fixture
def run_mpi(tmp_path: Path) -> RunMPI:
    """``run_mpi(n, source, *args, timeout=30, launcher_args=())`` runs ``source`` on n ranks.

    The program text is dedented and written to a file; the launcher's own
    ``--timeout`` ends a hung job with a report well before the test's timeout.
    Returns the completed process (stdout/stderr as text).
    """
    counter = iter(range(1000))

    def run(
        n: int,
        source: str,
        *args: str,
        timeout: float = 30,
        launcher_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        path = tmp_path / f"prog{next(counter)}.py"
        path.write_text(textwrap.dedent(source))
        cmd = [
            sys.executable,
            "-m",
            "ipympi.run",
            "-n",
            str(n),
            "--timeout",
            str(timeout),
            *launcher_args,
            str(path),
            *args,
        ]
        full_env = _env()
        if env:
            full_env.update(env)
        return subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout + 15,
            env=full_env,
            cwd=str(tmp_path),
        )

    return run


def assert_ok(proc: subprocess.CompletedProcess, n: int | None = None) -> None:
    """The job exited 0 and, if ``n`` is given, every rank printed ``OK <rank>``."""
    detail = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, detail
    if n is not None:
        oks = sorted(
            int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("OK ")
        )
        assert oks == list(range(n)), detail
