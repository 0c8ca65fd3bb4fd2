"""The protocol between ranks as a state machine, without processes: two
:class:`PeerProtocol` objects (world ranks 0 and 1) hand each other the frames their
``SEND`` actions carry, and the tests play the engine's part for the other actions."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from ipympi.core import wire
from ipympi.core.errors import ERR_OTHER, ERR_TRUNCATE
from ipympi.core.errors import Exception as MPIException
from ipympi.core.protocol import (
    EAGER_LIMIT,
    SPLIT_MIN,
    Fetch,
    PeerProtocol,
    Put,
    Send,
    SendData,
    TraceArrived,
    TraceReceived,
)
from ipympi.core.schedule import signature
from ipympi.progress.operation import RECV, Operation
from ipympi.progress.operation import SEND as SEND_OP

P2P = 0  # a point-to-point context (even)
COLL = 1  # its collective context (odd)
ADDRESS = 0x1000  # what the fake address_of gives every buffer


def _protocol(rank: int, size: int = 2) -> PeerProtocol:
    return PeerProtocol(rank, size, 100 + rank, lambda mem: ADDRESS)


def _pair() -> tuple[PeerProtocol, PeerProtocol]:
    return _protocol(0), _protocol(1)


def _comm() -> Any:
    """A communicator of world ranks 0 and 1 as ``fail_peer`` sees one."""
    return SimpleNamespace(_impl=SimpleNamespace(remote_world_ranks=[0, 1]))


def _recv(peer: int, tag: int, size: int | None = None) -> Operation:
    op = Operation(RECV, _comm(), "Recv", peer, tag)
    if size is not None:
        op.mem = memoryview(bytearray(size))
    return op


def _send(peer: int, tag: int) -> Operation:
    return Operation(SEND_OP, _comm(), "Send", peer, tag)


def _take(proto: PeerProtocol) -> list[Any]:
    actions = list(proto.actions)
    proto.actions.clear()
    return actions


def _kinds(actions: list[Any]) -> list[str]:
    """The frame kinds of the Send actions, by name (every action is one)."""
    assert all(type(a) is Send for a in actions), actions
    return [wire.KIND_NAMES[a.frame[0]] for a in actions]


def _deliver(to: PeerProtocol, actions: list[Any]) -> None:
    for action in actions:
        assert type(action) is Send and action.wdest == to.rank
        to.receive(action.frame)


def test_an_eager_message_completes_a_posted_receive() -> None:
    a, b = _pair()
    op = _recv(0, 7)
    b.start_recv(op, P2P, 0, 7)
    assert op.posted is not None and not op.done
    send = _send(1, 7)
    b.receive(a.start_send(send, b"hello", 1, P2P, 0, 7, sync=False))
    assert send.done and op.done and op.posted is None
    assert (bytes(op.data), op.source, op.tag, op.count) == (b"hello", 0, 7, 5)
    assert not b.actions  # a standard send needs no answer
    assert a.sent == [0, 1] and b.arrived == [1, 0]


def test_an_early_message_waits_unexpected_and_a_synchronous_one_is_acknowledged() -> None:
    a, b = _pair()
    send = _send(1, 3)
    b.receive(a.start_send(send, b"early", 1, P2P, 0, 3, sync=True))
    assert not send.done and a.sends == {send.msgid: send}
    assert not b.actions  # not received yet: no ACK
    op = _recv(0, 3)
    b.start_recv(op, P2P, 0, 3)
    assert op.done and bytes(op.data) == b"early"
    answer = _take(b)
    assert _kinds(answer) == ["ACK"]
    _deliver(a, answer)
    assert send.done and not send.cancelled and not a.sends


def test_a_large_message_is_announced_and_fetched_then_released_with_fin() -> None:
    a, b = _pair()
    data = bytes(range(256)) * (EAGER_LIMIT // 256 + 1)
    send = _send(1, 1)
    frame = a.start_send(send, data, 1, P2P, 0, 1, sync=False)
    assert frame[0] == wire.RTS and len(frame) == wire.HEADER_SIZE + wire.RTS_EXTRA.size
    assert wire.RTS_EXTRA.unpack_from(frame, wire.HEADER_SIZE) == (ADDRESS,)
    assert not send.done and send.mem is not None  # the buffer is kept until FIN
    op = _recv(0, 1, size=len(data))
    b.start_recv(op, P2P, 0, 1)
    b.receive(frame)
    [fetch] = _take(b)
    assert type(fetch) is Fetch and fetch.op is op and fetch.address == ADDRESS
    fetch.target[:] = data  # the engine read the sender's memory
    b.fetched(op, fetch.env, fetch.target, True)
    assert op.done and not op.error and bytes(op.mem) == data
    fin = _take(b)
    assert _kinds(fin) == ["FIN"]
    _deliver(a, fin)
    assert send.done and send.mem is None and not a.sends


def test_a_large_message_that_cannot_be_read_comes_in_data_frames() -> None:
    a, b = _pair()
    data = bytes(range(200)) * 400
    send = _send(1, 2)
    frame = a.start_send(send, data, 1, P2P, 0, 2, sync=False)
    b.receive(frame)  # unexpected: queued until the receive
    op = _recv(0, 2)  # an object receive: new bytes
    b.start_recv(op, P2P, 0, 2)
    [fetch] = _take(b)
    b.fetched(op, fetch.env, fetch.target, False)  # another host, or reads refused
    cts = _take(b)
    assert _kinds(cts) == ["CTS"] and not op.done
    _deliver(a, cts)
    [chunks] = _take(a)
    assert type(chunks) is SendData and (chunks.wdest, chunks.msgid) == (1, send.msgid)
    mem = chunks.mem
    half = len(data) // 2
    b.receive_data(a.data_header(send.msgid, 0) + bytes(mem[:half]))
    assert not op.done
    b.receive_data(a.data_header(send.msgid, half), mem[half:])  # apart, as from tcp
    assert op.done and bytes(op.data) == data
    _deliver(a, _take(b))
    assert send.done


def _split_start(
    size: int = SPLIT_MIN + 7, helps: bool = True, recv_size: int | None = None
) -> tuple[PeerProtocol, PeerProtocol, Operation, Operation, bytes, list[Any]]:
    """A large blocking send from rank 0 that offers to help, received by rank 1: the
    protocols, the send and the receive, the data, and rank 1's actions."""
    a, b = _pair()
    data = bytes(range(251)) * (size // 251) + bytes(size % 251)
    send = _send(1, 3)
    frame = a.start_send(send, data, 1, P2P, 0, 3, sync=False, helps=helps)
    op = _recv(0, 3, size=len(data) if recv_size is None else recv_size)
    b.start_recv(op, P2P, 0, 3)
    b.receive(frame)
    return a, b, send, op, data, _take(b)


def _put(a: PeerProtocol, b: PeerProtocol, put: Send, data: bytes, op: Operation) -> Put:
    """Rank 0 gets rank 1's PUT and (as its engine) writes its part into the receive."""
    a.receive(put.frame)
    [write] = _take(a)
    assert type(write) is Put and (write.wdest, write.pid) == (1, 101)
    cut = wire.unpack(put.frame).value
    assert (write.local, write.remote, write.nbytes) == (
        ADDRESS + cut,
        ADDRESS + cut,
        len(data) - cut,
    )
    assert write.msgid == wire.unpack(put.frame).msgid
    op.mem[cut:] = data[cut:]  # type: ignore[index]
    return write


def test_a_large_message_whose_sender_helps_is_copied_in_two_halves_at_once() -> None:
    a, b, send, op, data, actions = _split_start()
    put, fetch = actions
    assert _kinds([put]) == ["PUT"] and type(fetch) is Fetch
    cut = len(data) // 2
    assert wire.unpack(put.frame).value == cut and fetch.target.nbytes == cut
    assert fetch.address == ADDRESS  # the receiver reads the first half
    fetch.target[:] = data[:cut]
    b.fetched(op, fetch.env, fetch.target, True)
    assert not op.done and not _take(b)  # the second half is the sender's
    write = _put(a, b, put, data, op)
    a.put_done(1, write.msgid, True)
    _deliver(b, _take(a))  # PUT_DONE
    assert op.done and not op.error and bytes(op.mem) == data and op.count == len(data)
    assert not b.splits
    fin = _take(b)
    assert _kinds(fin) == ["FIN"] and not send.done  # the sender completes on FIN
    _deliver(a, fin)
    assert send.done and not a.sends


def test_the_halves_may_end_in_either_order_and_a_refused_write_is_read_instead() -> None:
    a, b, send, op, data, (put, fetch) = _split_start()
    write = _put(a, b, put, data, op)
    a.put_done(1, write.msgid, False)  # its write was refused
    _deliver(b, _take(a))
    [second] = _take(b)  # the receiver reads the second half too
    cut = len(data) // 2
    assert type(second) is Fetch and second.address == ADDRESS + cut
    assert second.target.nbytes == len(data) - cut and not op.done
    second.target[:] = data[cut:]
    b.fetched(op, second.env, second.target, True)
    assert not op.done  # its own first half is still being read
    fetch.target[:] = data[:cut]
    b.fetched(op, fetch.env, fetch.target, True)
    assert op.done and bytes(op.mem) == data
    _deliver(a, _take(b))
    assert send.done


def test_a_half_that_cannot_be_read_gets_the_whole_message_in_data_frames() -> None:
    a, b, send, op, data, (put, fetch) = _split_start()
    b.fetched(op, fetch.env, fetch.target, False)  # reads refused here
    assert not _take(b) and not op.done  # it waits for the sender's answer first
    write = _put(a, b, put, data, op)
    a.put_done(1, write.msgid, True)
    _deliver(b, _take(a))
    cts = _take(b)
    assert _kinds(cts) == ["CTS"] and not op.done
    _deliver(a, cts)
    [chunks] = _take(a)
    assert type(chunks) is SendData
    b.receive_data(a.data_header(send.msgid, 0) + bytes(chunks.mem))
    assert op.done and bytes(op.mem) == data
    _deliver(a, _take(b))
    assert send.done


def test_only_a_large_message_offered_help_to_a_buffer_of_its_size_is_split() -> None:
    for size, helps, recv_size in (
        (SPLIT_MIN - 1, True, None),  # too small to be worth two more messages
        (SPLIT_MIN + 7, False, None),  # a send that does not wait (Isend) cannot help
        (SPLIT_MIN + 7, True, SPLIT_MIN),  # truncated: the receive reads what fits
    ):
        _, b, _, _op, _, actions = _split_start(size, helps, recv_size)
        assert [type(x) for x in actions] == [Fetch], (size, helps, recv_size)
        assert not b.splits


def test_a_put_for_a_send_that_is_gone_is_answered_not_written() -> None:
    a, _, _, _, _, (put, _) = _split_start()
    a.sends.clear()  # e.g. dropped with a failed cell's leftovers
    a.receive(put.frame)
    done = _take(a)
    assert _kinds(done) == ["PUT_DONE"] and wire.unpack(done[0].frame).value == 0


def test_a_sender_that_dies_while_writing_fails_the_receive() -> None:
    _, b, send, op, data, (_, fetch) = _split_start()
    fetch.target[:] = data[: fetch.target.nbytes]
    b.fetched(op, fetch.env, fetch.target, True)
    assert op in b.operations()  # observers see it wait
    b.fail_peer(0, "killed")
    assert op.done and op.error == ERR_OTHER and op.peer_died and not b.splits
    _deliver(b, [Send(1, wire.pack(wire.PUT_DONE, 0, 0, 0, 0, 0, 0, 100, send.msgid, 1))])
    assert not _take(b)  # a late answer is nothing


def test_data_for_no_message_is_an_error() -> None:
    a, b = _pair()
    with pytest.raises(MPIException, match="DATA of unknown message"):
        b.receive_data(a.data_header(42, 0) + b"x")


def test_a_message_longer_than_the_buffer_is_truncated() -> None:
    a, b = _pair()
    op = _recv(0, 4, size=3)
    b.start_recv(op, P2P, 0, 4)
    b.receive(a.start_send(_send(1, 4), b"12345", 1, P2P, 0, 4, sync=False))
    assert op.done and op.error == ERR_TRUNCATE and "5 bytes" in op.error_detail
    assert bytes(op.mem) == b"123" and op.count == 3


def test_a_cancelled_send_is_withdrawn_from_the_unexpected_messages() -> None:
    a, b = _pair()
    send = _send(1, 5)
    b.receive(a.start_send(send, b"x", 1, P2P, 0, 5, sync=True))
    a.cancel_send(send, 1)
    cancel = _take(a)
    assert _kinds(cancel) == ["CANCEL"]
    _deliver(b, cancel)
    answer = _take(b)
    assert _kinds(answer) == ["CANCELLED"]
    assert b.matcher.probe(P2P, 0, 5) is None  # gone
    _deliver(a, answer)
    assert send.done and send.cancelled and not a.sends


def test_a_cancel_that_crosses_the_match_leaves_the_send_completed() -> None:
    a, b = _pair()
    send = _send(1, 6)
    b.receive(a.start_send(send, b"x", 1, P2P, 0, 6, sync=True))
    a.cancel_send(send, 1)
    cancel = _take(a)
    op = _recv(0, 6)
    b.start_recv(op, P2P, 0, 6)  # matched before the CANCEL arrives
    ack = _take(b)
    _deliver(b, cancel)
    assert not b.actions  # nothing left to withdraw: no CANCELLED
    _deliver(a, ack)
    assert send.done and not send.cancelled and op.done


def test_a_synchronous_send_to_oneself_completes_when_received() -> None:
    a, _ = _pair()
    send = _send(0, 8)
    a.send_to_self(send, b"me", P2P, 0, 8, sync=True, sig=0)
    assert not send.done
    op = _recv(0, 8)
    a.start_recv(op, P2P, 0, 8)
    assert op.done and bytes(op.data) == b"me" and send.done


def test_a_synchronous_send_to_oneself_can_be_cancelled() -> None:
    a, _ = _pair()
    send = _send(0, 8)
    a.send_to_self(send, b"me", P2P, 0, 8, sync=True, sig=0)
    a.cancel_send(send, 0)
    assert send.done and send.cancelled and not a.actions


def test_trace_actions_appear_only_while_tracing() -> None:
    a, b = _pair()
    b.receive(a.start_send(_send(1, 1), b"x", 1, P2P, 0, 1, sync=False))
    assert not b.actions
    b.tracing = True
    b.receive(a.start_send(_send(1, 2), b"y", 1, P2P, 0, 2, sync=False))
    [arrived] = _take(b)
    assert type(arrived) is TraceArrived and arrived.env.tag == 2
    op = _recv(0, 2)
    b.start_recv(op, P2P, 0, 2)
    [received] = _take(b)
    assert type(received) is TraceReceived and received.op is op
    assert (received.wsource, received.context, received.tag, received.nbytes) == (0, P2P, 2, 1)


def _collective(protos: tuple[PeerProtocol, ...], sigs: list[int]) -> list[int]:
    return [p.ledger.begin(COLL, sig, [0, 1]) for p, sig in zip(protos, sigs)]


def test_check_finds_a_mismatch_and_cerr_fails_the_waiting_receives() -> None:
    a, b = _pair()
    bcast, reduce = signature("Bcast", 0), signature("Reduce", 0)
    seq, _ = _collective((a, b), [bcast, reduce])
    waiting = _recv(1, seq)
    a.start_recv(waiting, COLL, 1, seq)
    a.ask(COLL, 1, seq)  # a waits long for b: does b run the same call?
    check = _take(a)
    assert _kinds(check) == ["CHECK"]
    _deliver(b, check)
    cerr = _take(b)
    assert _kinds(cerr) == ["CERR"]  # b's call differs: it tells a
    assert b.ledger.known_error(COLL, seq) is not None
    _deliver(a, cerr)
    assert waiting.done and waiting.error == ERR_OTHER
    assert "collective mismatch" in waiting.error_detail


def test_check_about_the_same_call_or_a_later_one_says_nothing() -> None:
    a, b = _pair()
    bcast = signature("Bcast", 0)
    seq, _ = _collective((a, b), [bcast, bcast])
    a.ask(COLL, 1, seq)
    _deliver(b, _take(a))
    assert not b.actions
    a.ledger.begin(COLL, bcast, [0, 1])  # a is one call ahead of b
    a.ask(COLL, 1, seq + 1)
    _deliver(b, _take(a))
    assert not b.actions


def test_a_message_of_a_finished_collective_is_reported_as_a_mismatch() -> None:
    a, b = _pair()
    bcast, reduce = signature("Bcast", 0), signature("Reduce", 0)
    seq, _ = _collective((a, b), [bcast, reduce])
    b.end_collective(COLL, seq)
    b.receive(a.start_send(_send(1, seq), b"x", 1, COLL, 0, seq, sync=False, sig=bcast))
    assert _kinds(_take(b)) == ["CERR"]
    assert b.matcher.probe(COLL, 0, seq) is None  # not queued


def test_a_dead_peer_fails_its_receives_and_sends_but_not_others() -> None:
    a, _ = _pair()
    from_b = _recv(1, 1)
    a.start_recv(from_b, P2P, 1, 1)
    to_b = _send(1, 2)
    a.start_send(to_b, b"x", 1, P2P, 0, 2, sync=True)
    from_self = Operation(
        RECV, SimpleNamespace(_impl=SimpleNamespace(remote_world_ranks=[0])), "Recv", 0, 3
    )
    a.start_recv(from_self, P2P, 0, 3)
    dead = wire.HEADER.pack(wire.PEER_DEAD, 0, 0, 0, 0, 0, 0, 100, 0, 1)
    a.receive(dead + b"killed")
    for op in (from_b, to_b):
        assert op.done and op.peer_died and op.error == ERR_OTHER
        assert op.error_detail == "rank 1 has died (killed)"
    assert not from_self.done
    assert a.dead_peers == {1: "rank 1 has died (killed)"}


def test_resynchronizing_drops_old_collective_traffic_and_releases_rendezvous() -> None:
    a, b = _pair()
    bcast = signature("Bcast", 0)
    seq, _ = _collective((a, b), [bcast, bcast])
    posted = _recv(0, seq)
    b.start_recv(posted, COLL, 0, seq + 1)  # a later call's receive, posted early
    b.receive(a.start_send(_send(1, seq), b"x" * (EAGER_LIMIT + 1), 1, COLL, 0, seq, False, bcast))
    b.resynchronize({COLL: seq + 5})
    assert _kinds(_take(b)) == ["FIN"]  # the large message's sender is released
    assert posted.done and posted.error == ERR_OTHER and "abandoned" in posted.error_detail
    assert b.matcher.probe(COLL, 0, seq) is None


def test_abandoning_a_failed_collective_releases_its_large_senders_only() -> None:
    # a rank whose call failed before it received a large message of it must release
    # the sender (FIN), or the sender waits for it forever; an eager message of the call
    # is dropped, a later call's message is kept, and one arriving late is a stray
    a, b = _pair()
    bcast = signature("Bcast", 0)
    seq, _ = _collective((a, b), [bcast, bcast])
    large = b"x" * (EAGER_LIMIT + 1)
    sends = [_send(1, seq), _send(1, seq + 1)]
    b.receive(a.start_send(sends[0], large, 1, COLL, 0, seq, False, bcast))
    b.receive(a.start_send(_send(1, seq), b"small", 1, COLL, 0, seq, False, bcast))
    b.receive(a.start_send(sends[1], large, 1, COLL, 0, seq + 1, False, bcast))
    b.ledger.mismatched.add((COLL, seq))
    b.abandon_collective(COLL, seq)
    fin = _take(b)
    assert _kinds(fin) == ["FIN"]
    _deliver(a, fin)
    assert sends[0].done and not sends[1].done
    assert b.matcher.probe(COLL, 0, seq) is None
    assert b.matcher.probe(COLL, 0, seq + 1) is not None
    late = _send(1, seq)
    b.receive(a.start_send(late, large, 1, COLL, 0, seq, False, bcast))
    fin = _take(b)
    assert _kinds(fin) == ["FIN"]  # no report: the call already failed
    _deliver(a, fin)
    assert late.done


def test_a_leftover_taken_as_a_collective_ends_is_released_when_it_fails() -> None:
    a, b = _pair()
    bcast, reduce = signature("Bcast", 0), signature("Reduce", 0)
    seq, _ = _collective((a, b), [bcast, reduce])
    send = _send(1, seq)
    b.receive(a.start_send(send, b"x" * (EAGER_LIMIT + 1), 1, COLL, 0, seq, False, bcast))
    leftover = b.end_collective(COLL, seq)
    assert leftover is not None and leftover.payload.kind == wire.RTS
    b.abandon_collective(COLL, seq, leftover)
    fin = _take(b)
    assert _kinds(fin) == ["FIN"]
    _deliver(a, fin)
    assert send.done


def test_dropped_sends_complete_as_cancelled() -> None:
    a, _ = _pair()
    p2p, coll = _send(1, 1), _send(1, 1)
    a.start_send(p2p, b"x", 1, P2P, 0, 1, sync=True)
    a.start_send(coll, b"x", 1, COLL, 0, 1, sync=True)
    assert a.drop_p2p_sends() == [p2p]
    assert p2p.done and p2p.cancelled and not coll.done
    assert list(a.sends.values()) == [coll] and a.operations() == [coll]


def test_an_unknown_frame_kind_is_an_error_and_wake_is_nothing() -> None:
    _, b = _pair()
    b.receive(wire.HEADER.pack(wire.WAKE, 0, 0, 0, 0, 0, 0, 0, 0, 0))
    assert not b.actions
    with pytest.raises(MPIException, match="unknown frame kind 99"):
        b.receive(wire.HEADER.pack(99, 0, 0, 0, 0, 0, 0, 0, 0, 0))


def test_a_message_from_an_unknown_process_grows_the_counts() -> None:
    a, _ = _pair()
    c = _protocol(3, size=4)
    a.receive(c.start_send(_send(0, 1), b"x", 0, P2P, 3, 1, sync=False))
    assert a.size == 4 and a.arrived == [0, 0, 0, 1] and len(a.sent) == 4
