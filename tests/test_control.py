"""The control protocol: every message type round-trips, garbage is rejected, lines read well."""

from __future__ import annotations

import json

import pytest

from ipympi.core import control as ctl
from ipympi.core.constants import ANY_SOURCE, ANY_TAG

VALID = [
    {"type": "hello", "rank": 0, "pid": 4241, "host": "node1"},
    {"type": "abort", "rank": 2, "code": 3, "reason": "MPI_Abort(COMM_WORLD, 3)"},
    {"type": "state", "rank": 1, "state": "running"},
    {"type": "peer_exit", "rank": 2, "reason": "was killed by signal SIGKILL"},
    {
        "type": "state",
        "rank": 1,
        "pid": 4242,
        "host": "node1",
        "state": "blocked",
        "call": "Recv",
        "comm": "COMM_WORLD",
        "peer": 0,
        "tag": 7,
        "since": 3.0,
        "where": "prog.py:5",
        "posted_receives": 1,
    },
    {"type": "state", "rank": 0, "state": "idle", "peer": None, "tag": None},
    {"type": "state", "rank": 0, "state": "running", "cpu": 1.25, "rss": 52428800},
    {"type": "hello", "rank": 5, "pid": 77, "host": "b", "data": "tcp://127.0.0.3:41234"},
    {"type": "query"},
    {"type": "query", "id": 3},
    {"type": "state", "rank": 1, "state": "idle", "query": 3},
    {"type": "signal", "signal": 2},
    {"type": "error", "rank": 1, "text": "Traceback (most recent call last):\n..."},
    {"type": "peers", "endpoints": ["tcp://127.0.0.2:5000", "tcp://127.0.0.3:5001"]},
    {
        "type": "spawn",
        "rank": 0,
        "id": 1,
        "apps": [{"argv": ["python", "w.py"], "maxprocs": 2, "wdir": "/srv"}],
        "parents": [0, 1],
        "context": 4,
        "base": 0,
    },
    {"type": "spawned", "id": 1, "ranks": [2, 3], "errcodes": [0, 0]},
    {"type": "spawned", "id": 2, "ranks": [], "errcodes": [42], "error": "not found"},
]
KEY = bytes(range(16))


@pytest.mark.parametrize("msg", VALID, ids=lambda m: str(m["type"]))
def test_every_message_type_round_trips(msg: dict) -> None:
    data = ctl.encode(msg, KEY)
    assert isinstance(data, bytes)
    assert data[: ctl.MAC_SIZE] == ctl.sign(KEY, data[ctl.MAC_SIZE :])
    assert json.loads(data[ctl.MAC_SIZE :].decode("utf-8")) == msg
    assert ctl.decode(data, KEY) == msg


def test_frames_signed_with_another_key_or_tampered_are_refused() -> None:
    data = ctl.encode({"type": "signal", "signal": 2}, KEY)
    with pytest.raises(ctl.ControlProtocolError, match="bad signature"):
        ctl.decode(data, b"another key")
    tampered = data.replace(b"2}", b"9}")
    with pytest.raises(ctl.ControlProtocolError, match="bad signature"):
        ctl.decode(tampered, KEY)
    for short in (b"", data[:10], data[ctl.MAC_SIZE :]):
        with pytest.raises(ctl.ControlProtocolError, match="bad signature"):
            ctl.decode(short, KEY)


def test_session_keys_come_as_hex() -> None:
    assert ctl.session_key(KEY.hex()) == KEY
    assert ctl.session_key("not hex") == b"not hex"


def test_message_types_match_the_spec_table() -> None:
    assert {m["type"] for m in VALID} == ctl.MESSAGE_TYPES
    assert frozenset({"running", "blocked", "idle", "finalized"}) == ctl.RANK_STATES


def test_parent_spec_round_trips() -> None:
    text = ctl.encode_parent(6, 3, [0, 2, 5])
    assert ctl.decode_parent(text) == (6, 3, [0, 2, 5])


def test_non_ascii_text_is_utf8() -> None:
    msg = {"type": "abort", "rank": 0, "code": 1, "reason": "Recv: données tronquées"}
    assert "données".encode() in ctl.encode(msg, KEY)
    assert ctl.decode(ctl.encode(msg, KEY), KEY) == msg


GARBAGE = [
    (b"", "not UTF-8 JSON"),
    (b"\xff\xfe\x00", "not UTF-8 JSON"),
    (b"{not json", "not UTF-8 JSON"),
    (b"[1, 2]", "holds a list"),
    (b'"hello"', "holds a str"),
    (b"{}", "unknown control message type None"),
    (b'{"type": "shutdown"}', "unknown control message type 'shutdown'"),
    (b'{"type": "hello", "rank": 0, "pid": 1}', "without 'host'"),
    (b'{"type": "hello", "rank": "0", "pid": 1, "host": "h"}', "'rank' must be int"),
    (b'{"type": "hello", "rank": true, "pid": 1, "host": "h"}', "'rank' must be int"),
    (b'{"type": "abort", "rank": 0, "code": 1.5, "reason": "x"}', "'code' must be int"),
    (b'{"type": "state", "rank": 0, "state": "sleeping"}', "unknown rank state"),
    (b'{"type": "state", "rank": 0, "state": "blocked", "since": "3"}', "'since' must be"),
    (b'{"type": "signal"}', "without 'signal'"),
    (b'{"type": "peers", "endpoints": "tcp://a:1"}', "'endpoints' must be list"),
    (b"[" * 100000 + b"]" * 100000, "not UTF-8 JSON"),
    (b" " * (ctl.MAX_FRAME + 1), "exceeds"),
]


@pytest.mark.parametrize(("data", "why"), GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_raises_a_clear_protocol_error(data: bytes, why: str) -> None:
    with pytest.raises(ctl.ControlProtocolError, match=why.replace("(", r"\(")):
        ctl.decode(ctl.sign(KEY, data) + data, KEY)


def test_protocol_errors_are_value_errors() -> None:
    assert issubclass(ctl.ControlProtocolError, ValueError)


def test_encode_validates_too() -> None:
    with pytest.raises(ctl.ControlProtocolError, match="without 'reason'"):
        ctl.encode({"type": "abort", "rank": 0, "code": 1}, KEY)
    with pytest.raises(ctl.ControlProtocolError, match="cannot encode"):
        ctl.encode({"type": "query", "extra": object()}, KEY)
    with pytest.raises(ctl.ControlProtocolError, match="cannot encode"):
        ctl.encode({"type": "query", "extra": float("nan")}, KEY)


def test_identities() -> None:
    assert ctl.identity(3) == b"rank3"
    assert ctl.rank_of(ctl.identity(12)) == 12
    for bad in (b"", b"rank", b"rank-1", b"engine1", b"rank1x"):
        with pytest.raises(ctl.ControlProtocolError):
            ctl.rank_of(bad)


def test_env_names_and_addresses() -> None:
    names = (ctl.ENV_RANK, ctl.ENV_SIZE, ctl.ENV_SESSION_DIR, ctl.ENV_CTL, ctl.ENV_KEY)
    assert names == (
        "IPYMPI_RANK",
        "IPYMPI_SIZE",
        "IPYMPI_SESSION_DIR",
        "IPYMPI_CTL",
        "IPYMPI_KEY",
    )
    assert ctl.control_address("/tmp/ipympi-x") == "ipc:///tmp/ipympi-x/ctl"


# -- reading states ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("msg", "line"),
    [
        (
            VALID[4],
            "rank 1 (pid 4242): blocked in Recv(source=0, tag=7) on COMM_WORLD"
            " for 3.0 s at prog.py:5",
        ),
        ({"rank": 0, "pid": 4241, "state": "running"}, "rank 0 (pid 4241): running"),
        ({"rank": 0, "state": "running", "where": "x.py:9"}, "rank 0: running at x.py:9"),
        ({"rank": 3, "state": ctl.NO_ANSWER}, "rank 3: no answer"),
        ({"rank": 3, "pid": 7, "state": ctl.NO_ANSWER}, "rank 3 (pid 7): no answer"),
        ({"rank": 2, "state": ctl.EXITED, "status": 3}, "rank 2: exited with status 3"),
        (
            {"rank": 2, "state": ctl.EXITED, "status": 139, "signal": "SIGSEGV"},
            "rank 2: killed by signal SIGSEGV",
        ),
        (
            {"rank": 1, "state": "blocked", "call": "Send", "peer": 2, "tag": 0, "since": 0.04},
            "rank 1: blocked in Send(dest=2, tag=0) for 0.0 s",
        ),
        (
            {"rank": 1, "state": "blocked", "call": "Recv", "peer": ANY_SOURCE, "tag": ANY_TAG},
            "rank 1: blocked in Recv(source=ANY_SOURCE, tag=ANY_TAG)",
        ),
        (
            {"rank": 0, "state": "blocked", "call": "Bcast", "peer": 0, "comm": "COMM_WORLD"},
            "rank 0: blocked in Bcast(root=0) on COMM_WORLD",
        ),
        (
            {"rank": 0, "state": "blocked", "call": "Barrier", "where": ""},
            "rank 0: blocked in Barrier()",
        ),
        ({"rank": 0, "state": "finalized"}, "rank 0: finalized"),
        (
            {
                "rank": 1,
                "state": "blocked",
                "call": "recv",
                "peer": 0,
                "tag": 5,
                "comm": "MPI_COMM_WORLD",
                "where": "p.py:3",
                "threads": [
                    {"call": "Recv", "peer": 0, "tag": 6, "comm": "MPI_COMM_WORLD", "since": 1},
                    {"call": "Barrier (collective #2, round 1)", "peer": 0, "comm": "dup"},
                ],
            },
            "rank 1: blocked in recv(source=0, tag=5) on MPI_COMM_WORLD at p.py:3"
            "; another thread in Recv(source=0, tag=6) on MPI_COMM_WORLD"
            "; another thread in Barrier (collective #2, round 1) on dup",
        ),
    ],
)
def test_format_state(msg: dict, line: str) -> None:
    assert ctl.format_state(msg) == line


def test_format_abort_tells_abort_from_fatal_errors() -> None:
    abort = {"type": "abort", "rank": 2, "code": 3, "reason": "MPI_Abort(COMM_WORLD, 3)"}
    assert ctl.format_abort(abort) == (
        "rank 2 called Abort with error code 3: MPI_Abort(COMM_WORLD, 3)"
    )
    fatal = {"type": "abort", "rank": 1, "code": 15, "reason": "Recv: ERR_TRUNCATE: truncated"}
    assert ctl.format_abort(fatal) == "rank 1: Recv: ERR_TRUNCATE: truncated (error code 15)"
    bare = {"type": "abort", "rank": 0, "code": 4, "reason": ""}
    assert ctl.format_abort(bare) == "rank 0 called Abort with error code 4"


def test_exit_statuses_read_like_a_shell() -> None:
    assert ctl.exit_status(0) == 0
    assert ctl.exit_status(3) == 3
    assert ctl.exit_status(-9) == 137
    assert ctl.signal_name(11) == "SIGSEGV"
    assert ctl.signal_name(99) == "signal 99"


def test_launcher_states_for_ranks_that_cannot_answer() -> None:
    silent = ctl.launcher_state(3, 77, None)
    assert silent == {"type": "state", "rank": 3, "pid": 77, "state": "no answer"}
    assert ctl.format_state(silent) == "rank 3 (pid 77): no answer"
    done = ctl.launcher_state(2, 78, 3)
    assert (done["state"], done["status"]) == ("exited", 3)
    assert ctl.format_state(done) == "rank 2 (pid 78): exited with status 3"
    killed = ctl.launcher_state(1, 79, -11)
    assert (killed["status"], killed["signal"]) == (139, "SIGSEGV")
    assert ctl.format_state(killed) == "rank 1 (pid 79): killed by signal SIGSEGV"
    assert ctl.describe_exit(-11) == "was killed by signal SIGSEGV"
    assert ctl.describe_exit(3) == "exited with status 3"


def test_a_state_answers_the_query_whose_id_it_echoes() -> None:
    state = ctl.answer({"type": "query", "id": 4}, {"type": "state", "rank": 0, "state": "idle"})
    assert state["query"] == 4
    assert ctl.answers(state, 4)
    assert not ctl.answers(state, 5)  # a late answer to an earlier query
    assert ctl.answers({"type": "state", "rank": 0, "state": "idle"}, 5)  # unnumbered
