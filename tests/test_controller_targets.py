"""--targets specs select the right ranks, bad ones fail readably; rank sets print compactly."""

from __future__ import annotations

import pytest

from ipympi.core.ranksets import TargetError, format_ranks, parse_targets


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("all", [0, 1, 2, 3]),
        (" ALL ", [0, 1, 2, 3]),
        (0, [0]),
        (3, [3]),
        (-1, [3]),
        (-4, [0]),
        ("2", [2]),
        ("-1", [3]),
        ("+1", [1]),
        ("1,3", [1, 3]),
        (" 3 , 1 ", [1, 3]),
        ("3,1,3", [1, 3]),
        ("[0, 2]", [0, 2]),
        ("[0, 2,]", [0, 2]),
        ("[-1]", [3]),
        ("::2", [0, 2]),
        ("1::2", [1, 3]),
        ("1:", [1, 2, 3]),
        (":2", [0, 1]),
        (":", [0, 1, 2, 3]),
        ("1:3", [1, 2]),
        ("1 : 3", [1, 2]),
        ("-2:", [2, 3]),
        ("::-1", [0, 1, 2, 3]),
        ("0:100", [0, 1, 2, 3]),
        ("0, 2:4", [0, 2, 3]),
        ("0, 5:", [0]),
        ([2, 0], [0, 2]),
        ((3, -1, 1), [1, 3]),
        (range(1, 3), [1, 2]),
        (slice(None, None, 3), [0, 3]),
    ],
)
def test_specs_select_ranks(spec: object, expected: list[int]) -> None:
    assert parse_targets(spec, 4) == expected


def test_numpy_style_integers_are_ranks() -> None:
    class Index:
        def __index__(self) -> int:
            return 2

    assert parse_targets(Index(), 4) == [2]
    assert parse_targets([Index(), 0], 4) == [0, 2]


def test_single_rank_session() -> None:
    assert parse_targets(None, 1) == [0]
    assert parse_targets("-1", 1) == [0]
    with pytest.raises(TargetError, match=r"^rank 1 is out of range: the session has only rank 0$"):
        parse_targets(1, 1)
    with pytest.raises(TargetError, match=r"^--targets '1:' selects no rank of 0$"):
        parse_targets("1:", 1)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("5:", "--targets '5:' selects no rank of 0..3"),
        ("2:1", "--targets '2:1' selects no rank of 0..3"),
        ([], "--targets [] selects no rank of 0..3"),
        (range(0), "--targets [] selects no rank of 0..3"),
        (slice(9, None), "--targets slice(9, None, None) selects no rank of 0..3"),
        (7, "rank 7 is out of range: the session has ranks 0..3"),
        ("7", "rank 7 is out of range: the session has ranks 0..3"),
        ("0, 7", "rank 7 is out of range: the session has ranks 0..3"),
        (-5, "rank -5 is out of range: the session has ranks 0..3"),
        ([1, 4], "rank 4 is out of range: the session has ranks 0..3"),
        ("x", "cannot parse --targets 'x': expected e.g. 0, 1,3, ::2, all"),
        ("", "cannot parse --targets '': expected e.g. 0, 1,3, ::2, all"),
        ("[]", "cannot parse --targets '[]': expected e.g. 0, 1,3, ::2, all"),
        ("0,,1", "cannot parse --targets '0,,1': expected e.g. 0, 1,3, ::2, all"),
        ("1:2:3:4", "cannot parse --targets '1:2:3:4': expected e.g. 0, 1,3, ::2, all"),
        ("1.5", "cannot parse --targets '1.5': expected e.g. 0, 1,3, ::2, all"),
        ("0, all", "cannot parse --targets '0, all': expected e.g. 0, 1,3, ::2, all"),
        ("__import__('os')", "cannot parse --targets \"__import__('os')\""),
        ("1::0", "--targets '1::0': a slice step cannot be zero"),
        (slice(0, 2, 0), "--targets slice(0, 2, 0): a slice step cannot be zero"),
        (True, "cannot use True as --targets"),
        (False, "cannot use False as --targets"),
        ([0, True], "cannot use True in --targets [0, True]"),
        (["0"], "cannot use '0' in --targets ['0']"),
        (1.0, "cannot use 1.0 as --targets"),
        ({0, 1}, "cannot use {0, 1} as --targets"),
        (slice("a", None), "cannot use slice('a', None, None) as --targets"),
    ],
)
def test_bad_specs_raise_readable_errors(spec: object, message: str) -> None:
    with pytest.raises(TargetError) as info:
        parse_targets(spec, 4)
    assert str(info.value).startswith(message)


def test_target_error_is_a_value_error() -> None:
    assert issubclass(TargetError, ValueError)


@pytest.mark.parametrize("n", [0, -1, True, 2.0, "4", None])
def test_session_size_must_be_a_positive_int(n: object) -> None:
    with pytest.raises(TargetError, match="at least one rank"):
        parse_targets(None, n)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ranks", "text"),
    [
        ([], ""),
        ([2], "2"),
        ([1, 2], "1,2"),
        ([1, 3], "1,3"),
        ([0, 1, 2, 3], "0-3"),
        ([0, 1, 2, 5, 7, 8, 9], "0-2,5,7-9"),
        ([9, 8, 7, 0, 1, 2, 5], "0-2,5,7-9"),
        ([0, 1, 3, 4], "0,1,3,4"),
        ([0, 0, 1, 1, 2], "0-2"),
        (range(16), "0-15"),
        ({5, 6, 7, 10}, "5-7,10"),
    ],
)
def test_format_ranks(ranks: list[int], text: str) -> None:
    assert format_ranks(ranks) == text
