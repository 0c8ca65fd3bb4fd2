"""The types a checker sees of ``ipympi.MPI``: the generated stub is current, and mypy reads it.

``ipympi/MPI.pyi`` is written by ``python -m ipympi._stubgen`` from the live module; the
first test regenerates it and fails when the committed file differs (a new class or
method, a changed annotation). The others run mypy on small programs in
``tests/typing/``: a typed program must check clean (its ``assert_type`` calls pin
``COMM_WORLD`` to ``Intracomm``, ``SUM`` to ``Op``, ...), the same through the
``mpi4py`` name of the ranks, and a program of mistakes must get exactly its errors.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ipympi import _stubgen

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = Path(__file__).resolve().parent / "typing"
SITE = ROOT / "ipympi" / "mpi4py" / "site"


@pytest.mark.skipif(
    sys.version_info < (3, 10), reason="annotations like X | Y evaluate from Python 3.10 on"
)
def test_stub_is_current() -> None:
    committed = _stubgen.STUB.read_text(encoding="utf-8")
    assert committed == _stubgen.generate(), "ipympi/MPI.pyi is stale: python -m ipympi._stubgen"


def test_stub_and_marker_are_installed() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    package_data = text[text.index("[tool.setuptools.package-data]") :]
    assert re.search(r'^ipympi = \[.*"py\.typed".*"MPI\.pyi".*\]', package_data, re.M)
    assert (ROOT / "ipympi" / "py.typed").is_file()


def test_stub_names_every_public_name() -> None:
    from ipympi import MPI

    stub = _stubgen.STUB.read_text(encoding="utf-8")
    declared = set(re.findall(r"^(?:class |def )?(\w+)", stub, re.M))
    missing = sorted(set(MPI.__all__) - declared)
    assert not missing, f"not in the stub: {missing}"


def _mypy(tmp_path: Path, *files: Path) -> list[str]:
    """mypy's error lines for ``files`` (the project's configuration, a private cache)."""
    env = {**os.environ, "MYPYPATH": str(SITE)}
    cmd = [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")]
    cmd += ["--no-error-summary", "--hide-error-context", "--show-error-codes"]
    proc = subprocess.run(
        [*cmd, *map(str, files)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=240
    )
    assert proc.returncode in (0, 1), proc.stderr + proc.stdout
    return [line for line in proc.stdout.splitlines() if ": error:" in line]


@pytest.mark.timeout(300)
def test_mypy_sees_the_real_types(tmp_path: Path) -> None:
    programs = [PROGRAMS / "user_program.py", PROGRAMS / "mpi4py_program.py"]
    errors_file = PROGRAMS / "user_errors.py"
    errors = _mypy(tmp_path, *programs, errors_file)
    clean = [line for line in errors if "user_errors.py" not in line]
    assert not clean, "\n".join(clean)
    expected = {}
    for number, line in enumerate(errors_file.read_text().splitlines(), start=1):
        if "# E: " in line:
            expected[number] = line.split("# E: ", 1)[1]
    found: dict[int, list[str]] = {}
    for line in errors:
        number = int(line.split(":")[1])
        found.setdefault(number, []).append(line)
    assert sorted(found) == sorted(expected), "\n".join(errors)
    for number, words in expected.items():
        assert any(words in line for line in found[number]), (words, found[number])


@pytest.mark.timeout(300)
def test_pyright_agrees(tmp_path: Path) -> None:
    """The same programs under basedpyright (a pyright from PyPI with its own Node.js),
    where it is installed: the typed ones clean, the mistakes each found."""
    exe = shutil.which("basedpyright")
    if exe is None:
        pytest.skip("basedpyright is not installed (pip install basedpyright)")
    files = [
        PROGRAMS / "user_program.py",
        PROGRAMS / "mpi4py_program.py",
        PROGRAMS / "user_errors.py",
    ]
    proc = subprocess.run(
        [exe, "--level", "error", *map(str, files)],
        capture_output=True, text=True, cwd=ROOT, timeout=240,
    )  # fmt: skip
    errors = [line for line in proc.stdout.splitlines() if " - error: " in line]
    lines = sorted({int(line.split(":")[1]) for line in errors if "user_errors.py" in line})
    others = [line for line in errors if "user_errors.py" not in line]
    assert not others, proc.stdout
    expected = [n for n, text in enumerate(files[2].read_text().splitlines(), 1) if "# E: " in text]
    assert lines == expected, proc.stdout


def test_typed_program_runs(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ipympi.run", "-n", "2", "--timeout", "30",
         str(PROGRAMS / "user_program.py")],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "typed program ran on 2 ranks" in proc.stdout
