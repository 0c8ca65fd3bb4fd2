"""Run mpi4py's demo programs unchanged on ipympi, next to the same demos on MPICH.

mpi4py's ``demo/`` folder holds the programs its users learn from: hello world, pi, the
Mandelbrot set, the examples of *MPI: The Complete Reference*, the OSU benchmarks,
``mpi4py.futures`` pools. They stay mpi4py's: this script takes them from the source
distribution that ``mpi4py_suite.py`` downloads into its cache (never into the
repository), runs each demo that needs no compiler, one-sided communication, parallel
I/O or a GPU under ``python -m ipympi.run -n N`` as its makefile runs it
under ``mpiexec -n N``, and with ``--mpich`` under MPICH's ``mpiexec`` on the real mpi4py::

    python conformance/mpi4py_demos.py --mpich              # every demo, on both
    python conformance/mpi4py_demos.py --demos 'osu|futures' --mpich -v

Per demo it compares the exit status and the output, normalised by the demo's
:class:`Rule` (which takes out what changes from run to run, such as timings, and says
why), and for demos that compute a result (mandelbrot's image ``M``) that result, bit for
bit: the demo then runs through ``_keep_globals.py``, which saves the globals it left.
"""

from __future__ import annotations

import argparse
import difflib
import glob
import os
import pickle
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mpi4py_suite import (  # noqa: E402  (the suite's download, cache and launchers)
    MPI4PY_VERSION,
    default_cache,
    fetch_folder,
    launch_command,
    launcher,
    mpi_environment,
)

KEEP_SCRIPT = os.path.join(HERE, "_keep_globals.py")


@dataclass(frozen=True)
class Rule:
    """How a demo's output is normalised before two runs are compared, and why.

    Each rank's output is compared with the same rank's, stdout and stderr apart, in the
    order printed. Lines matching a pattern of ``drop`` are taken out, and so are those
    matching no pattern of ``keep`` if it has any; each ``(pattern, replacement)`` of
    ``sub`` is applied to every line, and with ``unordered`` the lines are sorted (for
    output whose order depends on the run).
    """

    reason: str
    drop: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    sub: tuple[tuple[str, str], ...] = ()
    unordered: bool = False

    def apply(self, text: str) -> list[str]:
        lines = []
        for line in text.splitlines():
            line = line.rstrip()
            if any(re.search(pattern, line) for pattern in self.drop + MPI_LINES):
                continue
            if self.keep and not any(re.search(pattern, line) for pattern in self.keep):
                continue
            for pattern, replacement in self.sub:
                line = re.sub(pattern, replacement, line)
            lines.append(line)
        return sorted(lines) if self.unordered else lines


# What an MPI itself prints on a rank that aborts, or that finalizes with requests still
# pending (MPICH and its UCX transport warn): each words it its own way, or not at all, so
# it is no part of the program's output.
MPI_LINES = (
    r"^Abort\(\d+\) on node \d+",
    r"^\[cli_\d+\]: ",
    r"^MPICH: Builtin communicator \w+ has pending \d+ references",
    r"^\[[\d.]+\] \[[\w:]+\] +\S+ +UCX +WARN ",
)

AS_PRINTED = Rule("nothing in the output depends on the run")
UNITTEST = Rule(
    "unittest prints how long the tests took",
    sub=((r"^Ran (\d+ tests?) in [\d.]+s$", r"Ran \1"),),
)
MANDELBROT = Rule(
    "the demo prints each rank's wall-clock time; the image is compared bit for bit",
    drop=(r"^wall clock time:", r"^all tasks, "),
)
OSU = Rule(
    "the second column is a measured latency or bandwidth: the rows (message sizes) and "
    "the headers must agree",
    sub=((r"^(\s*\d+)\s+[\d.]+$", r"\1"),),
)
FUTURES_TIMED = Rule(
    "the demo prints how long the pool took",
    sub=((r" in [\d.]+ seconds\.$", " in T seconds."),),
)
CPI_DPM = Rule("the demo prints its wall-clock time", drop=(r"^wall clock time:",))
CRAWL = Rule(
    "the demo loads ten web pages: their sizes change by the minute, and the order in which "
    "they arrive with them (unordered map); offline, loading fails on both MPIs, with "
    "tracebacks through each one's own mpi4py.futures: of those, the exceptions must agree",
    keep=(r"^http://", r"^[\w.]+(Error|error): "),
    sub=((r"^(http://\S+)\s*:.*KiB$", r"\1"),),
    unordered=True,
)


@dataclass(frozen=True)
class Demo:
    """One demo run: ``path`` (under ``demo/``) on ``ranks`` ranks, as its makefile runs it.

    ``module`` runs it as ``python -m module path`` (``mpi4py.futures``); ``keep`` names
    globals of rank 0 compared bit for bit; ``driver`` marks a demo that is itself a
    driver of ``mpiexec`` (test-run): it runs with this Python, with ``$MPIEXEC`` set to
    the MPI's launcher and ``import mpi4py`` giving that MPI's mpi4py.
    """

    path: str
    ranks: int
    args: tuple[str, ...] = ()
    stdin: str = ""
    rule: Rule = AS_PRINTED
    module: Optional[str] = None
    keep: tuple[str, ...] = ()
    driver: bool = False
    timeout: float = 300.0

    @property
    def name(self) -> str:
        return " ".join([self.path, *self.args])

    @property
    def folder(self) -> str:
        return os.path.dirname(self.path)


@dataclass
class DemoRun:
    """What one demo did on one MPI.

    ``outputs`` holds each rank's stdout and stderr apart, under keys such as ``"rank 0
    stdout"`` (``"stdout"``, ``"stderr"`` for a driver demo): ipympi's launcher tags
    every line with its rank (``--tag-output``), MPICH's writes each rank's streams to
    files of their own (``-outfile-pattern``), so that lines of different ranks, which
    reach a launcher through pipes of their own, cannot interleave (MPICH's forwarding
    even splices them mid-line). ``launcher`` is what the launcher printed itself.
    """

    status: int
    outputs: dict[str, str]
    launcher: str
    seconds: float
    kept: Optional[dict] = None

    @property
    def result(self) -> str:
        if self.status == TIMED_OUT:
            return "timeout"
        return "ok" if self.status == 0 else f"exit {self.status}"

    def text(self) -> str:
        """Everything printed, rank by rank, for a report."""
        parts = [f"[{key}]\n{value}" for key, value in self.outputs.items() if value.strip()]
        return "\n".join([*parts, self.launcher])


TIMED_OUT = -1000

# The settings of init-fini/test_0.py that its run.sh tries, one run each.
INIT_FINI_SETTINGS = (
    "threads=true",
    "threads=false",
    "thread_level=single",
    "thread_level=funneled",
    "thread_level=serialized",
    "thread_level=multiple",
    "fast_reduce=true",
    "fast_reduce=false",
    "recv_mprobe=true",
    "recv_mprobe=false",
    "irecv_bufsz=0",
    "irecv_bufsz=1",
    "irecv_bufsz=1024",
    "errors=default",
    "errors=exception",
    "errors=abort",
    "errors=fatal",
)
# Left out: what needs a compiler (cython, embedding, libmpi-cffi, wrap-*, and the
# compiled masters and workers of spawning/ and mandelbrot-master.py), one-sided
# communication (compute-pi/cpi-rma.py, nxtval-onesided, -scalable, -mpi3), a GPU
# (cuda-aware-mpi), and check-mpiexec (a check of MPICH's and Open MPI's own environment
# variables).


def demos(demodir: str) -> list[Demo]:
    """The demos in scope, with the ranks, input and arguments their makefiles use."""

    def each(pattern: str, ranks: int, rule: Rule = AS_PRINTED) -> list[Demo]:
        paths = sorted(glob.glob(os.path.join(demodir, pattern)))
        return [Demo(os.path.relpath(path, demodir), ranks, rule=rule) for path in paths]

    futures = "mpi4py.futures"
    return [
        Demo("helloworld.py", 5),
        Demo("compute-pi/cpi-cco.py", 5, stdin="100\n"),
        Demo("compute-pi/cpi-dpm.py", 1, args=("5",), stdin="100\n", rule=CPI_DPM),
        Demo("nxtval/nxtval-dynproc.py", 4),
        Demo("mandelbrot/mandelbrot.py", 7, rule=MANDELBROT, keep=("M",)),
        *each("mpi-ref-v1/ex-*.py", 2),
        *each("osu_*.py", 2, OSU),
        Demo("reductions/test_reductions.py", 5, args=("-q",), rule=UNITTEST),
        Demo("sequential/test_seq.py", 5),
        Demo("test-run/test_run.py", 2, args=("-v",), rule=UNITTEST, driver=True, timeout=600),
        Demo("threads/sendrecv.py", 1),
        *(Demo("init-fini/test_0.py", 2, args=(setting,)) for setting in INIT_FINI_SETTINGS),
        *(Demo(f"init-fini/test_{n}.py", 2) for n in (1, 2, 3, 4, 5, 6, "mpi40")),
        Demo("nxtval/nxtval-threads.py", 5),
        *(Demo(f"profiling/{name}", 8) for name in ("cpi.py", "ring.py", "threads.py")),
        # run-pool: a plain program whose MPIPoolExecutor spawns its workers
        Demo("futures/run_cpi.py", 1),
        Demo("futures/run_crawl.py", 1, rule=CRAWL),
        Demo("futures/run_hello.py", 1),
        Demo("futures/run_primes.py", 1),
        Demo("futures/run_cpi.py", 5, module=futures),
        Demo("futures/run_crawl.py", 5, rule=CRAWL, module=futures),
        Demo("futures/run_hello.py", 5, module=futures),
        Demo("futures/run_primes.py", 5, module=futures),
        Demo("futures/run_julia.py", 5, rule=FUTURES_TIMED, module=futures),
        Demo("futures/run_mandelbrot.py", 5, rule=FUTURES_TIMED, module=futures),
    ]


def command_of(demo: Demo, mpi: str, outdir: str) -> list[str]:
    """The command line that runs ``demo`` on ``mpi`` (``"ipympi"`` or ``"mpich"``),
    keeping each rank's output apart (see :class:`DemoRun`) and its kept globals in
    ``outdir``."""
    program = [os.path.basename(demo.path), *demo.args]
    if demo.keep:
        program = [KEEP_SCRIPT, outdir, ",".join(demo.keep), *program]
    if demo.module:
        program = ["-m", demo.module, *program]
    if demo.driver:
        return [sys.executable, *program]
    if mpi == "ipympi":
        apart = ["--tag-output"]
    else:
        apart = ["-outfile-pattern", f"{outdir}/out.%r", "-errfile-pattern", f"{outdir}/err.%r"]
    return [*launch_command(mpi, demo.ranks, demo.timeout), *apart, sys.executable, *program]


def rank_outputs(demo: Demo, mpi: str, stdout: str, stderr: str, outdir: str) -> DemoRun:
    """Sort what a run printed into each rank's stdout and stderr, and the launcher's own."""
    if demo.driver:
        return DemoRun(0, {"stdout": stdout, "stderr": stderr}, "", 0.0)
    outputs = {f"rank {r} {s}": "" for r in range(demo.ranks) for s in ("stdout", "stderr")}
    own = []
    if mpi == "ipympi":
        for stream, text in (("stdout", stdout), ("stderr", stderr)):
            for line in text.splitlines(keepends=True):
                tagged = re.match(r"\[(\d+)\] ", line)
                if tagged and int(tagged[1]) < demo.ranks:
                    outputs[f"rank {tagged[1]} {stream}"] += line[tagged.end() :]
                else:
                    own.append(line)
    else:
        own = [stdout, stderr]
        for rank in range(demo.ranks):
            for stream, prefix in (("stdout", "out"), ("stderr", "err")):
                path = os.path.join(outdir, f"{prefix}.{rank}")
                if os.path.exists(path):
                    with open(path, encoding="utf-8", errors="replace") as file:
                        outputs[f"rank {rank} {stream}"] = file.read()
    return DemoRun(0, outputs, "".join(own), 0.0)


def environment_of(demo: Demo, mpi: str) -> dict[str, str]:
    """The MPI's environment (``mpi_environment``), plus what some demos need.

    No window: matplotlib draws with its Agg backend. A driver demo finds the MPI's
    launcher in ``$MPIEXEC`` and, on ipympi, ipympi's ``mpi4py`` name on its own path.
    """
    env = mpi_environment(mpi)
    env["MPLBACKEND"] = "Agg"
    if demo.driver:
        env["MPIEXEC"] = shlex.join(launcher(mpi, demo.timeout))
        if mpi == "ipympi":
            from ipympi import mpi4py as mpi4py_name

            mpi4py_name.rank_environment(env)
    return env


def run_demo(demo: Demo, demodir: str, mpi: str) -> DemoRun:
    """Run ``demo`` once on ``mpi``, in its own folder, as its makefile does."""
    with tempfile.TemporaryDirectory() as outdir:
        started = time.monotonic()
        try:
            proc = subprocess.run(
                command_of(demo, mpi, outdir),
                cwd=os.path.join(demodir, demo.folder),
                env=environment_of(demo, mpi),
                input=demo.stdin.encode(),
                capture_output=True,
                timeout=demo.timeout + 30,
            )
            status, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            status, out, err = TIMED_OUT, exc.stdout or b"", exc.stderr or b""
        stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
        run = rank_outputs(demo, mpi, stdout, stderr, outdir)
        run.status, run.seconds = status, time.monotonic() - started
        path = os.path.join(outdir, "keep.0.pickle")
        if demo.keep and os.path.exists(path):
            with open(path, "rb") as stream:
                run.kept = pickle.load(stream)
    return run


def differences(demo: Demo, ours: DemoRun, theirs: DemoRun) -> list[str]:
    """What differs between two runs of ``demo``, after its rule: [] when they agree."""
    found = []
    if ours.status != theirs.status:
        found.append("exit status")
    for stream in ("stdout", "stderr"):
        ranks = [
            key.split()[1] if key.startswith("rank") else ""
            for key in ours.outputs
            if key.endswith(stream)
            and demo.rule.apply(ours.outputs[key]) != demo.rule.apply(theirs.outputs.get(key, ""))
        ]
        if ranks:
            found.append(f"{stream} {','.join(ranks)}".strip())
    for name in demo.keep:
        if not same_value(ours.kept, theirs.kept, name):
            found.append(name)
    return found


def same_value(ours: Optional[dict], theirs: Optional[dict], name: str) -> bool:
    """Whether both runs kept global ``name`` with the same bits (its pickle, byte for byte)."""
    if ours is None or theirs is None or name not in ours or name not in theirs:
        return False
    return pickle.dumps(ours[name]) == pickle.dumps(theirs[name])


def cell(demo: Demo, run: DemoRun) -> str:
    """A result column: exit status, what was kept, and the seconds taken."""
    text = run.result
    for name in demo.keep:
        value = (run.kept or {}).get(name)
        shape = getattr(value, "shape", None)
        text += f", {name} " + ("missing" if value is None else "x".join(map(str, shape or ())))
    return f"{text} {run.seconds:.0f}s"


def print_diff(demo: Demo, ours: DemoRun, theirs: DemoRun) -> None:
    """The unified diff of each normalised output that differs (MPICH's is the reference)."""
    for key, text in ours.outputs.items():
        mine, other = demo.rule.apply(text), demo.rule.apply(theirs.outputs.get(key, ""))
        if mine != other:
            diff = difflib.unified_diff(other, mine, f"MPICH {key}", f"ipympi {key}", n=1)
            print("    " + "\n    ".join(line.rstrip("\n") for line in list(diff)[:30]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demos", metavar="REGEX", help="run only the demos matching REGEX")
    parser.add_argument(
        "--mpich",
        action="store_true",
        help="also run on MPICH through the installed mpi4py and mpiexec, and compare",
    )
    parser.add_argument(
        "--cache",
        default=default_cache(),
        help="where the downloaded sdist is kept (default: %(default)s)",
    )
    parser.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="print how the normalised outputs differ, and the output of failed runs",
    )
    parser.add_argument("--list", action="store_true", help="list the demos and their rules")
    args = parser.parse_args(argv)
    demodir = fetch_folder(MPI4PY_VERSION, args.cache, "demo")
    chosen = [d for d in demos(demodir) if not args.demos or re.search(args.demos, d.name)]
    if args.list:
        for demo in chosen:
            print(f"{demo.name:44} {demo.ranks:2d}  {demo.rule.reason}")
        return 0
    print(f"mpi4py {MPI4PY_VERSION} demos ({demodir})")
    header = f"{'demo':44} {'ranks':>5}  {'ipympi':22}"
    if args.mpich:
        header += f" {'MPICH':22} same?"
    print(header)
    failed = 0
    for demo in chosen:
        ours = run_demo(demo, demodir, "ipympi")
        line = f"{demo.name:44} {demo.ranks:5d}  {cell(demo, ours):22}"
        theirs = run_demo(demo, demodir, "mpich") if args.mpich else None
        if theirs is not None:
            found = differences(demo, ours, theirs)
            same = "yes" if not found else "no: " + ", ".join(found)
            line += f" {cell(demo, theirs):22} {same}"
            failed += bool(found)
        else:
            failed += ours.status != 0
        print(line, flush=True)
        if args.verbose and theirs is not None and found:
            print_diff(demo, ours, theirs)
        elif args.verbose and theirs is None and ours.status != 0:
            print("    " + "\n    ".join(ours.text().strip().splitlines()[-12:]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
