"""The matching engine alone: every ordering, wildcard, probe and cancel rule."""

from __future__ import annotations

import itertools
import random

import pytest

from ipympi.core.constants import ANY_SOURCE, ANY_TAG
from ipympi.core.matching import Envelope, ExactQueue, Matcher, PostedReceive

CTX = 0


def msg(source: int, tag: int, label: str = "", context: int = CTX) -> Envelope:
    return Envelope(context, source, tag, 0, label)


def recv(source: int, tag: int, label: str = "", context: int = CTX) -> PostedReceive:
    return PostedReceive(context, source, tag, label)


def test_exact_match_after_arrival() -> None:
    m = Matcher()
    assert m.arrive(msg(1, 5, "a")) is None
    env = m.post(recv(1, 5))
    assert env is not None and env.payload == "a"
    assert m.statistics().unexpected == 0


def test_exact_match_posted_first() -> None:
    m = Matcher()
    r = recv(1, 5, "r")
    assert m.post(r) is None
    assert m.arrive(msg(1, 5)) is r
    assert m.statistics().posted == 0


@pytest.mark.parametrize(
    ("source", "tag", "matches"),
    [
        (1, 5, True),
        (ANY_SOURCE, 5, True),
        (1, ANY_TAG, True),
        (ANY_SOURCE, ANY_TAG, True),
        (2, 5, False),
        (1, 6, False),
        (ANY_SOURCE, 6, False),
        (2, ANY_TAG, False),
    ],
)
def test_source_and_tag_rules(source: int, tag: int, matches: bool) -> None:
    m = Matcher()
    m.arrive(msg(1, 5))
    assert (m.post(recv(source, tag)) is not None) is matches


def test_no_wildcard_for_context() -> None:
    m = Matcher()
    m.arrive(msg(1, 5, context=0))
    assert m.post(recv(ANY_SOURCE, ANY_TAG, context=2)) is None
    assert m.probe(2, ANY_SOURCE, ANY_TAG) is None
    assert m.probe(0, ANY_SOURCE, ANY_TAG) is not None


def test_non_overtaking_same_sender() -> None:
    """Example 4.5: ANY_TAG then a specific tag get the first and second messages."""
    m = Matcher()
    m.arrive(msg(0, 1, "first"))
    m.arrive(msg(0, 2, "second"))
    assert m.post(recv(0, ANY_TAG)).payload == "first"
    assert m.post(recv(0, 2)).payload == "second"


def test_receive_by_tag_in_reverse_order() -> None:
    """Example 4.6: order only binds messages that match the same receive."""
    m = Matcher()
    m.arrive(msg(0, 1, "tag1"))
    m.arrive(msg(0, 2, "tag2"))
    assert m.post(recv(0, 2)).payload == "tag2"
    assert m.post(recv(0, 1)).payload == "tag1"


def test_first_posted_receive_wins() -> None:
    m = Matcher()
    r1, r2 = recv(ANY_SOURCE, ANY_TAG, "r1"), recv(0, 3, "r2")
    m.post(r1)
    m.post(r2)
    assert m.arrive(msg(0, 3)) is r1
    assert m.arrive(msg(0, 3)) is r2


def test_later_receive_can_match_when_earlier_does_not() -> None:
    m = Matcher()
    r1, r2 = recv(1, ANY_TAG, "r1"), recv(0, ANY_TAG, "r2")
    m.post(r1)
    m.post(r2)
    assert m.arrive(msg(0, 3)) is r2
    assert m.statistics().posted == 1


def test_any_source_takes_earliest_arrival_across_senders() -> None:
    m = Matcher()
    for src in (3, 1, 2):
        m.arrive(msg(src, 0, f"from{src}"))
    assert [m.post(recv(ANY_SOURCE, 0)).payload for _ in range(3)] == [
        "from3",
        "from1",
        "from2",
    ]


def test_every_interleaving_preserves_per_sender_order() -> None:
    """For any arrival/post interleaving, each sender's messages arrive in order."""
    arrivals = [msg(s, 7, f"{s}-{i}") for s in (0, 1) for i in range(3)]
    for order in set(itertools.permutations(range(6))):
        seq = [arrivals[i] for i in order]
        # keep per-sender order in the arrival sequence (the transport's guarantee)
        if [e.payload for e in seq if e.source == 0] != ["0-0", "0-1", "0-2"]:
            continue
        if [e.payload for e in seq if e.source == 1] != ["1-0", "1-1", "1-2"]:
            continue
        m = Matcher()
        got: dict[int, list[str]] = {0: [], 1: []}
        for k, env in enumerate(seq):
            if k % 2 == 0:
                r = recv(ANY_SOURCE, 7)
                found = m.post(r)
                if found is not None:
                    got[found.source].append(found.payload)
                else:
                    m.cancel(r)
            m.arrive(env)
        while (found := m.post(recv(ANY_SOURCE, ANY_TAG))) is not None:
            got[found.source].append(found.payload)
        assert got == {0: ["0-0", "0-1", "0-2"], 1: ["1-0", "1-1", "1-2"]}


def test_probe_leaves_message_and_sees_earliest() -> None:
    m = Matcher()
    m.arrive(msg(2, 4, "a"))
    m.arrive(msg(2, 4, "b"))
    assert m.probe(CTX, 2, 4).payload == "a"
    assert m.probe(CTX, ANY_SOURCE, ANY_TAG).payload == "a"
    assert m.post(recv(2, 4)).payload == "a"
    assert m.probe(CTX, 2, 4).payload == "b"


def test_probe_result_is_what_a_receive_with_its_source_and_tag_gets() -> None:
    m = Matcher()
    m.arrive(msg(1, 9, "x"))
    m.arrive(msg(0, 9, "y"))
    env = m.probe(CTX, ANY_SOURCE, 9)
    assert m.post(recv(env.source, env.tag)).payload == env.payload


def test_take_removes_from_matching() -> None:
    """A matched probe sets the message aside: no probe or receive sees it again."""
    m = Matcher()
    m.arrive(msg(0, 1, "only"))
    env = m.take(CTX, ANY_SOURCE, ANY_TAG)
    assert env.payload == "only"
    assert m.probe(CTX, ANY_SOURCE, ANY_TAG) is None
    assert m.post(recv(ANY_SOURCE, ANY_TAG)) is None


def test_probe_does_not_see_posted_receives_or_other_tags() -> None:
    m = Matcher()
    m.post(recv(0, 1))
    assert m.probe(CTX, 0, 1) is None
    m.arrive(msg(0, 2))
    assert m.probe(CTX, 0, 1) is None


def test_cancel_unmatched_receive() -> None:
    m = Matcher()
    r = recv(0, 1)
    m.post(r)
    assert m.cancel(r) is True
    assert m.arrive(msg(0, 1)) is None  # goes to the unexpected queue instead
    assert m.statistics().unexpected == 1


def test_cancel_after_match_fails() -> None:
    m = Matcher()
    r = recv(0, 1)
    m.post(r)
    assert m.arrive(msg(0, 1)) is r
    assert m.cancel(r) is False


def test_cancel_is_by_identity() -> None:
    m = Matcher()
    r1, r2 = recv(0, 1, "same"), recv(0, 1, "same")
    m.post(r1)
    m.post(r2)
    assert m.cancel(r2) is True
    assert m.arrive(msg(0, 1)) is r1


def test_requeue_front_restores_order() -> None:
    m = Matcher()
    m.arrive(msg(0, 1, "a"))
    m.arrive(msg(0, 1, "b"))
    env = m.take(CTX, 0, 1)
    m.requeue_front(env)
    assert m.post(recv(0, 1)).payload == "a"


def test_statistics_and_pending_lists() -> None:
    m = Matcher()
    m.arrive(msg(0, 1, context=0))
    m.arrive(msg(0, 1, context=2))
    m.post(recv(5, 5, context=2))
    stats = m.statistics()
    assert stats.unexpected == 2 and stats.posted == 1
    assert stats.unexpected_by_context == {0: 1, 2: 1}
    assert stats.posted_by_context == {2: 1}
    assert len(m.pending_unexpected()) == 2
    assert [r.source for r in m.pending_posted()] == [5]


def test_zero_length_message_matches() -> None:
    m = Matcher()
    m.arrive(Envelope(CTX, 0, 0, 0, b""))
    env = m.post(recv(0, 0))
    assert env is not None and env.nbytes == 0


def test_exact_queue_answers_as_the_arrival_ordered_list() -> None:
    """A context kept in an ExactQueue (indexed by source and tag) gives every
    operation the answer of the plain arrival-ordered list, wildcards included."""
    rng = random.Random(20261127)
    for trial in range(200):
        plain, indexed = Matcher(), Matcher(exact=lambda context: True)
        queued: list[Envelope] = []  # the messages of `plain`, to remove or put back
        twins: dict[int, Envelope] = {}
        for step in range(60):
            what = rng.random()
            source = rng.choice([0, 1, 2, ANY_SOURCE])
            tag = rng.choice([0, 1, 2, ANY_TAG])
            if what < 0.4:  # a message arrives
                label = f"{trial}.{step}"
                source, tag = rng.randrange(3), rng.randrange(3)
                a, b = msg(source, tag, label), msg(source, tag, label)
                got_a, got_b = plain.arrive(a), indexed.arrive(b)
                assert (got_a is None) == (got_b is None)
                if got_a is None:
                    queued.append(a)
                    twins[id(a)] = b
                else:
                    assert got_a.handle == got_b.handle
            elif what < 0.55:  # a receive is posted
                label = f"r{trial}.{step}"
                got_a, got_b = (
                    plain.post(recv(source, tag, label)),
                    indexed.post(recv(source, tag, label)),
                )
                assert (got_a and got_a.payload) == (got_b and got_b.payload)
            elif what < 0.7:
                a, b = plain.probe(CTX, source, tag), indexed.probe(CTX, source, tag)
                assert (a and a.payload) == (b and b.payload)
            elif what < 0.85:
                a, b = plain.take(CTX, source, tag), indexed.take(CTX, source, tag)
                assert (a and a.payload) == (b and b.payload)
                if a is not None and rng.random() < 0.5:  # a cancelled matched receive
                    plain.requeue_front(a)
                    indexed.requeue_front(b)
            elif queued:  # the sender cancels a message, maybe already matched
                a = rng.choice(queued)
                assert plain.remove(a) == indexed.remove(twins[id(a)])
            assert [e.payload for e in plain.pending_unexpected()] == [
                e.payload for e in indexed.pending_unexpected()
            ]
            assert plain.statistics() == indexed.statistics()


def test_exact_queue_index() -> None:
    """Membership by (source, tag), and messages of one key in arrival order."""
    m = Matcher(exact=lambda context: context & 1 == 1)
    assert isinstance(m.pending_in(0), list)
    queue = m.pending_in(1)
    assert isinstance(queue, ExactQueue) and not queue
    for label in "abc":
        m.arrive(msg(2, 7, label, context=1))
    m.arrive(msg(1, 8, "d", context=1))
    assert (2, 7) in queue and (1, 7) not in queue and len(queue) == 4
    assert m.take(1, ANY_SOURCE, 9) is None
    assert [m.take(1, 2, 7).payload for _ in range(3)] == ["a", "b", "c"]  # type: ignore[union-attr]
    assert (2, 7) not in queue and m.take(1, ANY_SOURCE, 8).payload == "d"  # type: ignore[union-attr]
    assert len(queue) == 0
