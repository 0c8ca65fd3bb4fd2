"""``ipympi install``: register the ipympi kernel with Jupyter.

A Jupyter kernel spec is a directory with a ``kernel.json`` (how to start the
kernel) and optional logos. ipympi's spec starts the controller kernel,
``python -m ipympi.kernel``, with the Python that installs it, so the kernel
always runs in the environment where ipympi is installed.

By default the spec goes into the active environment (``sys.prefix``), not the
system-wide or per-user Jupyter directories: a kernel installed from inside a
virtualenv or conda environment then belongs to that environment, and Jupyter
started from it finds the kernel. ``--user`` and ``--prefix`` choose otherwise.

The logos are drawn here and encoded as PNG with :mod:`zlib` alone, so that
installing works from any installed copy of the package with no image library
and no data files.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "DISPLAY_NAME",
    "KERNEL_NAME",
    "LOGO_SIZES",
    "NP_ENV",
    "install",
    "kernel_dict",
    "logo_png",
    "main",
    "make_parser",
    "run_install",
    "write_kernel_spec",
]

KERNEL_NAME = "ipympi"
DISPLAY_NAME = "ipympi (parallel Python)"
NP_ENV = "IPYMPI_NP"  # number of ranks the kernel starts, set by ``install -n N``
LOGO_SIZES = (32, 64)

# The logo: a dark hub (the controller) and four coloured dots around it (the ranks).
# Each shape is (centre x, centre y, radius) in units of the image size, and RGB.
_HUB = ((0.5, 0.5, 0.13), (0x4D, 0x4D, 0x4D))
_RING, _DOT = 0.32, 0.16
_DOT_COLOURS = ((0xF3, 0x77, 0x26), (0x1F, 0x77, 0xB4), (0x2C, 0xA0, 0x2C), (0x94, 0x67, 0xBD))


def kernel_dict(
    python: str | None = None,
    extra_env: dict[str, str] | None = None,
    display_name: str = DISPLAY_NAME,
) -> dict[str, object]:
    """The contents of ``kernel.json``: start ``python -m ipympi.kernel``.

    ``python`` defaults to this interpreter; ``extra_env`` (if any) becomes the
    spec's ``env``, set in the kernel's environment.
    """
    spec: dict[str, object] = {
        "argv": [python or sys.executable, "-m", "ipympi.kernel", "-f", "{connection_file}"],
        "display_name": display_name,
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {"debugger": False},
    }
    if extra_env:
        spec["env"] = {str(key): str(value) for key, value in extra_env.items()}
    return spec


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def _encode_png(width: int, height: int, rgba: bytes) -> bytes:
    """A PNG image of ``rgba`` (8-bit RGBA pixels, row by row, no filtering)."""
    stride = 4 * width
    raw = b"".join(b"\0" + rgba[y * stride : (y + 1) * stride] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return b"".join(
        [
            b"\x89PNG\r\n\x1a\n",
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", zlib.compress(raw, 9)),
            _chunk(b"IEND", b""),
        ]
    )


def logo_png(size: int) -> bytes:
    """The ipympi logo as a ``size`` x ``size`` PNG on a transparent background."""
    shapes = [_HUB]
    for i, colour in enumerate(_DOT_COLOURS):
        angle = math.pi / 4 + i * math.pi / 2
        x, y = 0.5 + _RING * math.cos(angle), 0.5 - _RING * math.sin(angle)
        shapes.append(((x, y, _DOT), colour))
    pixels = bytearray(4 * size * size)
    for y in range(size):
        for x in range(size):
            for (cx, cy, r), colour in shapes:
                # Coverage of a disc, antialiased over one pixel at its edge.
                distance = math.hypot(x + 0.5 - cx * size, y + 0.5 - cy * size)
                coverage = min(1.0, max(0.0, r * size - distance + 0.5))
                if coverage > 0:
                    i = 4 * (y * size + x)
                    pixels[i : i + 4] = bytes([*colour, round(255 * coverage)])
                    break
    return _encode_png(size, size, bytes(pixels))


def write_kernel_spec(
    path: str | os.PathLike[str],
    python: str | None = None,
    extra_env: dict[str, str] | None = None,
    display_name: str = DISPLAY_NAME,
) -> Path:
    """Write a kernel spec directory (``kernel.json`` and logos) at ``path``; return it."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    spec = kernel_dict(python, extra_env, display_name)
    (directory / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
    for size in LOGO_SIZES:
        (directory / f"logo-{size}x{size}.png").write_bytes(logo_png(size))
    return directory


def install(
    user: bool = False,
    prefix: str | None = None,
    np: int | None = None,
    name: str = KERNEL_NAME,
) -> str:
    """Install the ipympi kernel spec as ``name``; return the directory it went to.

    The destination is ``PREFIX/share/jupyter/kernels/NAME`` with ``prefix``
    defaulting to the active environment (``sys.prefix``), or the per-user
    kernel directory if ``user``. ``np`` sets the number of ranks the kernel
    starts (``IPYMPI_NP`` in the spec's environment). An existing spec of the
    same name is replaced.
    """
    from jupyter_client.kernelspec import KernelSpecManager

    if user and prefix:
        raise ValueError("choose either user or prefix, not both")
    if np is not None and np < 1:
        raise ValueError(f"the number of ranks must be positive, not {np}")
    if not user and prefix is None:
        prefix = sys.prefix
    extra_env = None if np is None else {NP_ENV: str(np)}
    display_name = DISPLAY_NAME if np is None else f"ipympi (parallel Python, {np} ranks)"
    with tempfile.TemporaryDirectory(prefix="ipympi-kernelspec-") as tmp:
        # A fresh subdirectory: the temporary directory itself is private (0700),
        # and its mode would be copied to the installed spec.
        source = write_kernel_spec(Path(tmp) / name, extra_env=extra_env, display_name=display_name)
        return KernelSpecManager().install_kernel_spec(
            str(source), name, user=user, prefix=None if user else prefix
        )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def make_parser(prog: str = "ipympi install") -> argparse.ArgumentParser:
    """The parser of ``ipympi install``'s options."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Register the ipympi kernel with Jupyter. By default the kernel "
        "spec goes into the active environment (sys.prefix/share/jupyter/kernels), "
        "so Jupyter run from this environment finds it.",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--user", action="store_true",
        help="install for the current user instead of the active environment",
    )  # fmt: skip
    where.add_argument(
        "--prefix", metavar="P",
        help="install into P/share/jupyter/kernels (default: the active environment, "
        f"{sys.prefix})",
    )  # fmt: skip
    parser.add_argument(
        "--name", default=KERNEL_NAME,
        help=f"the kernel spec's name (default: {KERNEL_NAME})",
    )  # fmt: skip
    parser.add_argument(
        "-n", "-np", "--np", dest="np", metavar="N", type=_positive_int, default=None,
        help=f"number of ranks the kernel starts (sets {NP_ENV} in the spec)",
    )  # fmt: skip
    return parser


def _not_on_path(destination: str) -> bool:
    """Whether Jupyter would not look for kernels where ``destination`` is."""
    from jupyter_client.kernelspec import KernelSpecManager

    parent = os.path.realpath(os.path.dirname(destination))
    return all(os.path.realpath(d) != parent for d in KernelSpecManager().kernel_dirs)


def run_install(
    prog: str, user: bool = False, prefix: str | None = None, np: int | None = None,
    name: str = KERNEL_NAME,
) -> int:  # fmt: skip
    """``install(...)`` for a command line: report the result; return the exit status."""
    try:
        destination = install(user=user, prefix=prefix, np=np, name=name)
    except PermissionError as exc:
        where = exc.filename or prefix or sys.prefix
        hint = "" if user else "; try --user, or --prefix with a writable directory"
        sys.stderr.write(f"{prog}: permission denied writing to {where}{hint}\n")
        return 1
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"{prog}: cannot install the kernel spec: {exc}\n")
        return 1
    print(f"Installed kernel spec {os.path.basename(destination)!r} in {destination}")
    if _not_on_path(destination):
        data_dir = os.path.dirname(os.path.dirname(destination))
        print(f"Note: Jupyter does not look in {data_dir}; set JUPYTER_PATH={data_dir} to use it")
    return 0


def main(argv: Sequence[str] | None = None, prog: str = "ipympi install") -> int:
    """Run ``ipympi install ARGS`` (default: ``sys.argv[1:]``); return the exit status."""
    args = make_parser(prog).parse_args(sys.argv[1:] if argv is None else argv)
    return run_install(prog, user=args.user, prefix=args.prefix, np=args.np, name=args.name)


if __name__ == "__main__":
    sys.exit(main())
