"""Run mpi4py's own test suite on ipympi, next to the same suite on MPICH.

mpi4py's tests are the measure of ipympi as a drop-in for mpi4py. They stay mpi4py's:
this script downloads mpi4py's source distribution with pip into a cache (never into the
repository), and runs each test file of its ``test/`` folder, unmodified, under
``python -m ipympi.run -n N``, where ``import mpi4py`` gives ipympi and nothing else is
arranged. With ``--mpich`` it runs the same files with ``mpiexec`` on the real mpi4py (where
``pip install mpi4py mpich`` put them) and prints the two side by side::

    python conformance/mpi4py_suite.py -n 2 --mpich
    python conformance/mpi4py_suite.py -n 1 -n 2 -n 4 --files 'cco|p2p'
    python conformance/mpi4py_suite.py -n 2 --check      # fail on any lost test
    python conformance/mpi4py_suite.py --files win --ipympi-args='--hosts 127.0.0.2:1,127.0.0.3:1'

A test counts as passed when every rank passed it. ``--check`` compares the run with the
tests listed as passing in ``expected-N.txt`` next to this script and exits 1 if any of them
no longer passes (a ratchet: ``--write`` records a new list). The files out of ipympi's
scope (fault tolerance, the C-level interfaces) are left out unless named by ``--files``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
RANK_SCRIPT = os.path.join(HERE, "_rank.py")
MPI4PY_VERSION = "4.1.2"
OUT_OF_SCOPE = (  # test files of features ipympi does not implement (see README.md)
    "test_ulfm",
    "test_cffi",
    "test_ctypes",
    "test_doc",
    "test_mpiabi",
    "test_mpiapi",
)
OUTCOMES = ("pass", "fail", "error", "skip", "xfail")
_WORSE = {"pass": 0, "xfail": 1, "skip": 2, "fail": 3, "error": 4}


def default_cache() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("IPYMPI_SUITE_CACHE") or os.path.join(base, "ipympi")


def fetch_sdist(version: str, cache: str) -> str:
    """mpi4py ``version``'s source distribution, downloaded once with pip into ``cache``.

    Kept in the cache so that each of its folders (``test/`` for this script, ``demo/``
    for ``mpi4py_demos.py``) comes from the same download. A failed download raises.
    """
    archive = os.path.join(cache, f"mpi4py-{version}.tar.gz")
    if os.path.isfile(archive):
        return archive
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as download:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",  # mpi4py's sdist; its build tools as wheels (built from
            "mpi4py",  # source they take minutes)
            "--dest",
            download,
            f"mpi4py=={version}",
        ]
        subprocess.run(command, check=True, timeout=300)
        (fetched,) = glob.glob(os.path.join(download, "*.tar.gz"))
        os.replace(fetched, archive)
    return archive


def fetch_folder(version: str, cache: str, folder: str) -> str:
    """The folder ``folder`` (``test``, ``demo``) of mpi4py ``version``'s sdist.

    Extracted once into ``cache`` (atomically: a folder that is there is whole).
    """
    target = os.path.join(cache, f"mpi4py-{version}", folder)
    if os.path.isdir(target):
        return target
    archive = fetch_sdist(version, cache)
    prefix = f"mpi4py-{version}/{folder}/"
    with tempfile.TemporaryDirectory(dir=cache) as scratch, tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
        tar.extractall(scratch, members=members)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.replace(os.path.join(scratch, f"mpi4py-{version}", folder), target)
        except OSError:  # another run extracted it meanwhile
            if not os.path.isdir(target):
                raise
    return target


def fetch_tests(version: str, cache: str) -> str:
    """The ``test/`` folder of mpi4py ``version``'s sdist, downloaded once into ``cache``."""
    return fetch_folder(version, cache, "test")


def test_files(testdir: str, pattern: str | None) -> list[str]:
    """The test modules to run: those matching ``pattern``, else every one in scope."""
    import re

    names = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(testdir, "test_*.py")))
    if pattern:
        return [name for name in names if re.search(pattern, name)]
    return [name for name in names if name not in OUT_OF_SCOPE]


@dataclass
class FileRun:
    """One test file's results on one MPI: each test's outcome (worst over the ranks)."""

    name: str
    outcomes: dict[str, str] = field(default_factory=dict)
    status: Optional[int] = None
    seconds: float = 0.0
    log: str = ""

    def count(self, outcome: str) -> int:
        return sum(1 for value in self.outcomes.values() if value == outcome)

    @property
    def passed(self) -> set[str]:
        return {test for test, outcome in self.outcomes.items() if outcome == "pass"}


def read_outcomes(outdir: str, module: str, ranks: int) -> dict[str, str]:
    """Merge the ranks' records: a test passes only if every rank wrote that it passed."""
    seen: dict[str, dict[int, str]] = {}
    for rank in range(ranks):
        path = os.path.join(outdir, f"{module}.{rank}.jsonl")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as stream:
            for line in stream:
                try:
                    record = json.loads(line)
                except ValueError:  # a line cut short by a crash
                    continue
                per_rank = seen.setdefault(record["id"], {})
                old = per_rank.get(rank)
                if old is None or _WORSE[record["outcome"]] > _WORSE[old]:
                    per_rank[rank] = record["outcome"]
    merged = {}
    for test, per_rank in seen.items():
        worst = max(per_rank.values(), key=_WORSE.__getitem__)
        merged[test] = worst if len(per_rank) == ranks or worst != "pass" else "error"
    return merged


def launcher(mpi: str, timeout: float, extra: Sequence[str] = ()) -> list[str]:
    """``mpi``'s launcher, to be followed by ``-n N``: ipympi's (ending a hung job after
    ``timeout`` seconds, with ``extra`` options such as ``--hosts``), or the ``mpiexec``
    installed beside this Python (MPICH's)."""
    if mpi == "ipympi":
        return [sys.executable, "-m", "ipympi.run", "--timeout", str(timeout), *extra]
    return [shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"]


def launch_command(mpi: str, ranks: int, timeout: float, extra: Sequence[str] = ()) -> list[str]:
    return [*launcher(mpi, timeout, extra), "-n", str(ranks)]


def mpi_environment(mpi: str) -> dict[str, str]:
    """ipympi: its own ``mpi4py`` name and nothing else; MPICH: the installed mpi4py."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("IPYMPI_")}
    if mpi == "ipympi":
        env["IPYMPI_MPI4PY_NAME"] = "1"
    return env


def run_file(
    mpi: str,
    module: str,
    testdir: str,
    ranks: int,
    outdir: str,
    timeout: float,
    extra: Sequence[str] = (),
) -> FileRun:
    """Run one test file on ``ranks`` ranks of ``mpi`` (``"ipympi"`` or ``"mpich"``)."""
    for stale in glob.glob(os.path.join(outdir, f"{module}.*.jsonl")):
        os.remove(stale)
    command = [
        *launch_command(mpi, ranks, timeout, extra),
        sys.executable,
        RANK_SCRIPT,
        outdir,
        testdir,
        module,
    ]
    started = time.monotonic()
    try:
        proc = subprocess.run(
            command,
            cwd=testdir,
            env=mpi_environment(mpi),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout + 30,
        )
        status, log = proc.returncode, proc.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired as exc:
        status, log = -1, (exc.stdout or b"").decode(errors="replace") + "\n(killed: timeout)"
    elapsed = time.monotonic() - started
    return FileRun(module, read_outcomes(outdir, module, ranks), status, elapsed, log)


def run_suite(
    mpi: str,
    modules: Sequence[str],
    testdir: str,
    ranks: int,
    outdir: str,
    timeout: float,
    jobs: int,
    extra: Sequence[str] = (),
) -> dict[str, FileRun]:
    os.makedirs(outdir, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = [
            pool.submit(run_file, mpi, module, testdir, ranks, outdir, timeout, extra)
            for module in modules
        ]
        return {run.name: run for run in (future.result() for future in futures)}


def passed_tests(runs: dict[str, FileRun]) -> set[str]:
    return set().union(*(run.passed for run in runs.values())) if runs else set()


def print_table(
    ranks: int, ours: dict[str, FileRun], theirs: dict[str, FileRun] | None, out=sys.stdout
) -> None:
    """Per file: run, passed, failed, errors, skipped on ipympi, and MPICH's passes."""
    header = f"{'file':24} {'run':>5} {'pass':>5} {'fail':>5} {'error':>5} {'skip':>5} {'s':>6}"
    if theirs is not None:
        header += f"  {'MPICH':>5} {'both':>5} {'only MPICH':>10}"
    print(f"\nmpi4py {MPI4PY_VERSION} test suite, {ranks} rank(s):\n{header}", file=out)
    totals = dict.fromkeys(("run", "pass", "fail", "error", "skip", "mpich", "both"), 0)
    for name, run in ours.items():
        row = {
            "run": len(run.outcomes),
            "pass": run.count("pass"),
            "fail": run.count("fail"),
            "error": run.count("error"),
            "skip": run.count("skip"),
        }
        line = f"{name:24} " + " ".join(f"{row[k]:5d}" for k in row) + f" {run.seconds:6.1f}"
        if theirs is not None and name in theirs:
            mpich = theirs[name].passed
            row["mpich"], row["both"] = len(mpich), len(mpich & run.passed)
            line += f"  {row['mpich']:5d} {row['both']:5d} {row['mpich'] - row['both']:10d}"
        if run.status not in (0, None):
            line += f"  (exit {run.status})"
        for key, value in row.items():
            totals[key] += value
        print(line, file=out)
    line = f"{'total':24} " + " ".join(f"{totals[k]:5d}" for k in list(totals)[:5])
    if theirs is not None:
        share = 100.0 * totals["both"] / totals["mpich"] if totals["mpich"] else 100.0
        line += f"        {totals['mpich']:5d} {totals['both']:5d} ({share:.1f}% of MPICH's)"
    print(line, file=out)


def read_list(path: str) -> set[str]:
    if not os.path.exists(path):
        return set()
    with open(path, encoding="utf-8") as stream:
        return {line.strip() for line in stream if line.strip() and not line.startswith("#")}


def write_list(path: str, tests: Iterable[str], ranks: int) -> None:
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(
            f"# mpi4py {MPI4PY_VERSION} tests that pass on ipympi at {ranks} rank(s);\n"
            "# written by conformance/mpi4py_suite.py --write, checked by --check.\n"
        )
        stream.writelines(f"{test}\n" for test in sorted(tests))


def expected_path(ranks: int) -> str:
    return os.path.join(HERE, f"expected-{ranks}.txt")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-n",
        dest="ranks",
        type=int,
        action="append",
        help="number of ranks (repeat for several; default 2)",
    )
    parser.add_argument(
        "--files",
        metavar="REGEX",
        help="run only the test files matching REGEX (default: all in scope)",
    )
    parser.add_argument(
        "--mpich",
        action="store_true",
        help="also run on MPICH through the installed mpi4py and mpiexec",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if a test listed in expected-N.txt does not pass",
    )
    parser.add_argument(
        "--write", action="store_true", help="record this run's passing tests in expected-N.txt"
    )
    parser.add_argument(
        "--cache",
        default=default_cache(),
        help="where the downloaded suite is kept (default: %(default)s)",
    )
    parser.add_argument("--out", help="where the ranks write their results (default: a temp dir)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds one file may take (default: %(default)s)",
    )
    parser.add_argument(
        "--ipympi-args",
        default="",
        metavar="ARGS",
        help="more options for ipympi's launcher, e.g. '--hosts 127.0.0.2:1,127.0.0.3:1' "
        "(ranks on two hosts)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="test files run at once (default: 1)")
    parser.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="print every test that fails on ipympi, with the end of its error",
    )
    args = parser.parse_args(argv)
    testdir = fetch_tests(MPI4PY_VERSION, args.cache)
    modules = test_files(testdir, args.files)
    lost_any = False
    with tempfile.TemporaryDirectory() as scratch:
        for ranks in args.ranks or [2]:
            outdir = os.path.join(args.out or scratch, f"ipympi-{ranks}")
            ours = run_suite(
                "ipympi",
                modules,
                testdir,
                ranks,
                outdir,
                args.timeout,
                args.jobs,
                shlex.split(args.ipympi_args),
            )
            theirs = None
            if args.mpich:
                mpich_dir = os.path.join(args.out or scratch, f"mpich-{ranks}")
                theirs = run_suite(
                    "mpich", modules, testdir, ranks, mpich_dir, args.timeout, args.jobs
                )
            print_table(ranks, ours, theirs)
            if args.verbose:
                print_failures(ours, theirs)
            passed = passed_tests(ours)
            if args.check:
                expected = {t for t in read_list(expected_path(ranks)) if t.split(".")[0] in ours}
                lost = sorted(expected - passed)
                for test in lost:
                    outcome = next(
                        (r.outcomes.get(test) for r in ours.values() if test in r.outcomes),
                        "did not run",
                    )
                    print(f"LOST at {ranks} ranks: {test} ({outcome})")
                lost_any = lost_any or bool(lost)
                gained = len(passed - expected)
                print(
                    f"\n{ranks} ranks: {len(expected) - len(lost)} of {len(expected)} expected "
                    f"tests pass; {gained} more pass than expected-{ranks}.txt lists"
                )
            if args.write:
                write_list(expected_path(ranks), passed, ranks)
    return 1 if lost_any else 0


def print_failures(ours: dict[str, FileRun], theirs: dict[str, FileRun] | None) -> None:
    for run in ours.values():
        mpich = theirs[run.name].passed if theirs and run.name in theirs else None
        for test, outcome in sorted(run.outcomes.items()):
            if outcome in ("fail", "error") and (mpich is None or test in mpich):
                print(f"  {outcome:5} {test}")
        if run.status not in (0, None):
            tail = run.log.strip().splitlines()[-3:]
            print(f"  {run.name}: exit {run.status}: " + " | ".join(tail))


if __name__ == "__main__":
    sys.exit(main())
