"""The ``ipympi`` kernel against ``jupyter_kernel_test``, the Jupyter kernel conformance suite.

The suite checks that a kernel speaks the messaging protocol as front ends
expect (every message is validated against the protocol's schemas): kernel
info, stdout and stderr streams, results, displays, errors, completion,
``is_complete``, history, inspection, the pager and ``clear_output``. Here it
runs on the ipympi kernel in parallel mode with two ranks, where cells run on
the ranks and their output is labelled, so it also checks that the labels
keep the protocol's promises (one ``error`` message per failed cell, results
as ``execute_result`` with the rank's own data).

The suite is unittest-based and starts its kernel in ``setUpClass`` with
``start_new_kernel(kernel_name=...)``; the spec is installed there into a
temporary prefix found through ``JUPYTER_PATH``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import unittest
from typing import Any

import pytest

from ipympi import _kernelspec

jupyter_kernel_test = pytest.importorskip("jupyter_kernel_test")

pytestmark = pytest.mark.timeout(60)

NP = 2
_ENV_KEYS = ("JUPYTER_PATH", _kernelspec.NP_ENV)


class IpympiKernelTests(jupyter_kernel_test.KernelTests):
    """The conformance suite on the ipympi kernel (2 ranks, parallel mode)."""

    kernel_name = _kernelspec.KERNEL_NAME
    language_name = "python"
    file_extension = ".py"

    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('oops', file=sys.stderr)"

    completion_samples = [
        {"text": "zi", "matches": {"zip"}},
        {"text": "import collections; collections.OrderedD", "matches": {"OrderedDict"}},
    ]
    complete_code_samples = ["1", "print('hello, world')", "def f(x):\n    return x\n"]
    incomplete_code_samples = ["print('''hello", "def f(x):", "for i in range(3):"]
    invalid_code_samples = ["import = 7q", "1 +* 2"]

    # Help on an object pages in the kernel; in parallel mode ``%%local`` asks the
    # kernel itself (see the report on ``obj?`` on the ranks in test_kernel.py).
    code_page_something = "%%local\nlen?"
    code_generate_error = "raise ValueError('x')"
    code_execute_result = [
        {"code": "1+2+3", "result": "6"},
        {"code": "[n for n in range(3)]", "result": "[0, 1, 2]"},
        {"code": "size", "result": str(NP)},
    ]
    code_display_data = [
        {
            "code": "from IPython.display import HTML, display; display(HTML('<b>x</b>'))",
            "mime": "text/html",
        },
        {
            "code": "from IPython.display import Math, display; display(Math(r'\\frac{1}{2}'))",
            "mime": "text/latex",
        },
    ]
    code_history_pattern = "1?2*"
    # Not "range": IPython answers a range of the current session as session 0, where
    # the suite expects the session's number (a stock IPython kernel fails it alike).
    supported_history_operations = ("tail", "search")
    code_inspect_sample = "zip"
    code_clear_output = "from IPython.display import clear_output; clear_output()"

    @classmethod
    def setUpClass(cls) -> None:
        cls._saved_env = {key: os.environ.get(key) for key in _ENV_KEYS}
        cls._prefix = tempfile.mkdtemp(prefix="ipympi-suite-")
        _kernelspec.install(prefix=cls._prefix)
        data_dir = os.path.join(cls._prefix, "share", "jupyter")
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            filter(None, [data_dir, cls._saved_env["JUPYTER_PATH"]])
        )
        os.environ[_kernelspec.NP_ENV] = str(NP)
        try:
            super().setUpClass()
        except BaseException:
            cls._restore()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            try:
                super().tearDownClass()
            except Exception:
                cls.km.shutdown_kernel(now=True)
        finally:
            cls._restore()

    @classmethod
    def _restore(cls) -> None:
        for key, value in cls._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(cls._prefix, ignore_errors=True)

    def test_ranks_are_running(self) -> None:
        """Parallel mode is on: a cell's result comes from the ranks, with their labels."""
        self.flush_channels()
        reply, outputs = self.execute_helper("rank")
        self.assertEqual(reply["content"]["status"], "ok")
        results = _results(outputs)
        self.assertEqual([data["text/plain"] for data in results], [str(r) for r in range(NP)])


def _results(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["content"]["data"] for m in outputs if m["msg_type"] == "execute_result"]


if __name__ == "__main__":
    unittest.main()
