"""The ``ipympi`` kernel against ``jupyter_kernel_test``, the Jupyter kernel conformance suite.

The suite checks that a kernel speaks the messaging protocol as front ends
expect (every message is validated against the protocol's schemas): kernel
info, stdout and stderr streams, results, displays, errors, completion,
``is_complete``, history, inspection, the pager and ``clear_output``. Here it
runs on the ipympi kernel in parallel mode with two ranks, where cells run on
the ranks and their output is labelled, so it also checks that the labels
keep the protocol's promises (one ``error`` message per failed cell, results
as ``execute_result`` with the rank's own data, ``len?`` answered with a
pager payload). It runs on both backends (mpi4py where it is installed), and
on the stock IPython kernel with the same samples, which it must pass alike.

The suite is unittest-based and starts its kernel in ``setUpClass`` with
``start_new_kernel(kernel_name=...)``; the specs are installed there into a
temporary prefix found through ``JUPYTER_PATH``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import unittest
from typing import Any, ClassVar

import pytest

from ipympi.notebook import kernelspec as _kernelspec

jupyter_kernel_test = pytest.importorskip("jupyter_kernel_test")

pytestmark = pytest.mark.timeout(60)

NP = 2
BACKEND_ENV = "IPYMPI_BACKEND"
_ENV_KEYS = ("JUPYTER_PATH", _kernelspec.NP_ENV, BACKEND_ENV)


class _Samples:
    """What the suite runs, on any Python kernel."""

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

    code_page_something = "len?"  # (on the ipympi kernel, run by the ranks)
    code_generate_error = "raise ValueError('x')"
    code_execute_result: ClassVar[list[dict[str, str]]] = [
        {"code": "1+2+3", "result": "6"},
        {"code": "[n for n in range(3)]", "result": "[0, 1, 2]"},
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

    # The kernel's environment: the number of ranks, and the backend.
    environment: ClassVar[dict[str, str]] = {}

    @classmethod
    def setUpClass(cls) -> None:
        cls._saved_env = {key: os.environ.get(key) for key in _ENV_KEYS}
        cls._prefix = tempfile.mkdtemp(prefix="ipympi-suite-")
        _kernelspec.install(prefix=cls._prefix)
        from ipykernel.kernelspec import install as install_ipykernel

        install_ipykernel(prefix=cls._prefix)  # the stock kernel, running this Python
        data_dir = os.path.join(cls._prefix, "share", "jupyter")
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            filter(None, [data_dir, cls._saved_env["JUPYTER_PATH"]])
        )
        for key in _ENV_KEYS[1:]:
            os.environ.pop(key, None)
        os.environ.update(cls.environment)
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


class StockKernelTests(_Samples, jupyter_kernel_test.KernelTests):  # type: ignore[misc]
    """The same samples on the stock IPython kernel: what the ipympi kernel must match."""

    kernel_name = "python3"


class IpympiKernelTests(_Samples, jupyter_kernel_test.KernelTests):  # type: ignore[misc]
    """The conformance suite on the ipympi kernel (2 ranks, parallel mode)."""

    kernel_name = _kernelspec.KERNEL_NAME
    environment: ClassVar[dict[str, str]] = {_kernelspec.NP_ENV: str(NP)}
    code_execute_result: ClassVar[list[dict[str, str]]] = [
        *_Samples.code_execute_result,
        {"code": "size", "result": str(NP)},
    ]

    def test_ranks_are_running(self) -> None:
        """Parallel mode is on: a cell's result comes from the ranks, with their labels."""
        self.flush_channels()
        reply, outputs = self.execute_helper("rank")
        self.assertEqual(reply["content"]["status"], "ok")
        results = _results(outputs)
        self.assertEqual([data["text/plain"] for data in results], [str(r) for r in range(NP)])


@unittest.skipIf(
    importlib.util.find_spec("mpi4py") is None,
    "the mpi4py backend needs mpi4py and mpiexec (pip install mpi4py mpich)",
)
class IpympiMpi4pyKernelTests(IpympiKernelTests):
    """The same on the mpi4py backend: the ranks run a real MPI."""

    environment: ClassVar[dict[str, str]] = {_kernelspec.NP_ENV: str(NP), BACKEND_ENV: "mpi4py"}


def _results(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["content"]["data"] for m in outputs if m["msg_type"] == "execute_result"]


if __name__ == "__main__":
    unittest.main()
