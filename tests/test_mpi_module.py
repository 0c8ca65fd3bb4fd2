"""``ipympi.MPI`` imports its chapters when needed and still shows every name.

Each check runs in a fresh interpreter (``python -c``), since what an import
imports is the point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def fresh(code: str, path: str = str(ROOT)) -> object:
    """Run ``code`` in a new interpreter (a world of one rank); what it prints, as JSON.
    ``path``: put first on ``sys.path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IPYMPI_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [path, env.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_import_leaves_chapters_it_does_not_need_and_no_notebook_modules() -> None:
    loaded = fresh(
        "import json, sys\nimport ipympi.MPI\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(("
        "'ipympi.mpi.neighbor', 'ipympi.mpi.grequest', 'IPython', 'jupyter', 'ipykernel')))))"
    )
    assert loaded == []


def test_a_name_imports_its_chapter() -> None:
    found = fresh(
        "import json, sys\nfrom ipympi import MPI\n"
        "before = 'ipympi.mpi.grequest' in sys.modules\n"
        "cls = MPI.Grequest\n"
        "print(json.dumps([before, 'ipympi.mpi.grequest' in sys.modules, cls.__module__]))"
    )
    assert found == [False, True, "ipympi.mpi.grequest"]


def test_all_dir_and_star_import_show_every_name() -> None:
    found = fresh(
        "import importlib, json\nfrom ipympi import MPI\n"
        "names = set(MPI.__all__)\n"
        "union = {n for s in MPI._SOURCES for n in importlib.import_module(s).__all__\n"
        "         if not n.startswith('_')}\n"
        "scope = {}\nexec('from ipympi.MPI import *', scope)\n"
        "print(json.dumps([sorted(union - names), sorted(names - set(dir(MPI))),\n"
        "                  sorted(names - set(scope)), len(names) == len(MPI.__all__),\n"
        "                  'Attach_buffer' in names, '_addressof' in dir(MPI)]))"
    )
    assert found == [[], [], [], True, True, True]


def test_unknown_names_raise_attribute_error() -> None:
    found = fresh(
        "import json\nfrom ipympi import MPI\n"
        "try:\n    MPI.No_such_call\nexcept AttributeError as exc:\n    said = str(exc)\n"
        "print(json.dumps([said, hasattr(MPI, 'COMM_WORLD')]))"
    )
    assert found == ["module 'ipympi.MPI' has no attribute 'No_such_call'", True]


def test_world_calls_report_through_comm_world() -> None:
    found = fresh(
        "import json\nfrom ipympi import MPI\n"
        "MPI.COMM_WORLD.Set_errhandler(MPI.ERRORS_RETURN)\n"
        "try:\n    MPI.Get_error_string(-77)\nexcept MPI.Exception as exc:\n"
        "    print(json.dumps(exc.Get_error_class() == MPI.ERR_ARG))"
    )
    assert found is True


def test_every_public_name_is_mpi4py_s_or_the_standard_s() -> None:
    # ipympi's own helpers (buffer parsing, pickled messages...) stay private: a user's
    # ``from mpi4py.MPI import *`` on ranks gets mpi4py's names, plus the MPI-1 names
    # mpi4py dropped (still in the standard's deprecated list), and nothing else.
    mpi4py = pytest.importorskip("mpi4py")
    ours = fresh("import json\nfrom ipympi import MPI\nprint(json.dumps(MPI.__all__))")
    theirs = set(
        fresh(
            "import json, mpi4py\nmpi4py.rc.initialize = False\nfrom mpi4py import MPI\n"
            "print(json.dumps([n for n in dir(MPI) if not n.startswith('_')]))",
            path=str(Path(mpi4py.__file__).parent.parent),
        )
    )
    assert sorted(set(ours) - theirs) == ["HOST", "LB", "LONG_LONG_INT", "UB"]
