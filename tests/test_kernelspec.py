"""The ``ipympi install`` and ``ipympi lab`` commands and the kernel spec they write."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import stat
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager

from ipympi.notebook import kernelspec as _kernelspec
from ipympi.notebook import lab as _lab

ROOT = Path(__file__).resolve().parent.parent
KERNELS = Path("share", "jupyter", "kernels")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IPYMPI_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def _ipympi(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ipympi", *args],
        capture_output=True, text=True, env=_env(), timeout=60,
    )  # fmt: skip


def _png_rgba(data: bytes) -> tuple[int, int, bytes]:
    """Check ``data`` is a valid 8-bit RGBA PNG; return its width, height and pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks: list[tuple[bytes, bytes]] = []
    pos = 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        tag, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(tag + body), tag
        chunks.append((tag, body))
        pos += 12 + length
    assert pos == len(data)
    assert chunks[0][0] == b"IHDR" and chunks[-1] == (b"IEND", b"")
    width, height, depth, colour, *_ = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour) == (8, 6)
    raw = zlib.decompress(b"".join(body for tag, body in chunks if tag == b"IDAT"))
    assert len(raw) == height * (1 + 4 * width)
    rows = [raw[y * (1 + 4 * width) : (y + 1) * (1 + 4 * width)] for y in range(height)]
    assert all(row[0] == 0 for row in rows)  # filter type None, as written
    return width, height, b"".join(row[1:] for row in rows)


def _check_logos(directory: Path) -> None:
    for size in (32, 64):
        width, height, pixels = _png_rgba((directory / f"logo-{size}x{size}.png").read_bytes())
        assert (width, height) == (size, size)
        alpha = pixels[3::4]
        assert alpha[0] == 0  # transparent corner
        assert alpha[(size // 2) * size + size // 2] == 255  # opaque centre
        assert len(set(zip(pixels[0::4], pixels[1::4], pixels[2::4]))) >= 5  # colourful


# -- the spec ------------------------------------------------------------------------------------


def test_kernel_dict() -> None:
    spec = _kernelspec.kernel_dict()
    assert spec == {
        "argv": [sys.executable, "-m", "ipympi.kernel", "-f", "{connection_file}"],
        "display_name": _kernelspec.DISPLAY_NAME,
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {"debugger": False},
    }
    assert _kernelspec.KERNEL_NAME == "ipympi"
    spec = _kernelspec.kernel_dict("/opt/py/bin/python", {"IPYMPI_NP": 4})
    assert spec["argv"][0] == "/opt/py/bin/python"
    assert spec["env"] == {"IPYMPI_NP": "4"}
    assert "env" not in _kernelspec.kernel_dict(extra_env={})


def test_checked_in_spec_matches() -> None:
    directory = ROOT / "kernelspec" / "ipympi"
    spec = json.loads((directory / "kernel.json").read_text(encoding="utf-8"))
    assert spec == _kernelspec.kernel_dict("python")
    _check_logos(directory)


@pytest.mark.parametrize("size", [16, 32, 64])
def test_logo_png(size: int) -> None:
    width, height, pixels = _png_rgba(_kernelspec.logo_png(size))
    assert (width, height, len(pixels)) == (size, size, 4 * size * size)


# -- install -------------------------------------------------------------------------------------


def test_install_prefix(tmp_path: Path) -> None:
    destination = _kernelspec.install(prefix=str(tmp_path))
    assert Path(destination) == tmp_path / KERNELS / "ipympi"
    spec = json.loads((Path(destination) / "kernel.json").read_text(encoding="utf-8"))
    assert spec["argv"][0] == sys.executable
    assert spec["argv"][1:3] == ["-m", "ipympi.kernel"]
    assert "env" not in spec
    _check_logos(Path(destination))
    if os.name == "posix":  # readable by everyone, not private like a temporary directory
        assert stat.S_IMODE(os.stat(destination).st_mode) & 0o005 == 0o005

    found = KernelSpecManager(kernel_dirs=[str(tmp_path / KERNELS)])
    assert found.find_kernel_specs()["ipympi"] == destination
    kernel = found.get_kernel_spec("ipympi")
    assert kernel.argv == spec["argv"]
    assert kernel.interrupt_mode == "signal"
    assert kernel.language == "python"


def test_install_replaces_and_names(tmp_path: Path) -> None:
    _kernelspec.install(prefix=str(tmp_path), np=2)
    destination = Path(_kernelspec.install(prefix=str(tmp_path), np=5, name="ipympi-5"))
    assert destination.name == "ipympi-5"
    spec = json.loads((destination / "kernel.json").read_text(encoding="utf-8"))
    assert spec["env"] == {"IPYMPI_NP": "5"}
    assert "5 ranks" in spec["display_name"]
    again = Path(_kernelspec.install(prefix=str(tmp_path)))
    assert "env" not in json.loads((again / "kernel.json").read_text(encoding="utf-8"))
    assert sorted(p.name for p in (tmp_path / KERNELS).iterdir()) == ["ipympi", "ipympi-5"]


def test_install_defaults_to_active_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, dict]] = []

    def fake(self, source_dir, kernel_name=None, **kwargs):  # type: ignore[no-untyped-def]
        assert (Path(source_dir) / "kernel.json").is_file()
        calls.append((kernel_name, kwargs))
        return "/somewhere/ipympi"

    monkeypatch.setattr(KernelSpecManager, "install_kernel_spec", fake)
    assert _kernelspec.install() == "/somewhere/ipympi"
    assert _kernelspec.install(user=True) == "/somewhere/ipympi"
    assert calls == [
        ("ipympi", {"user": False, "prefix": sys.prefix}),
        ("ipympi", {"user": True, "prefix": None}),
    ]
    with pytest.raises(ValueError):
        _kernelspec.install(user=True, prefix="/x")


def test_install_command(tmp_path: Path) -> None:
    result = _ipympi("install", "--prefix", str(tmp_path))
    assert result.returncode == 0, result.stderr
    destination = tmp_path / KERNELS / "ipympi"
    assert f"Installed kernel spec 'ipympi' in {destination}" in result.stdout
    spec = json.loads((destination / "kernel.json").read_text(encoding="utf-8"))
    assert spec["argv"][0] == sys.executable


def test_install_command_np(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _kernelspec.main(["-n", "3", "--prefix", str(tmp_path)], prog="ipympi install") == 0
    destination = tmp_path / KERNELS / "ipympi"
    out = capsys.readouterr().out
    assert str(destination) in out
    assert f"set JUPYTER_PATH={tmp_path / 'share' / 'jupyter'}" in out  # not on Jupyter's path
    spec = json.loads((destination / "kernel.json").read_text(encoding="utf-8"))
    assert spec["env"] == {"IPYMPI_NP": "3"}

    # Once on Jupyter's path, Jupyter finds the kernel and there is nothing to note.
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share" / "jupyter"))
    assert KernelSpecManager().get_kernel_spec("ipympi").env == {"IPYMPI_NP": "3"}
    assert _kernelspec.main(["--prefix", str(tmp_path)], prog="ipympi install") == 0
    assert "JUPYTER_PATH" not in capsys.readouterr().out


@pytest.mark.parametrize("args", [["-n", "0"], ["--user", "--prefix", "/x"]])
def test_install_command_bad_arguments(args: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _kernelspec.main(args)
    assert exc.value.code == 2


def test_install_permission_denied(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def denied(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "Permission denied", "/usr/share/jupyter/kernels/ipympi")

    monkeypatch.setattr(KernelSpecManager, "install_kernel_spec", denied)
    assert _kernelspec.main([], prog="ipympi install") == 1
    err = capsys.readouterr().err
    assert "permission denied" in err and "/usr/share/jupyter/kernels/ipympi" in err
    assert "--user" in err


def test_install_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert _kernelspec.main(["--prefix", str(blocker)], prog="ipympi install") == 1
    assert "ipympi install: cannot install" in capsys.readouterr().err


def test_help_lists_commands() -> None:
    result = _ipympi("--help")
    assert result.returncode == 0
    assert "install" in result.stdout and "lab" in result.stdout
    result = _ipympi("install", "--help")
    assert result.returncode == 0 and "--prefix" in result.stdout


# -- lab -----------------------------------------------------------------------------------------


def _fake_jupyterlab(monkeypatch: pytest.MonkeyPatch, installed: bool) -> None:
    real = importlib.util.find_spec

    def find_spec(name, package=None):  # type: ignore[no-untyped-def]
        if name == "jupyterlab":
            return importlib.machinery.ModuleSpec(name, None) if installed else None
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


class _Exec(Exception):
    pass


@pytest.fixture
def lab_calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, list]:
    """Record the kernel spec installs and the command ``ipympi lab`` would run."""
    calls: dict[str, list] = {"install": [], "exec": []}

    def install(**kwargs):  # type: ignore[no-untyped-def]
        calls["install"].append(kwargs)
        return str(tmp_path / "ipympi")

    def execute(path, argv):  # type: ignore[no-untyped-def]
        calls["exec"].append(list(argv))
        raise _Exec

    monkeypatch.setattr(_kernelspec, "install", install)
    monkeypatch.setattr(_lab.os, "execv", execute)
    monkeypatch.setattr(_lab.subprocess, "call", lambda argv: execute(argv[0], argv))
    return calls


def test_lab_without_jupyterlab(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], lab_calls: dict
) -> None:
    _fake_jupyterlab(monkeypatch, installed=False)
    assert _lab.main([], prog="ipympi lab") == 1
    assert "JupyterLab is not installed: pip install 'ipympi[lab]'" in capsys.readouterr().err
    assert lab_calls == {"install": [], "exec": []}


def test_lab_runs_jupyterlab_on_examples(monkeypatch: pytest.MonkeyPatch, lab_calls: dict) -> None:
    _fake_jupyterlab(monkeypatch, installed=True)
    with pytest.raises(_Exec):
        _lab.main(["-n", "4", "--no-browser", "--port", "9999"], prog="ipympi lab")
    assert lab_calls["install"] == [{"user": False, "prefix": None, "np": 4, "name": "ipympi"}]
    examples = ROOT / "examples"
    assert _lab.examples_dir() == examples
    assert _lab.jupyterlab_argv([], examples)[-2:] == ["--notebook-dir", str(examples)]
    assert lab_calls["exec"] == [
        [*_lab.jupyterlab_argv([], examples), "--no-browser", "--port", "9999"]
    ]


def test_lab_options(monkeypatch: pytest.MonkeyPatch, lab_calls: dict) -> None:
    _fake_jupyterlab(monkeypatch, installed=True)
    with pytest.raises(_Exec):
        _lab.main(["--no-install", "--ServerApp.root_dir=/srv", "--", "--user"])
    assert lab_calls["install"] == []
    assert lab_calls["exec"] == [
        [sys.executable, "-m", "jupyterlab", "--ServerApp.root_dir=/srv", "--user"]
    ]
    with pytest.raises(_Exec):
        _lab.main(["--user"])
    assert lab_calls["install"][-1]["user"] is True


def test_jupyterlab_argv(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "jupyterlab"]
    assert _lab.jupyterlab_argv([], tmp_path) == [*base, "--notebook-dir", str(tmp_path)]
    notebook = tmp_path / "a.ipynb"
    notebook.write_text("{}")
    assert _lab.jupyterlab_argv([str(notebook)], "/x") == [*base, str(notebook)]
    assert _lab.jupyterlab_argv(["--notebook-dir", "/y"], "/x") == [*base, "--notebook-dir", "/y"]
