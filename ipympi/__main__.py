"""The ``ipympi`` command: ``ipympi SUBCOMMAND [ARGS...]``.

``ipympi run ...``, ``python -m ipympi run ...`` and ``python -m ipympi.run ...``
are one command. This module only dispatches: each subcommand lives in its own
module, named in ``SUBCOMMANDS``, whose ``main(argv, prog=...)`` parses the rest
of the command line and returns the exit status.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

__all__ = ["SUBCOMMANDS", "main"]

# name -> (module with main(argv, prog), one-line summary for --help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("ipympi.run", "run an MPI program on N ranks, like mpiexec -n N"),
    "install": (
        "ipympi.notebook.kernelspec",
        "register the ipympi kernel spec (active environment by default)",
    ),
    "lab": ("ipympi.notebook.lab", "install the kernel spec and open JupyterLab on the examples"),
}


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ipympi")
    except metadata.PackageNotFoundError:
        return str(getattr(importlib.import_module("ipympi"), "__version__", "unknown"))


def _usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = [
        "usage: ipympi [-h] [--version] SUBCOMMAND [ARGS...]",
        "",
        "Interactive MPI for Python and Jupyter.",
        "",
        "subcommands:",
        *(f"  {name:<{width}}  {summary}" for name, (_, summary) in SUBCOMMANDS.items()),
        "",
        "options:",
        "  -h, --help  show this help message and exit",
        "  --version   show the version and exit",
        "",
        "'ipympi SUBCOMMAND --help' describes a subcommand.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ipympi ARGS`` (default: ``sys.argv[1:]``); return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stderr.write(_usage())
        return 2
    name, rest = args[0], args[1:]
    if name in ("-h", "--help"):
        sys.stdout.write(_usage())
        return 0
    if name in ("-V", "--version"):
        print(f"ipympi {_version()}")
        return 0
    entry = SUBCOMMANDS.get(name)
    if entry is None:
        choices = ", ".join(SUBCOMMANDS)
        sys.stderr.write(f"ipympi: unknown subcommand {name!r} (choose from {choices})\n")
        return 2
    module = importlib.import_module(entry[0])
    return int(module.main(rest, prog=f"ipympi {name}"))


if __name__ == "__main__":
    sys.exit(main())
