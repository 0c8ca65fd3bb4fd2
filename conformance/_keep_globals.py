"""Run one demo program unchanged and keep some of its globals, one rank's part.

``python _keep_globals.py OUTDIR NAMES PROGRAM [ARGS...]`` runs ``PROGRAM`` as ``__main__``
(with ``runpy``, ``sys.argv`` and ``sys.path[0]`` set as ``python PROGRAM ARGS`` would set
them), then pickles the globals named in ``NAMES`` (comma-separated; those the program
left undefined are skipped) to ``OUTDIR/keep.RANK.pickle``, where RANK is the rank in
``MPI.COMM_WORLD`` of the ``mpi4py`` the program imported (0 if it imported none). This
is how ``mpi4py_demos.py`` compares what a demo computed, e.g. mandelbrot's image ``M``,
bit for bit on two MPIs, without editing the demo.
"""

from __future__ import annotations

import os
import pickle
import runpy
import sys


def main() -> None:
    outdir, names, program, *args = sys.argv[1:]
    sys.argv[:] = [program, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(program))
    namespace = runpy.run_path(program, run_name="__main__")
    mpi = sys.modules.get("mpi4py.MPI")
    rank = mpi.COMM_WORLD.Get_rank() if mpi is not None else 0
    kept = {name: namespace[name] for name in names.split(",") if name in namespace}
    with open(os.path.join(outdir, f"keep.{rank}.pickle"), "wb") as stream:
        pickle.dump(kept, stream)


if __name__ == "__main__":
    main()
