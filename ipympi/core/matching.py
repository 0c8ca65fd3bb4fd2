"""The point-to-point matching engine: a pure state machine.

No sockets, threads or clocks live here. The transport feeds arriving message
envelopes in with :meth:`Matcher.arrive`; the API posts receives with
:meth:`Matcher.post`; each call returns the match it made (or ``None``) and the
caller acts on it (copies data, sends an acknowledgement, completes a request).

The rules implemented, from the point-to-point chapter of the standard:

* A receive matches a message when the context (communicator) is the same, the
  source is the sender's rank or ``ANY_SOURCE``, and the tag is the sent tag or
  ``ANY_TAG`` (there is no wildcard for the context).
* Non-overtaking: messages from one sender on one context are matched in the
  order they arrived (the transport keeps per-sender FIFO order), and of two
  posted receives that both match a message, the first posted wins.
* A probe sees the earliest pending message that matches; a matched probe
  (``Mprobe``) removes it from ordinary matching.
* A posted receive may be cancelled only while it is unmatched.

Both queues are kept per context. Within a context, unexpected messages are in
arrival order and posted receives in posting order, so a linear scan returns the
standard's answer for wildcards; the queues are short in practice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .constants import ANY_SOURCE, ANY_TAG

__all__ = ["Envelope", "Matcher", "PostedReceive"]


class Envelope:
    """An arrived message (or its announcement, for large messages).

    ``source`` is the sender's rank in the communicator; ``payload`` is whatever
    the transport needs to deliver the data later (opaque here).
    """

    __slots__ = ("context", "nbytes", "payload", "source", "tag")

    def __init__(self, context: int, source: int, tag: int, nbytes: int, payload: Any = None):
        self.context = context
        self.source = source
        self.tag = tag
        self.nbytes = nbytes
        self.payload = payload

    def __repr__(self) -> str:
        return (
            f"Envelope(context={self.context}, source={self.source}, tag={self.tag}, "
            f"nbytes={self.nbytes})"
        )


class PostedReceive:
    """A receive waiting for a message; ``handle`` is opaque to the matcher."""

    __slots__ = ("context", "handle", "source", "tag")

    def __init__(self, context: int, source: int, tag: int, handle: Any = None):
        self.context = context
        self.source = source
        self.tag = tag
        self.handle = handle

    def __repr__(self) -> str:
        return f"PostedReceive(context={self.context}, source={self.source}, tag={self.tag})"


def _matches(source: int, tag: int, env: Envelope) -> bool:
    return (source == ANY_SOURCE or source == env.source) and (tag == ANY_TAG or tag == env.tag)


@dataclass
class MatcherStatistics:
    """A snapshot of the queues, for hang reports."""

    posted: int
    unexpected: int
    posted_by_context: dict[int, int] = field(default_factory=dict)
    unexpected_by_context: dict[int, int] = field(default_factory=dict)


class Matcher:
    """Posted-receive and unexpected-message queues with MPI's matching rules."""

    def __init__(self) -> None:
        self._posted: defaultdict[int, list[PostedReceive]] = defaultdict(list)
        self._unexpected: defaultdict[int, list[Envelope]] = defaultdict(list)

    # -- messages in ---------------------------------------------------------
    def arrive(self, env: Envelope) -> PostedReceive | None:
        """Match an arriving message to the first posted receive, or queue it."""
        recv = self.match_posted(env.context, env.source, env.tag)
        if recv is None:
            self._unexpected[env.context].append(env)
        return recv

    def match_posted(self, context: int, source: int, tag: int) -> PostedReceive | None:
        """Take the first posted receive matching a message's envelope fields.

        With :meth:`queue_unexpected` this is :meth:`arrive` split in two, so the
        transport builds an :class:`Envelope` only for messages nobody awaits.
        """
        posted = self._posted.get(context)
        if posted:
            for i, recv in enumerate(posted):
                if (recv.source == ANY_SOURCE or recv.source == source) and (
                    recv.tag == ANY_TAG or recv.tag == tag
                ):
                    del posted[i]
                    return recv
        return None

    def queue_unexpected(self, env: Envelope) -> None:
        """Queue a message that matched no posted receive (see :meth:`match_posted`)."""
        self._unexpected[env.context].append(env)

    # -- receives in ---------------------------------------------------------
    def post(self, recv: PostedReceive) -> Envelope | None:
        """Match a new receive to the earliest unexpected message, or queue it."""
        env = self.take(recv.context, recv.source, recv.tag)
        if env is None:
            self._posted[recv.context].append(recv)
        return env

    def enqueue(self, recv: PostedReceive) -> None:
        """Queue a receive known to match nothing queued (the caller tried ``take``)."""
        self._posted[recv.context].append(recv)

    def cancel(self, recv: PostedReceive) -> bool:
        """Withdraw a posted receive; False when it was already matched."""
        posted = self._posted.get(recv.context)
        if posted:
            for i, other in enumerate(posted):
                if other is recv:
                    del posted[i]
                    return True
        return False

    # -- probes --------------------------------------------------------------
    def probe(self, context: int, source: int, tag: int) -> Envelope | None:
        """The earliest unexpected message that a receive would match, left queued."""
        for env in self._unexpected.get(context, ()):
            if _matches(source, tag, env):
                return env
        return None

    def take(self, context: int, source: int, tag: int) -> Envelope | None:
        """Like :meth:`probe`, but remove the message from matching (``Mprobe``)."""
        queue = self._unexpected.get(context)
        if queue:
            for i, env in enumerate(queue):
                if _matches(source, tag, env):
                    del queue[i]
                    return env
        return None

    def remove(self, env: Envelope) -> bool:
        """Remove a queued unexpected message (its sender cancelled it)."""
        queue = self._unexpected.get(env.context)
        if queue:
            for i, other in enumerate(queue):
                if other is env:
                    del queue[i]
                    return True
        return False

    def requeue_front(self, env: Envelope) -> None:
        """Put a message back at the head of its queue (a cancelled matched receive)."""
        self._unexpected[env.context].insert(0, env)

    # -- introspection -------------------------------------------------------
    def statistics(self) -> MatcherStatistics:
        posted = {c: len(q) for c, q in self._posted.items() if q}
        unexpected = {c: len(q) for c, q in self._unexpected.items() if q}
        return MatcherStatistics(
            posted=sum(posted.values()),
            unexpected=sum(unexpected.values()),
            posted_by_context=posted,
            unexpected_by_context=unexpected,
        )

    def pending_in(self, context: int) -> list[Envelope]:
        """The queue of unexpected messages of ``context`` (live: it fills as they come)."""
        return self._unexpected[context]

    def pending_unexpected(self) -> list[Envelope]:
        """Every queued unexpected message, in context then arrival order."""
        return [env for queue in self._unexpected.values() for env in queue]

    def pending_posted(self) -> list[PostedReceive]:
        """Every posted receive still waiting, in context then posting order."""
        return [recv for queue in self._posted.values() for recv in queue]
