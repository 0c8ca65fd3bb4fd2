"""mpi4py's demo programs, unchanged, on ipympi: a few seconds' worth of them.

The demos come from the sdist that the conformance suite downloads into its cache
(conformance/README.md); ``conformance/mpi4py_demos.py`` runs them all next to MPICH.
Here each runs on ipympi alone and is checked against what the demo itself asserts (its
exit status) or prints, and mandelbrot's image against the one its sequential version
computes, bit for bit. A failed download fails these tests.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, _env

sys.path.insert(0, str(ROOT / "conformance"))
import mpi4py_demos
from mpi4py_demos import Demo, DemoRun, Rule
from mpi4py_suite import MPI4PY_VERSION, default_cache, fetch_folder

ASSERTING = ("mpi-ref-v1/ex-2.01.py", "mpi-ref-v1/ex-2.16.py", "mpi-ref-v1/ex-3.02.py",
             "init-fini/test_3.py", "init-fini/test_6.py")  # fmt: skip


@pytest.fixture(scope="module")
def demodir() -> str:
    return fetch_folder(MPI4PY_VERSION, default_cache(), "demo")


def _run(demodir: str, *demos: Demo) -> list[DemoRun]:
    """Run the demos at once on ipympi (they wait on each other's ranks, not the CPU)."""
    with concurrent.futures.ThreadPoolExecutor(len(demos)) as pool:
        return list(pool.map(lambda demo: mpi4py_demos.run_demo(demo, demodir, "ipympi"), demos))


@pytest.mark.timeout(120)
def test_demos_that_check_themselves_pass(demodir: str) -> None:
    runs = _run(demodir, *(Demo(path, 2, timeout=60) for path in ASSERTING))
    for path, run in zip(ASSERTING, runs):
        assert run.status == 0, (path, run.text())
        assert not any(run.outputs.values()), (path, run.text())


@pytest.mark.timeout(120)
def test_init_fini_finds_the_error_handlers_that_rc_errors_asks_for(demodir: str) -> None:
    # init-fini/test_0.py checks the handler of the predefined communicators, a
    # session, a window and a file under each setting of mpi4py.rc.errors
    settings = [f"errors={mode}" for mode in ("default", "exception", "abort", "fatal")]
    runs = _run(demodir, *(Demo("init-fini/test_0.py", 2, args=(s,), timeout=60) for s in settings))
    for setting, run in zip(settings, runs):
        assert run.status == 0, (setting, run.text())
        assert not any(run.outputs.values()), (setting, run.text())


@pytest.mark.timeout(120)
def test_demos_print_what_they_compute(demodir: str) -> None:
    hello, cpi, futures = _run(
        demodir,
        Demo("helloworld.py", 3, timeout=60),
        Demo("compute-pi/cpi-cco.py", 3, stdin="100\n", timeout=60),
        Demo("futures/run_hello.py", 3, module="mpi4py.futures", timeout=60),
    )
    for rank in range(3):
        line = hello.outputs[f"rank {rank} stdout"]
        assert re.fullmatch(rf"Hello, World! I am process {rank} of 3 on \S+\.\n", line)
    prompt = "Enter the number of intervals: (0 quits) "
    text = cpi.outputs["rank 0 stdout"]
    assert text.startswith(prompt) and text.rstrip().endswith(prompt.rstrip()), text
    pi, error = map(float, re.findall(r"is approximately (\S+), error is (\S+)", text)[0])
    assert abs(pi - math.pi) < 1e-4 and error == pytest.approx(abs(pi - math.pi), abs=1e-15)
    assert cpi.status == hello.status == 0
    assert futures.status == 0, futures.text()
    greetings = futures.outputs["rank 0 stdout"].splitlines()
    assert sorted(line.split(" on ")[0] for line in greetings) == [
        f"Hello, World! I am worker {w} of 2" for w in range(2)
    ]


@pytest.mark.timeout(120)
def test_spawning_demos_print_what_they_compute(demodir: str) -> None:
    dpm, pool = _run(
        demodir,
        Demo("compute-pi/cpi-dpm.py", 1, args=("3",), stdin="100\n", timeout=60),
        Demo("futures/run_hello.py", 1, timeout=60),  # its MPIPoolExecutor spawns workers
    )
    assert dpm.status == 0, dpm.text()
    text = dpm.outputs["rank 0 stdout"]
    pi = float(re.findall(r"computed pi is:\s+(\S+)", text)[0])
    assert abs(pi - math.pi) < 1e-4 and "computing units: 3 processes" in text, text
    assert pool.status == 0, pool.text()
    # the demo prints its 128-byte buffers whole: each greeting is padded with NULs
    greetings = pool.outputs["rank 0 stdout"].replace("\x00", "").splitlines()
    assert len(greetings) == 5 and all(
        re.fullmatch(r"Hello, World! I am worker \d+ of \d+ on \S+\.", line) for line in greetings
    ), greetings


@pytest.mark.timeout(120)
def test_mandelbrot_image_is_the_sequential_one_bit_for_bit(demodir: str, tmp_path: Path) -> None:
    """The parallel demo's ``M`` (rank 0's) is what mandelbrot-seq.py computes alone."""
    env = {**_env(), "MPLBACKEND": "Agg"}
    folder = os.path.join(demodir, "mandelbrot")
    command = [sys.executable, mpi4py_demos.KEEP_SCRIPT, str(tmp_path), "M", "mandelbrot-seq.py"]
    sequential = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE)
    (parallel,) = _run(demodir, Demo("mandelbrot/mandelbrot.py", 3, keep=("M",), timeout=60))
    sequential.communicate(timeout=60)
    assert sequential.returncode == 0 and parallel.status == 0, parallel.text()
    with open(tmp_path / "keep.0.pickle", "rb") as stream:
        expected = pickle.load(stream)["M"]
    image = parallel.kept["M"] if parallel.kept else None
    assert image is not None and image.shape == (100, 150)
    assert (image.dtype, image.tobytes()) == (expected.dtype, expected.tobytes())


def test_rules_take_out_what_changes_between_runs() -> None:
    osu = mpi4py_demos.OSU
    assert osu.apply("# MPI Latency Test\n         8              0.52\n") == [
        "# MPI Latency Test",
        "         8",
    ]
    assert mpi4py_demos.UNITTEST.apply("Ran 80 tests in 0.296s\n\nOK") == ["Ran 80 tests", "", "OK"]
    rule = Rule("example", drop=(r"^wall",), keep=(r"^(wall|a)",), unordered=True)
    assert rule.apply("b\nwall 1.0\na2\na1\n") == ["a1", "a2"]


def test_each_ranks_output_is_sorted_out_of_the_tagged_stream() -> None:
    demo = Demo("x.py", 2)
    run = mpi4py_demos.rank_outputs(
        demo, "ipympi", "[1] b\n[0] a\n[0] c\n", "[1] oops\nipympi.run: rank 1 exited\n", ""
    )
    assert run.outputs == {
        "rank 0 stdout": "a\nc\n",
        "rank 0 stderr": "",
        "rank 1 stdout": "b\n",
        "rank 1 stderr": "oops\n",
    }
    assert run.launcher == "ipympi.run: rank 1 exited\n"
