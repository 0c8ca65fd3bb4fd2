"""``docs/make_images.py`` makes the README's images from a real run of ranks."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import ROOT, _env

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.timeout(90)
def test_make_images_draws_real_output_and_a_trace(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "make_images.py"), "--out", str(tmp_path), "-n", "3"],
        capture_output=True,
        text=True,
        timeout=80,
        env=_env(),
    )
    assert proc.returncode == 0, proc.stderr
    output = ET.parse(tmp_path / "per_rank_output.svg").getroot()
    text = "".join(output.itertext())
    for rank in range(3):
        assert f"[stdout:{rank}] rank {rank} of 3" in text
    assert "[stderr:1] a warning from rank 1 only" in text
    trace = ET.parse(tmp_path / "trace.svg").getroot()
    labels = "".join(trace.itertext())
    for call in ("Barrier", "Allreduce", "Bcast"):
        assert call in labels
    # The README's images are committed; they must be the script's current output format.
    for name in ("per_rank_output.svg", "trace.svg"):
        assert ET.parse(ROOT / "docs" / "images" / name).getroot().tag == f"{SVG}svg"
