"""``ipympi lab``: install the ipympi kernel and open JupyterLab on the examples.

One command from a fresh checkout to a notebook running on N ranks: it
registers the kernel spec in the active environment (as ``ipympi install``
does) and then replaces itself with ``python -m jupyterlab``, so that Ctrl-C
and the exit status are JupyterLab's own. Options this command does not know
are passed on to JupyterLab.

The notebooks open in the project's ``examples/`` directory when ipympi runs
from a source checkout (or an editable install of one); otherwise in the
current directory.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from . import kernelspec as _kernelspec

__all__ = ["examples_dir", "jupyterlab_argv", "main", "make_parser"]

LAB_MISSING = "JupyterLab is not installed: pip install 'ipympi[lab]'"

# JupyterLab options that choose the directory it serves.
_DIR_OPTIONS = ("--notebook-dir", "--ServerApp.root_dir", "--ServerApp.notebook_dir")


def examples_dir() -> Path | None:
    """The ``examples/`` directory of the source checkout ipympi runs from, if any."""
    root = Path(__file__).resolve().parents[2]
    examples = root / "examples"
    if (root / "pyproject.toml").is_file() and examples.is_dir():
        return examples
    return None


def jupyterlab_argv(lab_args: Sequence[str], notebook_dir: str | os.PathLike[str]) -> list[str]:
    """The command that runs JupyterLab with ``lab_args``, serving ``notebook_dir``.

    ``notebook_dir`` is left out when ``lab_args`` choose the directory or name
    an existing file or directory to open: JupyterLab then serves that one.
    """
    chooses_dir = any(
        arg.split("=", 1)[0] in _DIR_OPTIONS or (not arg.startswith("-") and os.path.exists(arg))
        for arg in lab_args
    )
    command = [sys.executable, "-m", "jupyterlab"]
    if not chooses_dir:
        command += ["--notebook-dir", str(notebook_dir)]
    return [*command, *lab_args]


def make_parser(prog: str = "ipympi lab") -> argparse.ArgumentParser:
    """The parser of ``ipympi lab``'s own options; the others go to JupyterLab."""
    parser = argparse.ArgumentParser(
        prog=prog,
        usage=f"{prog} [-h] [--user] [--no-install] [-n N] [JUPYTER LAB ARGS...]",
        description="Install the ipympi kernel spec (in the active environment, "
        "like 'ipympi install') and run JupyterLab on the examples. Other "
        "arguments, and all arguments after --, are passed on to JupyterLab.",
        allow_abbrev=False,  # --no... and --us... may be JupyterLab's options
    )
    parser.add_argument(
        "--user", action="store_true",
        help="install the kernel spec for the current user instead of the active environment",
    )  # fmt: skip
    parser.add_argument(
        "--no-install", dest="install", action="store_false",
        help="use the kernel spec already installed",
    )  # fmt: skip
    parser.add_argument(
        "-n", "-np", "--np", dest="np", metavar="N", type=_kernelspec._positive_int,
        default=None, help="number of ranks the kernel starts",
    )  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "ipympi lab") -> int:
    """Run ``ipympi lab ARGS`` (default: ``sys.argv[1:]``); return the exit status.

    On success JupyterLab replaces this process (on POSIX) and this does not return.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    passed: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, passed = args[:cut], args[cut + 1 :]
    options, lab_args = make_parser(prog).parse_known_args(args)
    lab_args += passed
    if importlib.util.find_spec("jupyterlab") is None:
        sys.stderr.write(LAB_MISSING + "\n")
        return 1
    if options.install:
        status = _kernelspec.run_install(prog, user=options.user, np=options.np)
        if status:
            return status
    command = jupyterlab_argv(lab_args, examples_dir() or Path.cwd())
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        os.execv(command[0], command)
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
