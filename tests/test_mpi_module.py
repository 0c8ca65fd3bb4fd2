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


def test_numpy_is_imported_only_when_a_buffer_needs_it() -> None:
    found = fresh(
        "import json, sys\nfrom ipympi import MPI\n"
        "comm = MPI.COMM_WORLD\n"
        "seen = ['numpy' in sys.modules]\n"
        "comm.Get_rank(); comm.Get_size(); comm.Barrier(); comm.bcast({'a': 1}, root=0)\n"
        "comm.allreduce(3); MPI.Wtime(); MPI.INT.Get_size(); MPI.DOUBLE_INT.Get_extent()\n"
        "seen.append('numpy' in sys.modules)\n"
        "buf = bytearray(8); comm.Allreduce(MPI.IN_PLACE, [buf, MPI.INT])\n"
        "seen.append('numpy' in sys.modules)\n"
        "print(json.dumps(seen))"
    )
    assert found == [False, False, True]


def test_predefined_sizes_and_extents_are_numpy_s() -> None:
    """Predefined datatypes know their size and extent before numpy is imported: as
    numpy's dtypes (of C structs, for the MINLOC/MAXLOC pairs) tell them."""
    import ctypes

    import numpy as np

    from ipympi import MPI
    from ipympi.mpi import datatype

    checked = 0
    for handle in datatype._NAMED.values():
        impl = handle._impl
        if impl._dtype_spec is None:
            continue
        dtype = np.dtype(impl._dtype_spec, align=True)
        assert impl.np_dtype == dtype
        assert impl.extent == dtype.itemsize, impl.name
        if dtype.fields is None:
            assert impl.size == impl.true_extent == dtype.itemsize, impl.name
        else:  # a (value, int) pair
            value, (_, index) = dtype.fields["value"][0], dtype.fields["index"]
            assert (impl.size, impl.true_extent) == (value.itemsize + 4, index + 4), impl.name
        checked += 1
    assert checked > 60
    assert MPI.LONG_DOUBLE.Get_size() == ctypes.sizeof(ctypes.c_longdouble)


def test_leaf_ids_do_not_depend_on_the_type_used_first() -> None:
    """Type signatures, which ranks compare, hold leaf ids: every predefined type gets its
    leaf at once, in one order, whichever type a program's first typemap needs."""
    code = (
        "import json\nfrom ipympi import MPI\n"
        "{first}\n"
        "print(json.dumps([int(t._impl.layout.sig_leaf[0]) for t in "
        "(MPI.INT, MPI.DOUBLE, MPI.LONG_DOUBLE_INT, MPI.BYTE)]))"
    )
    by_int = fresh(code.format(first="MPI.INT.Create_contiguous(2).Commit()"))
    by_double = fresh(code.format(first="MPI.DOUBLE_INT.Create_vector(2, 1, 2).Commit()"))
    assert by_int == by_double
    assert len(set(by_int)) == 4  # type: ignore[arg-type]


def test_a_topology_made_first_gets_its_class() -> None:
    """``Create_cart`` before ``MPI.Cartcomm`` was ever named: the class's chapter is
    imported then (a rank forked from a template that imported only what starting MPI
    needs is in this state)."""
    found = fresh(
        "import json\nfrom ipympi import MPI\n"
        "cart = MPI.COMM_SELF.Create_cart([1], periods=[0])\n"
        "graph = MPI.COMM_SELF.Create_dist_graph_adjacent([], [])\n"
        "print(json.dumps([type(cart).__name__, type(graph).__name__,"
        " isinstance(cart, MPI.Cartcomm)]))"
    )
    assert found == ["Cartcomm", "Distgraphcomm", True]
