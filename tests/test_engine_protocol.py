"""The engine protocol's signing: only messages signed with the session key are accepted."""

from __future__ import annotations

import pytest

from ipympi.notebook.engine.protocol import MAGIC, EngineMessage, ProtocolError, Signer

KEY = b"k" * 32


def test_round_trip_keeps_type_content_parent_and_buffers() -> None:
    signer = Signer(KEY)
    msg = EngineMessage("push", {"names": ["x"]}, parent="p1", buffers=(b"\x00\x01", b"data"))
    back = signer.decode(signer.encode(msg))
    assert back == msg


def test_frames_start_with_magic_and_a_hex_signature() -> None:
    frames = Signer(KEY).encode(EngineMessage("execute", {"code": "1"}))
    assert frames[0] == MAGIC
    assert len(frames[1]) == 64 and all(c in b"0123456789abcdef" for c in frames[1])


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda f: [f[0], f[1], f[2].replace(b"1", b"2"), *f[3:]], id="body"),
        pytest.param(lambda f: [*f[:3], b"other buffer"], id="buffer"),
        pytest.param(lambda f: [*f[:3]], id="dropped buffer"),
        pytest.param(lambda f: [f[0], b"", *f[2:]], id="unsigned"),
        pytest.param(
            lambda f: [f[0], Signer(b"x" * 32).encode(EngineMessage("a"))[1], *f[2:]], id="sig"
        ),
        pytest.param(lambda f: [b"other", *f[1:]], id="magic"),
        pytest.param(lambda f: f[:2], id="short"),
    ],
)
def test_tampered_messages_are_refused(tamper) -> None:
    signer = Signer(KEY)
    frames = signer.encode(EngineMessage("execute", {"code": "1"}, buffers=(b"buf",)))
    with pytest.raises(ProtocolError):
        signer.decode(tamper(frames))


def test_a_message_signed_with_another_key_is_refused() -> None:
    forged = Signer(b"attacker-key-000000000000").encode(EngineMessage("execute", {"code": "1"}))
    with pytest.raises(ProtocolError, match="signature"):
        Signer(KEY).decode(forged)


def test_well_signed_garbage_body_is_a_protocol_error() -> None:
    signer = Signer(KEY)
    body = b"not json"
    frames = [MAGIC, signer._digest(body, []), body]
    with pytest.raises(ProtocolError, match="malformed"):
        signer.decode(frames)


def test_short_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        Signer(b"short")


def test_non_json_values_are_encoded_readably() -> None:
    import numpy as np

    signer = Signer(KEY)
    msg = EngineMessage("reply", {"value": np.int64(3), "raw": b"\x01", "array": np.arange(2)})
    content = signer.decode(signer.encode(msg)).content
    assert content == {"value": 3, "raw": "AQ==", "array": [0, 1]}
