"""CI's runs on the oldest and the newest Python: a part of the tests, in a virtualenv of its own.

``python .ci/pythons.py oldest`` runs :data:`TESTS` on the oldest Python that
``requires-python`` in pyproject.toml allows, with every runtime dependency at
the lowest version its ``>=`` bound there allows (the bounds are read from
pyproject.toml and handed to pip as ``==`` constraints, so a floor that cannot
be installed or does not work fails here). ``python .ci/pythons.py newest``
runs them on the newest CPython found on the machine, with the newest
versions pip finds. A Python that cannot be found is a failure, said as such.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent

# The tests both runs take: the kernel driven by jupyter_client, the launcher,
# point-to-point, collectives, and the first three example notebooks executed by
# nbclient (the others take a minute and more each on a 2-core machine).
_NOTEBOOKS = ["01_hello_ranks", "02_point_to_point", "03_collectives_step_by_step"]
TESTS = [
    "tests/test_kernel.py",
    "tests/test_launcher.py",
    "tests/test_p2p_blocking.py",
    "tests/test_cco_objects.py",
    *(f"tests/test_notebooks.py::test_example_notebook_runs[{n}.ipynb]" for n in _NOTEBOOKS),
    "tests/test_notebooks.py::test_hello_notebook_shows_labelled_output",
    "tests/test_notebooks.py::test_point_to_point_notebook_reports_its_deadlock",
    "tests/test_notebooks.py::test_collectives_notebook_explains_and_traces",
]

RUN_TIMEOUT = 600  # seconds for the tests of one run


def say(text: str) -> None:
    print(f"ci: {text}", flush=True)


def project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def floors(dependencies: list[str]) -> list[str]:
    """``name==X`` for each ``name>=X`` dependency; every one must have such a bound."""
    pins = []
    for dep in dependencies:
        found = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9.]*)\s*(,.*)?", dep)
        if found is None:
            raise SystemExit(f"ci: dependency {dep!r} states no lower bound (name>=X)")
        pins.append(f"{found[1]}=={found[2]}")
    return pins


def version_of(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.split()
    return int(major), int(minor)


def interpreters() -> dict[tuple[int, int], str]:
    """The CPython 3 interpreters on this machine: on PATH, and pyenv's (whose
    ``pythonX.Y`` shims only work for the selected version)."""
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = sorted(glob.glob(os.path.join(pyenv, "versions", "3.*", "bin", "python3.*")))
    for minor in range(6, 30):
        found = shutil.which(f"python3.{minor}")
        if found:
            candidates.append(found)
    found_by_version: dict[tuple[int, int], str] = {}
    for path in candidates:
        if not re.search(r"python3\.\d+$", path):
            continue
        version = version_of(path)
        if version is not None and version not in found_by_version:
            found_by_version[version] = path
    return found_by_version


def installer() -> str | None:
    """uv, installed beside this interpreter: it installs a virtualenv in well under a
    minute where pip, which looks packages up one by one, takes several. None: use pip."""
    found = shutil.which("uv", path=os.path.dirname(sys.executable))
    if found is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "uv"], check=False)
        found = shutil.which("uv", path=os.path.dirname(sys.executable))
    if found is None:
        say("uv could not be installed; installing with pip (slower)")
    return found


def run(*cmd: str, **kwargs: object) -> None:
    subprocess.run(cmd, check=True, cwd=ROOT, **kwargs)  # type: ignore[call-overload]


def main(which: str) -> int:
    meta = project()
    lowest = re.fullmatch(r"\s*>=\s*3\.(\d+)\s*", meta["requires-python"])
    if lowest is None:
        raise SystemExit(f"ci: requires-python {meta['requires-python']!r} is not '>=3.N'")
    minimum = (3, int(lowest[1]))
    found = interpreters()
    if which == "oldest":
        version = minimum
        label = "the oldest dependency versions pyproject.toml allows"
    else:
        version = max((v for v in found if v >= minimum), default=minimum)
        label = "the newest dependency versions"
    name = f"Python {version[0]}.{version[1]}"
    python = found.get(version)
    if python is None:
        say(f"FAILED: no {name} on this machine, so the {which}-Python tests cannot run")
        return 1
    start = time.monotonic()
    say(f"{name} ({python}) with {label}")
    venv = ROOT / ".venvs" / f"py{version[0]}.{version[1]}-{which}"
    vpython = str(venv / "bin" / "python")
    # As if the virtualenv were activated: IPython, finding $VIRTUAL_ENV naming CI's
    # main virtualenv, would warn at each shell's start and put that one on sys.path.
    os.environ["VIRTUAL_ENV"] = str(venv)
    os.environ["PATH"] = os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")])
    uv = installer()
    if uv:
        run(uv, "venv", "--quiet", "--clear", "--python", python, str(venv))
        install = [uv, "pip", "install", "--quiet", "--python", vpython]
    else:
        run(python, "-m", "venv", "--clear", str(venv))
        install = [vpython, "-m", "pip", "install", "--quiet"]
    if which == "oldest":
        constraints = ROOT / ".venvs" / "floors.txt"
        constraints.write_text("\n".join(floors(meta["dependencies"])) + "\n")
        install += ["-c", str(constraints)]
    run(*install, "-e", ".[test]")
    names = [re.split(r"[<>=!~ ;\[]", dep, maxsplit=1)[0] for dep in meta["dependencies"]]
    show = "import importlib.metadata as m, sys\nfor n in sys.argv[1:]: print(' ', n, m.version(n))"
    run(vpython, "-c", show, *names)
    # As a user would: the launcher runs a program on 4 ranks.
    run(vpython, "-m", "ipympi.run", "-n", "4", "examples/hello.py", timeout=120)
    tests = subprocess.run(
        [vpython, "-m", "pytest", "-q", *TESTS], cwd=ROOT, timeout=RUN_TIMEOUT, check=False
    )
    took = time.monotonic() - start
    verdict = "passed" if tests.returncode == 0 else "FAILED"
    say(f"{name} with {label}: {verdict} in {took:.0f} s")
    return tests.returncode


if __name__ == "__main__":
    if sys.argv[1:] not in (["oldest"], ["newest"]):
        raise SystemExit("usage: python .ci/pythons.py oldest|newest")
    sys.exit(main(sys.argv[1]))
