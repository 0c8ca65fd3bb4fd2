"""One rank's part of a run of one of mpi4py's test files.

``python _rank.py OUTDIR TESTDIR MODULE`` imports ``mpi4py`` (ipympi's, under
``python -m ipympi.run``; the real one under ``mpiexec``), loads the test module ``MODULE``
from ``TESTDIR`` as mpi4py's own runner does (unittest's loader, so every rank runs the
same tests in the same order), runs it, and writes one JSON object per finished test to
``OUTDIR/MODULE.RANK.jsonl`` as it goes: ``{"id", "outcome", "detail"}`` with outcome
``pass``, ``fail``, ``error``, ``skip`` or ``xfail``. A crash or a hang keeps what was
written before it.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
import unittest
from typing import Any, TextIO

DETAIL_CHARS = 4000  # the end of a traceback is what tells why


class StreamingResult(unittest.TestResult):
    """A ``TestResult`` that writes each outcome the moment it is known."""

    def __init__(self, out: TextIO) -> None:
        super().__init__()
        self.out = out
        self.failed_subtests: set[str] = set()  # tests with a failing subtest already written

    def _write(self, test: Any, outcome: str, detail: str = "") -> None:
        record = {"id": test.id(), "outcome": outcome, "detail": detail[-DETAIL_CHARS:]}
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    def _err_text(self, err: Any, test: Any) -> str:
        """The traceback as unittest's own results show it (a private helper of theirs)."""
        return self._exc_info_to_string(err, test)  # type: ignore[attr-defined]

    def addSuccess(self, test: Any) -> None:
        self._write(test, "pass")

    def addFailure(self, test: Any, err: Any) -> None:
        self._write(test, "fail", self._err_text(err, test))

    def addError(self, test: Any, err: Any) -> None:
        self._write(test, "error", self._err_text(err, test))

    def addSkip(self, test: Any, reason: str) -> None:
        self._write(test, "skip", reason)

    def addExpectedFailure(self, test: Any, err: Any) -> None:
        self._write(test, "xfail")

    def addUnexpectedSuccess(self, test: Any) -> None:
        self._write(test, "fail", "unexpected success")

    def addSubTest(self, test: Any, subtest: Any, err: Any) -> None:
        """A failing subtest fails its test (unittest then reports no success for it)."""
        if err is None or test.id() in self.failed_subtests:
            return
        self.failed_subtests.add(test.id())
        kind = "fail" if issubclass(err[0], test.failureException) else "error"
        self._write(test, kind, f"{subtest}\n{self._err_text(err, test)}")


def main(outdir: str, testdir: str, module: str) -> None:
    sys.path.insert(0, testdir)
    for absent in ("cupy", "numba"):  # as mpi4py's runner does by default
        sys.modules.setdefault(absent, None)  # type: ignore[arg-type]
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    with open(os.path.join(outdir, f"{module}.{rank}.jsonl"), "w", encoding="utf-8") as out:
        try:
            suite = unittest.defaultTestLoader.loadTestsFromModule(importlib.import_module(module))
        except Exception:  # the module itself does not load: one error for the file
            record = {"id": module, "outcome": "error", "detail": traceback.format_exc()}
            out.write(json.dumps(record) + "\n")
            return
        suite.run(StreamingResult(out))


if __name__ == "__main__":
    main(*sys.argv[1:4])
