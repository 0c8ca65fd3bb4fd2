"""external32 for ``long double``: the native format <-> IEEE 754 binary128, exactly.

The external32 data representation (MPI-4.1 §14.5.2) stores every ``long double`` as a
16-byte, big-endian IEEE 754 quadruple (binary128). numpy has no such type, and on x86
the native ``long double`` is the x87 80-bit extended format (15-bit exponent, 64-bit
significand with an explicit integer bit), stored in 16 bytes with 6 of padding. The
conversion is done here with Python integers, element by element (external32 of long
doubles is rare and small); it is exact both ways for every value the narrower format
holds, and rounds to nearest, ties to even, otherwise.

A format is described by :class:`FloatFormat`; :data:`NATIVE` is the one of this
platform's ``long double`` (x87, binary128 or binary64), or ``None`` when it is none of
those (IBM double-double), in which case long doubles have no external32 form.
Infinities and signed zeros map to themselves, NaNs keep their sign and the top of
their payload (a NaN whose kept payload would be empty becomes a quiet NaN); the
invalid x87 encodings (pseudo-infinities, pseudo-NaNs, unnormals) become quiet NaNs.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, NamedTuple

from .lazynumpy import np

__all__ = [
    "BINARY64",
    "BINARY128",
    "NATIVE",  # noqa: F822  (read when asked: see __getattr__)
    "X87",
    "ExternalFloats",
    "FloatFormat",
    "convert",
    "external_floats",
]


class FloatFormat(NamedTuple):
    """A binary floating-point format: ``exp_bits`` of biased exponent and ``frac_bits``
    of fraction below the leading bit, which is stored only if ``explicit_int`` (x87)."""

    exp_bits: int
    frac_bits: int
    explicit_int: bool = False

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def field_bits(self) -> int:
        """Bits of the significand field (the fraction, and the integer bit if stored)."""
        return self.frac_bits + self.explicit_int

    @property
    def nbytes(self) -> int:
        """Bytes holding a value (without any padding of its C type)."""
        return (1 + self.exp_bits + self.field_bits + 7) // 8


X87 = FloatFormat(15, 63, explicit_int=True)
BINARY128 = FloatFormat(15, 112)
BINARY64 = FloatFormat(11, 52)

# A decoded value: (sign, kind, significand, exponent) with kind "num" for
# significand * 2**exponent (significand 0: a zero), "inf", or "nan" with the payload
# left-aligned in a 128-bit significand.
_Value = tuple[int, str, int, int]
_PAYLOAD_BITS = 128


def _decode(fmt: FloatFormat, bits: int) -> _Value:
    field = bits & ((1 << fmt.field_bits) - 1)
    biased = (bits >> fmt.field_bits) & ((1 << fmt.exp_bits) - 1)
    sign = bits >> (fmt.field_bits + fmt.exp_bits)
    fraction = field & ((1 << fmt.frac_bits) - 1)
    leading = field >> fmt.frac_bits if fmt.explicit_int else int(biased != 0)
    if biased == (1 << fmt.exp_bits) - 1:
        if fraction == 0 and (leading or not fmt.explicit_int):
            return sign, "inf", 0, 0
        if fmt.explicit_int and not leading:  # pseudo-infinity or pseudo-NaN
            fraction |= 1 << (fmt.frac_bits - 1)
        return sign, "nan", fraction << (_PAYLOAD_BITS - fmt.frac_bits), 0
    if biased and fmt.explicit_int and not leading:  # unnormal: not a number
        return sign, "nan", 1 << (_PAYLOAD_BITS - 1), 0
    significand = (leading << fmt.frac_bits) | fraction
    return sign, "num", significand, max(biased, 1) - fmt.bias - fmt.frac_bits


def _round_shift(value: int, shift: int) -> int:
    """``value * 2**-shift`` rounded to the nearest integer, ties to even."""
    if shift <= 0:
        return value << -shift
    kept = value >> shift
    rest = value - (kept << shift)
    half = 1 << (shift - 1)
    if rest > half or (rest == half and kept & 1):
        kept += 1
    return kept


def _encode(fmt: FloatFormat, value: _Value) -> int:
    sign, kind, significand, exponent = value
    top_exp = (1 << fmt.exp_bits) - 1
    leading_bit = 1 << fmt.frac_bits
    if kind == "nan":
        fraction = significand >> (_PAYLOAD_BITS - fmt.frac_bits)
        field = (fraction or leading_bit >> 1) | (leading_bit if fmt.explicit_int else 0)
        biased = top_exp
    elif kind == "inf" or significand == 0:
        field = leading_bit if kind == "inf" and fmt.explicit_int else 0
        biased = top_exp if kind == "inf" else 0
    else:
        # The exponent of the last kept bit: full precision, but no finer than subnormals.
        top = exponent + significand.bit_length() - 1
        last = max(top, 1 - fmt.bias) - fmt.frac_bits
        kept = _round_shift(significand, last - exponent)
        if kept >> (fmt.frac_bits + 1):  # rounding carried into a new leading bit
            kept >>= 1
            last += 1
        if kept & leading_bit:
            biased = last + fmt.frac_bits + fmt.bias
            field = kept if fmt.explicit_int else kept - leading_bit
            if biased >= top_exp:
                biased, field = top_exp, leading_bit if fmt.explicit_int else 0
        else:
            biased, field = 0, kept
    return (((sign << fmt.exp_bits) | biased) << fmt.field_bits) | field


def convert(bits: int, source: FloatFormat, target: FloatFormat) -> int:
    """The bits of ``target`` closest to the value whose ``source`` bits are ``bits``."""
    return _encode(target, _decode(source, bits))


@functools.cache
def native_format() -> FloatFormat | None:
    """The format of this platform's long double (:data:`NATIVE`), None if unknown."""
    info = np.finfo(np.longdouble)
    for fmt in (X87, BINARY128, BINARY64):
        if (info.nexp, info.nmant) == (fmt.exp_bits, fmt.frac_bits):
            return fmt
    return None


def __getattr__(name: str) -> Any:
    if name == "NATIVE":  # read when asked: numpy tells it
        return native_format()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ExternalFloats:
    """The external32 conversion of ``count`` native long doubles (1 for ``long double``,
    2 for its complex), for :mod:`ipympi.core.typemap_copy`.

    ``native`` is the numpy dtype to read one item of the packed form as raw bytes,
    ``itemsize`` the bytes of its external32 form; :meth:`encode` and :meth:`decode`
    convert arrays of such items.
    """

    def __init__(self, native_size: int, count: int) -> None:
        assert native_format() is not None
        self.count = count
        self.native: np.dtype = np.dtype((np.void, native_size))
        self.external: np.dtype = np.dtype((np.void, 16 * count))
        self.itemsize = 16 * count
        self._stride = native_size // count

    def encode(self, items: np.ndarray) -> np.ndarray:
        """Native items (of ``native``) -> external32 items (of ``external``)."""
        native = native_format()
        assert native is not None
        raw = np.ascontiguousarray(items).view(np.uint8).reshape(-1, self._stride)
        out = np.empty((len(raw), 16), dtype=np.uint8)
        for row, value in zip(out, raw):
            bits = int.from_bytes(value[: native.nbytes].tobytes(), sys.byteorder)
            row[:] = list(convert(bits, native, BINARY128).to_bytes(16, "big"))
        return out.reshape(-1).view(self.external)

    def decode(self, items: np.ndarray) -> np.ndarray:
        """external32 items (of ``external``) -> native items (of ``native``), padding 0."""
        native = native_format()
        assert native is not None
        raw = np.ascontiguousarray(items).view(np.uint8).reshape(-1, 16)
        out = np.zeros((len(raw), self._stride), dtype=np.uint8)
        for row, value in zip(out, raw):
            bits = convert(int.from_bytes(value.tobytes(), "big"), BINARY128, native)
            row[: native.nbytes] = list(bits.to_bytes(native.nbytes, sys.byteorder))
        return out.reshape(-1).view(self.native)

    def __repr__(self) -> str:
        return f"ExternalFloats({self.native.itemsize}, {self.count})"


def external_floats(dtype: np.dtype[Any]) -> ExternalFloats | None:
    """The external32 conversion of a long double (complex) numpy dtype, or ``None`` when
    this platform's long double has no known format."""
    if native_format() is None:
        return None
    return ExternalFloats(dtype.itemsize, 2 if dtype.kind == "c" else 1)
