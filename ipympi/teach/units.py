"""Units for the views of a trace: times, byte counts and counted words, as people read them.

Shared by the model's summary (:mod:`.trace`), its drawings (:mod:`.diagram`,
:mod:`.textchart`, :mod:`.timescale`) and the explanations (:mod:`.explain`).
"""

from __future__ import annotations

__all__ = ["format_bytes", "format_time", "plural"]


def _trim(number: float, digits: int) -> str:
    text = f"{number:.{digits}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _unit_for(seconds: float) -> tuple[str, float]:
    magnitude = abs(seconds)
    if magnitude < 1e-3:
        return "µs", 1e6
    if magnitude < 1.0:
        return "ms", 1e3
    return "s", 1.0


def format_time(seconds: float, unit_of: float | None = None) -> str:
    """``seconds`` as ``12.3 µs`` / ``4.56 ms`` / ``1.2 s`` (3 significant digits).

    ``unit_of`` picks the unit from another magnitude, so the ticks of one
    axis share a unit.
    """
    unit, scale = _unit_for(seconds if unit_of is None else unit_of)
    value = seconds * scale
    magnitude = abs(value)
    digits = 0 if magnitude >= 100 else 1 if magnitude >= 10 else 2
    return f"{_trim(value, digits)} {unit}"


def plural(count: int, word: str) -> str:
    """``1 rank``, ``4 ranks``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def format_bytes(nbytes: int) -> str:
    """``8 B``, ``12.5 KiB``, ``3 MiB``."""
    if nbytes < 1024:
        return f"{nbytes} B"
    for unit, scale in (("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)):
        if nbytes < scale * 1024 or unit == "GiB":
            return f"{_trim(nbytes / scale, 1)} {unit}"
    raise AssertionError("unreachable")
