"""The collective ledger alone: numbering, stray messages, mismatch news, restarts."""

from __future__ import annotations

from ipympi.core.ledger import RECENT_CALLS, Ledger
from ipympi.core.schedule import signature

CTX = 5  # a collective context
BCAST = signature("Bcast", 0)
REDUCE = signature("Reduce", 0)


def test_calls_are_numbered_per_context_and_tracked_while_running() -> None:
    ledger = Ledger()
    assert [ledger.begin(CTX, BCAST, [0, 1]) for _ in range(3)] == [0, 1, 2]
    assert ledger.begin(7, BCAST, [0, 1]) == 0
    assert ledger.active[CTX] == {0, 1, 2}
    ledger.end(CTX, 1)
    assert ledger.is_stray(CTX, 1)  # finished: a message of it now came too late
    assert not ledger.is_stray(CTX, 0)  # still running
    assert not ledger.is_stray(CTX, 3)  # not started yet: an early message
    assert not ledger.is_stray(9, 0)  # a context never used here


def test_a_stray_message_is_explained_with_both_calls_and_reported_once() -> None:
    ledger = Ledger()
    seq = ledger.begin(CTX, BCAST, [4, 6])
    ledger.end(CTX, seq)
    text = ledger.stray_report(CTX, seq, 1, REDUCE, 0)
    assert text is not None
    assert text.startswith("collective mismatch (collective #0): rank 1 called Reduce")
    assert "rank 0 called Bcast" in text
    assert ledger.record_mismatch(CTX, seq, text)
    assert not ledger.record_mismatch(CTX, seq, text)  # once, however many report it
    assert ledger.stray_report(CTX, seq, 1, REDUCE, 0) is None


def test_only_recent_signatures_are_kept() -> None:
    ledger = Ledger()
    for _ in range(RECENT_CALLS + 10):
        ledger.end(CTX, ledger.begin(CTX, BCAST, [0]))
    assert len(ledger.calls) == RECENT_CALLS
    text = ledger.stray_report(CTX, 0, 1, REDUCE, 0)
    assert text is not None and text.endswith("rank 0 called a different collective")


def test_mismatch_news_about_a_later_call_waits_for_it() -> None:
    ledger = Ledger()
    assert ledger.record_mismatch(CTX, 4, "about #4")
    assert ledger.known_error(CTX, 3) is None
    assert ledger.take_mismatch(CTX, 3) is None  # calls before it are sound
    assert ledger.known_error(CTX, 4) == "about #4"
    assert ledger.record_mismatch(CTX, 2, "about #2")  # an earlier one takes its place
    assert ledger.take_mismatch(CTX, 5) == "about #2"
    assert ledger.take_mismatch(CTX, 5) is None


def test_restart_abandons_running_calls_and_news() -> None:
    ledger = Ledger()
    for _ in range(3):
        ledger.begin(CTX, BCAST, [0, 1])
    ledger.record_mismatch(CTX, 1, "about #1")
    assert ledger.running_with(1) == [(CTX, 0)] and ledger.running_with(2) == []
    assert ledger.restart_at(CTX, 2) == 3  # never back: this rank reached #3
    assert ledger.running_with(1) == [] and not ledger.errors
    assert not ledger.record_mismatch(CTX, 2, "late news of an abandoned call")
    assert ledger.stray_report(CTX, 2, 1, REDUCE, 0) is None
    assert ledger.begin(CTX, BCAST, [0, 1]) == 3


def test_a_reused_context_keeps_only_news_about_its_new_communicator() -> None:
    ledger = Ledger()
    ledger.record_mismatch(CTX, 8, "early news")
    ledger.reuse(CTX, 8)
    assert ledger.next[CTX] == 8 and ledger.known_error(CTX, 8) == "early news"
    ledger.errors[CTX] = (3, "about the former communicator")
    ledger.reuse(CTX, 8)
    assert CTX not in ledger.errors
