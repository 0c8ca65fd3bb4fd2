"""The collective ledger: what this rank knows of its collectives, per collective context.

Every collective call, blocking, nonblocking or persistent, on the general path
(``mpi.coll.runner.CollOp``) or the straight one (``mpi.coll.fast.Lane``), is
numbered here: its sequence number on the communicator's collective context is
the tag of all its messages, so the calls of one communicator never mix. The
ledger also remembers what each recent call was (its signature), which calls
are running, the world ranks of each communicator, and what is known about
mismatches (the standard requires every rank to call the same collectives in
the same order; a message that does not fit the call it reaches is reported to
every member, and each member fails the collective concerned once).

Pure bookkeeping: no sockets, threads or clocks. The progress engine owns one
ledger, reads it when frames arrive, and sends the reports it decides on.
"""

from __future__ import annotations

from .schedule import describe_signature

__all__ = ["RECENT_CALLS", "Ledger"]

# Signatures are kept for this many calls back per context, to explain a mismatch.
RECENT_CALLS = 256


class Ledger:
    """The collectives of one rank, per collective context.

    The tables are public so that the hot paths read them without a call:

    * ``next``: context -> the sequence number of the next call;
    * ``active``: context -> numbers of the calls started and not finished;
    * ``members``: context -> the world ranks of its communicator;
    * ``calls``: (context, seq) -> the signature of a recent call;
    * ``errors``: context -> (seq, text) of the earliest mismatch reported and not
      yet raised (a report about a later call waits until the rank gets there);
    * ``mismatched``: (context, seq) of every mismatch recorded, so that each is
      recorded and reported once;
    * ``floor``: context -> numbers below it belong to calls abandoned after an
      interrupt (their late messages are dropped without a report);
    * ``first``: context -> the number of the first call of the communicator that took
      it last (:meth:`reuse`; a context never reused starts at 0).
    """

    __slots__ = ("active", "calls", "errors", "first", "floor", "members", "mismatched", "next")

    def __init__(self) -> None:
        self.next: dict[int, int] = {}
        self.active: dict[int, set[int]] = {}
        self.members: dict[int, list[int]] = {}
        self.calls: dict[tuple[int, int], int] = {}
        self.errors: dict[int, tuple[int, str]] = {}
        self.mismatched: set[tuple[int, int]] = set()
        self.floor: dict[int, int] = {}
        self.first: dict[int, int] = {}

    # -- calls -----------------------------------------------------------------------
    def begin(self, context: int, sig: int, members: list[int]) -> int:
        """Number the next call on ``context`` (signature ``sig``; ``members``: the
        communicator's world ranks); its sequence number."""
        seq = self.next.get(context, 0)
        self.next[context] = seq + 1
        active = self.active.get(context)
        if active is None:
            active = self.active[context] = set()
        active.add(seq)
        self.members[context] = members
        calls = self.calls
        calls[(context, seq)] = sig
        calls.pop((context, seq - RECENT_CALLS), None)
        return seq

    def upcoming(self, context: int) -> int:
        """The number the next call on ``context`` gets (the same on every rank)."""
        return self.next.get(context, 0)

    def first_of(self, context: int) -> int:
        """The number of the first call of the communicator now on ``context``."""
        return self.first.get(context, 0)

    def end(self, context: int, seq: int) -> None:
        """Call ``seq`` on ``context`` is finished."""
        self.active[context].discard(seq)

    def is_stray(self, context: int, seq: int) -> bool:
        """Whether call ``seq`` on ``context`` has already finished here (a message
        of it that arrives now was not received within it)."""
        return seq < self.next.get(context, 0) and seq not in self.active.get(context, ())

    def running_with(self, wrank: int) -> list[tuple[int, int]]:
        """(context, earliest running call) of each context whose communicator
        includes world rank ``wrank`` and has calls running."""
        return [
            (context, min(active))
            for context, active in self.active.items()
            if active and wrank in self.members.get(context, ())
        ]

    # -- mismatches ----------------------------------------------------------------------
    def stray_report(self, context: int, seq: int, source: int, sig: int, me: int) -> str | None:
        """The mismatch that a message of finished call ``seq`` reveals (``source``
        called ``sig``; ``me`` is this rank in the communicator), or None when it
        needs no report: the call already failed, or was abandoned."""
        if (context, seq) in self.mismatched or seq < self.floor.get(context, 0):
            return None
        mine = self.calls.get((context, seq))
        return (
            f"collective mismatch (collective #{seq}): rank {source} called "
            f"{describe_signature(sig)}, rank {me} called "
            f"{describe_signature(mine) if mine is not None else 'a different collective'}"
        )

    def record_mismatch(self, context: int, seq: int, text: str) -> bool:
        """Record that call ``seq`` on ``context`` failed with ``text``; False (nothing
        recorded) when it was recorded before or the call was abandoned."""
        if (context, seq) in self.mismatched or seq < self.floor.get(context, 0):
            return False
        self.mismatched.add((context, seq))
        known = self.errors.get(context)
        if known is None or seq < known[0]:
            self.errors[context] = (seq, text)
        return True

    def known_error(self, context: int, seq: int) -> str | None:
        """The text of a mismatch reported for call ``seq`` or an earlier one, kept."""
        known = self.errors.get(context)
        return known[1] if known is not None and known[0] <= seq else None

    def take_mismatch(self, context: int, seq: int) -> str | None:
        """The text of a mismatch reported for call ``seq`` or an earlier one on
        ``context``, now forgotten; None when there is none (a report about a later
        call is kept: it fails the rank when the rank gets there)."""
        known = self.errors.get(context)
        if known is None or known[0] > seq:
            return None
        del self.errors[context]
        return known[1]

    # -- starting again --------------------------------------------------------------
    def reuse(self, context: int, base: int) -> None:
        """A new communicator takes ``context``: number its calls from ``base`` on (or
        later, if this rank ran more there). A mismatch reported about a call before
        ``base`` concerned the context's former communicator and is forgotten; one
        from ``base`` on is early news about the new one (its other members may have
        run, and failed, a collective already) and stays."""
        self.next[context] = self.first[context] = max(base, self.next.get(context, 0))
        known = self.errors.get(context)
        if known is not None and known[0] < base:
            del self.errors[context]

    def restart_at(self, context: int, base: int) -> int:
        """Make the next call on ``context`` number ``base`` or later, forgetting the
        running calls and reported mismatches; the number it gets."""
        base = max(base, self.next.get(context, 0))
        self.next[context] = base
        self.floor[context] = base
        self.active[context] = set()
        self.errors.pop(context, None)
        return base
