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

Contexts whose receives name their source and tag (a communicator's collective
context: every collective message is received by exact source and sequence
number) keep their unexpected messages in an :class:`ExactQueue` instead, indexed
by (source, tag). Their queues can grow long: in a loop of rooted collectives
the other ranks run ahead of the root, and the root holds their messages of later
calls while it looks for the ones of the current call. The index keeps each look
and the end-of-call check for leftovers independent of that length.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Union

from .constants import ANY_SOURCE, ANY_TAG

__all__ = ["Envelope", "ExactQueue", "Matcher", "PostedReceive"]


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


class ExactQueue:
    """The unexpected messages of a context that is received by exact (source, tag).

    Messages wait per (source, tag) key in arrival order, so finding the earliest
    one of a key, and knowing whether any message carries a tag, take constant
    time whatever the length of the queue. Wildcards still work, with the
    standard's answer (the earliest match across keys), at the cost of a scan over
    the keys. Iteration yields every message in arrival order.
    """

    __slots__ = ("_count", "_front", "_stamp", "_tags", "keys")

    def __init__(self) -> None:
        # (source, tag) -> [(arrival stamp, message)], earliest first; read-only to
        # others (the straight collective path looks up its message here)
        self.keys: dict[tuple[int, int], deque[tuple[int, Envelope]]] = {}
        self._tags: dict[int, int] = {}  # tag -> messages queued with it
        self._count = 0
        self._stamp = 0  # stamp of the latest arrival
        self._front = 0  # stamp of the latest message put back at the head

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Envelope]:
        entries = sorted(entry for queue in self.keys.values() for entry in queue)
        return iter([env for _, env in entries])

    def __contains__(self, key: tuple[int, int]) -> bool:
        """Whether a message from ``source`` with ``tag`` waits (``(source, tag) in q``)."""
        return key in self.keys

    def append(self, env: Envelope) -> None:
        """Queue an arrived message after every other."""
        self._stamp += 1
        self._add((self._stamp, env), False)

    def push_front(self, env: Envelope) -> None:
        """Queue a message before every other (a cancelled matched receive's)."""
        self._front -= 1
        self._add((self._front, env), True)

    def _add(self, entry: tuple[int, Envelope], first: bool) -> None:
        env = entry[1]
        key = (env.source, env.tag)
        queue = self.keys.get(key)
        if queue is None:
            queue = self.keys[key] = deque()
        if first:
            queue.appendleft(entry)
        else:
            queue.append(entry)
        self._tags[env.tag] = self._tags.get(env.tag, 0) + 1
        self._count += 1

    def _first(self, source: int, tag: int) -> tuple[int, int] | None:
        """The key of the earliest message a receive of (source, tag) matches."""
        if source != ANY_SOURCE and tag != ANY_TAG:
            key = (source, tag)
            return key if key in self.keys else None
        if tag != ANY_TAG and tag not in self._tags:
            return None
        best: tuple[int, int] | None = None
        stamp = 0
        for key, queue in self.keys.items():
            fits = (source == ANY_SOURCE or source == key[0]) and (tag == ANY_TAG or tag == key[1])
            if fits and (best is None or queue[0][0] < stamp):
                best, stamp = key, queue[0][0]
        return best

    def peek(self, source: int, tag: int) -> Envelope | None:
        """The earliest message a receive of (source, tag) matches, left queued."""
        key = self._first(source, tag)
        return None if key is None else self.keys[key][0][1]

    def take(self, source: int, tag: int) -> Envelope | None:
        """Remove and return the earliest message a receive of (source, tag) matches."""
        if tag != ANY_TAG and tag not in self._tags:  # the end-of-call check for leftovers
            return None
        key = self._first(source, tag)
        if key is None:
            return None
        queue = self.keys[key]
        env = queue.popleft()[1]
        if not queue:
            del self.keys[key]
        self._forget(env.tag)
        return env

    def remove(self, env: Envelope) -> bool:
        """Remove ``env`` itself; False when it is not queued."""
        key = (env.source, env.tag)
        queue = self.keys.get(key)
        if queue:
            for entry in queue:
                if entry[1] is env:
                    queue.remove(entry)
                    if not queue:
                        del self.keys[key]
                    self._forget(env.tag)
                    return True
        return False

    def _forget(self, tag: int) -> None:
        left = self._tags[tag] - 1
        if left:
            self._tags[tag] = left
        else:
            del self._tags[tag]
        self._count -= 1


Unexpected = Union[list[Envelope], ExactQueue]


class _Queues(dict[int, Unexpected]):
    """Unexpected messages per context, created on first use: an :class:`ExactQueue`
    for the contexts ``exact`` names, a list for the others."""

    def __init__(self, exact: Callable[[int], bool]) -> None:
        super().__init__()
        self.exact = exact

    def __missing__(self, context: int) -> Unexpected:
        queue: Unexpected = ExactQueue() if self.exact(context) else []
        self[context] = queue
        return queue


def _never(context: int) -> bool:
    return False


@dataclass
class MatcherStatistics:
    """A snapshot of the queues, for hang reports."""

    posted: int
    unexpected: int
    posted_by_context: dict[int, int] = field(default_factory=dict)
    unexpected_by_context: dict[int, int] = field(default_factory=dict)


class Matcher:
    """Posted-receive and unexpected-message queues with MPI's matching rules.

    ``exact`` names the contexts whose messages wait in an :class:`ExactQueue`
    (see the module docstring); by default none.
    """

    def __init__(self, exact: Callable[[int], bool] = _never) -> None:
        self._posted: defaultdict[int, list[PostedReceive]] = defaultdict(list)
        self._unexpected = _Queues(exact)

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

    def has_posted(self) -> bool:
        """Whether a posted receive waits for its message."""
        return any(self._posted.values())

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
        queue = self._unexpected.get(context)
        if not queue:
            return None
        if isinstance(queue, ExactQueue):
            return queue.peek(source, tag)
        for env in queue:
            if _matches(source, tag, env):
                return env
        return None

    def take(self, context: int, source: int, tag: int) -> Envelope | None:
        """Like :meth:`probe`, but remove the message from matching (``Mprobe``)."""
        queue = self._unexpected.get(context)
        if isinstance(queue, ExactQueue):
            return queue.take(source, tag)
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
            if isinstance(queue, ExactQueue):
                return queue.remove(env)
            for i, other in enumerate(queue):
                if other is env:
                    del queue[i]
                    return True
        return False

    def requeue_front(self, env: Envelope) -> None:
        """Put a message back at the head of its queue (a cancelled matched receive)."""
        queue = self._unexpected[env.context]
        if isinstance(queue, ExactQueue):
            queue.push_front(env)
        else:
            queue.insert(0, env)

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

    def pending_in(self, context: int) -> Unexpected:
        """The queue of unexpected messages of ``context`` (live: it fills as they come)."""
        return self._unexpected[context]

    def pending_unexpected(self) -> list[Envelope]:
        """Every queued unexpected message, in context then arrival order."""
        return [env for queue in self._unexpected.values() for env in queue]

    def pending_posted(self) -> list[PostedReceive]:
        """Every posted receive still waiting, in context then posting order."""
        return [recv for queue in self._posted.values() for recv in queue]
