"""The exact conversion between floating-point formats used for external32 long doubles
(:mod:`ipympi.core.extfloat`), checked bit by bit without processes."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from ipympi.core.extfloat import BINARY64, BINARY128, NATIVE, X87, ExternalFloats, convert

X87_ONE = 0x3FFF_8000_0000_0000_0000
Q_ONE = 0x3FFF << 112


def double_bits(value: float) -> int:
    return int.from_bytes(struct.pack(">d", value), "big")


def x87(sign: int, biased: int, significand: int) -> int:
    return (sign << 79) | (biased << 64) | significand


def quad(sign: int, biased: int, fraction: int) -> int:
    return (sign << 127) | (biased << 112) | fraction


@pytest.mark.parametrize(
    ("x87_bits", "quad_bits"),
    [
        (X87_ONE, Q_ONE),  # 1.0
        (x87(1, 0x4000, 0xA000_0000_0000_0000), quad(1, 0x4000, 1 << 110)),  # -2.5
        (x87(0, 0, 0), 0),  # +0
        (x87(1, 0, 0), quad(1, 0, 0)),  # -0
        (x87(0, 0x7FFF, 1 << 63), quad(0, 0x7FFF, 0)),  # +inf
        (x87(1, 0x7FFF, 1 << 63), quad(1, 0x7FFF, 0)),  # -inf
        (x87(0, 0x7FFF, 0xC000_0000_0000_0000), quad(0, 0x7FFF, 1 << 111)),  # quiet NaN
        (x87(1, 0x7FFF, 0xC000_0000_0000_0001), quad(1, 0x7FFF, (1 << 111) | (1 << 49))),
        (x87(0, 1, 1 << 63), quad(0, 1, 0)),  # smallest normal
        (x87(0, 0x7FFE, (1 << 64) - 1), quad(0, 0x7FFE, ((1 << 63) - 1) << 49)),  # largest
        # x87 subnormals are normal numbers' neighbours in binary128's subnormal range:
        # the same exponent field (0) and the fraction shifted into place.
        (x87(0, 0, 1), quad(0, 0, 1 << 49)),  # smallest subnormal
        (x87(1, 0, (1 << 63) - 1), quad(1, 0, ((1 << 63) - 1) << 49)),  # largest subnormal
    ],
)
def test_x87_and_binary128_convert_exactly_both_ways(x87_bits: int, quad_bits: int) -> None:
    assert convert(x87_bits, X87, BINARY128) == quad_bits
    assert convert(quad_bits, BINARY128, X87) == x87_bits


def test_invalid_x87_encodings_become_nans() -> None:
    for bits in (
        x87(0, 0x7FFF, 0),  # pseudo-infinity
        x87(0, 0x7FFF, 1 << 40),  # pseudo-NaN
        x87(1, 0x1234, 1 << 62),  # unnormal
    ):
        result = convert(bits, X87, BINARY128)
        assert (result >> 112) & 0x7FFF == 0x7FFF and result & ((1 << 112) - 1)


def test_pseudo_denormal_is_the_smallest_normal() -> None:
    assert convert(x87(0, 0, 1 << 63), X87, BINARY128) == quad(0, 1, 0)


def test_narrowing_rounds_to_nearest_even() -> None:
    half = 1 << 48  # half of the last x87 bit, in binary128's fraction
    assert convert(Q_ONE | half, BINARY128, X87) == X87_ONE  # tie: to even (down)
    assert convert(Q_ONE | half | 1, BINARY128, X87) == X87_ONE + 1  # above the tie: up
    assert convert(Q_ONE | (3 * half), BINARY128, X87) == X87_ONE + 2  # tie: to even (up)
    # rounding up the largest significand carries into the exponent
    assert convert(quad(0, 0x3FFF, (1 << 112) - 1), BINARY128, X87) == x87(0, 0x4000, 1 << 63)


def test_narrowing_overflows_to_infinity_and_underflows_to_zero() -> None:
    largest_quad = quad(0, 0x7FFE, (1 << 112) - 1)
    assert convert(largest_quad, BINARY128, X87) == x87(0, 0x7FFF, 1 << 63)
    assert convert(largest_quad, BINARY128, BINARY64) == double_bits(float("inf"))
    assert convert(quad(1, 0, 1), BINARY128, X87) == x87(1, 0, 0)  # -tiny -> -0
    # a NaN whose payload does not survive stays a (quiet) NaN
    assert convert(quad(0, 0x7FFF, 1), BINARY128, X87) == x87(0, 0x7FFF, 0xC000_0000_0000_0000)


def test_double_widens_and_narrows_back_exactly() -> None:
    rng = random.Random(1)
    values = [0.0, -0.0, 1.5, -1e-310, 5e-324, 1.7976931348623157e308, float("inf")]
    values += [rng.uniform(-1e300, 1e300) * rng.choice([1, 1e-300, 1e-310]) for _ in range(500)]
    for value in values:
        bits = double_bits(value)
        assert convert(convert(bits, BINARY64, BINARY128), BINARY128, BINARY64) == bits
        assert convert(convert(bits, BINARY64, X87), X87, BINARY64) == bits


@pytest.mark.skipif(NATIVE != X87, reason="the native long double is not x87")
def test_x87_to_double_rounds_as_the_hardware() -> None:
    rng = random.Random(2)
    raw = np.frombuffer(rng.randbytes(16 * 2000), dtype=np.uint8).reshape(-1, 16).copy()
    raw[:, 7] |= 0x80  # integer bit set: normal numbers
    raw[:, 9] = np.where(raw[:, 9] & 0x7F == 0x7F, 0x3F, raw[:, 9])  # no NaNs or infinities
    raw[:, 8] = np.where(raw[:, 9] & 0x7F == 0x3F, rng.randrange(256), raw[:, 8])
    values = raw.reshape(-1).view(np.longdouble)
    with np.errstate(over="ignore", under="ignore"):
        doubles = values.astype(np.float64)
    for item, expected in zip(raw, doubles):
        bits = int.from_bytes(item[:10].tobytes(), "little")
        assert convert(bits, X87, BINARY64) == double_bits(float(expected))


@pytest.mark.skipif(NATIVE is None, reason="unknown long double format")
def test_external_floats_round_trip_arrays() -> None:
    info = np.finfo(np.longdouble)
    values = np.array(
        [1, -2.5, 0, np.inf, -np.inf, info.max, -info.tiny, info.tiny / 8, 1 / 3],
        dtype=np.longdouble,
    )
    floats = ExternalFloats(values.itemsize, 1)
    external = floats.encode(values.view(floats.native))
    assert external.dtype.itemsize == 16
    assert bytes(external[0]) == Q_ONE.to_bytes(16, "big")
    back = floats.decode(external).view(np.longdouble)
    assert back.tolist() == values.tolist()
    complexes = np.array([1 + 2j, -0.5j], dtype=np.clongdouble)
    pairs = ExternalFloats(complexes.itemsize, 2)
    external = pairs.encode(complexes.view(pairs.native))
    assert external.dtype.itemsize == 32
    assert pairs.decode(external).view(np.clongdouble).tolist() == complexes.tolist()
