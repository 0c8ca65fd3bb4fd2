"""The example programs run as the README says and print what they promise."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, _env


@pytest.mark.parametrize("n", [1, 2, 4])
def test_hello_ring(n: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ipympi.run", "-n", str(n), "--timeout", "30", "examples/hello.py"],
        capture_output=True,
        text=True,
        timeout=45,
        cwd=str(ROOT),
        env=_env(),
    )
    assert proc.returncode == 0, proc.stderr
    hellos = sorted(line for line in proc.stdout.splitlines() if line.startswith("hello"))
    assert [line.split()[3] for line in hellos] == [str(r) for r in range(n)]
    assert all(f"of {n} on" in line for line in hellos)
    if n > 1:
        assert f"the token went around the ring: {list(range(n))} (count {n - 1})" in proc.stdout
