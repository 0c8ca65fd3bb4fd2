"""mpi4py's own test suite on ipympi: no test that passed before may fail now (a ratchet).

The suite is downloaded with pip at test time into a cache (conformance/README.md); the
tests that must pass are listed in conformance/expected-2.txt.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, _env

sys.path.insert(0, str(ROOT / "conformance"))
import mpi4py_suite


def _write(path: Path, records: list[tuple[str, str]]) -> None:
    path.write_text("".join(json.dumps({"id": i, "outcome": o}) + "\n" for i, o in records))


def test_a_test_passes_only_where_every_rank_passed_it(tmp_path: Path) -> None:
    _write(
        tmp_path / "test_x.0.jsonl", [("a", "pass"), ("b", "pass"), ("c", "pass"), ("d", "skip")]
    )
    _write(tmp_path / "test_x.1.jsonl", [("a", "pass"), ("b", "fail"), ("d", "skip")])
    with (tmp_path / "test_x.1.jsonl").open("a") as stream:
        stream.write('{"id": "e", "outc')  # cut short by a crash
    outcomes = mpi4py_suite.read_outcomes(str(tmp_path), "test_x", 2)
    assert outcomes == {"a": "pass", "b": "fail", "c": "error", "d": "skip"}


def test_a_failing_subtest_is_written_once_as_its_tests_failure(tmp_path: Path) -> None:
    import unittest

    from _rank import StreamingResult

    class Case(unittest.TestCase):
        def test_sub(self) -> None:
            for i in range(3):
                with self.subTest(i=i):
                    self.assertLess(i, 1)

    out = tmp_path / "out.jsonl"
    with out.open("w") as stream:
        unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(StreamingResult(stream))
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["outcome"] for r in records] == ["fail"]
    assert "i=1" in records[0]["detail"]


def test_out_of_scope_files_are_left_out_unless_named(tmp_path: Path) -> None:
    for name in ("test_ulfm", "test_spawn", "test_comm", "test_cco_buf", "mpiunittest"):
        (tmp_path / f"{name}.py").write_text("")
    in_scope = ["test_cco_buf", "test_comm", "test_spawn"]
    assert mpi4py_suite.test_files(str(tmp_path), None) == in_scope
    assert mpi4py_suite.test_files(str(tmp_path), "ulfm|cco") == ["test_cco_buf", "test_ulfm"]


@pytest.mark.timeout(900)
def test_mpi4py_suite_keeps_every_test_it_passed() -> None:
    """Run the whole suite at 2 ranks; every test in expected-2.txt must still pass."""
    command = [sys.executable, str(ROOT / "conformance" / "mpi4py_suite.py"), "-n", "2",
               "--check", "--timeout", "120"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=840)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
