"""Typed errors of the journal.

Purpose: every condition a caller can meet at run time without a bug on our side has its
own exception class here, so consensus and the partition state machine can answer it
(repair from a peer, tell a consumer where the log now starts, refuse to start) instead
of parsing messages.

The three kinds of failure (STYLE "Errors and assertions"):

1. A bug in our own code or in a caller's use of the API is an ``assert``.
2. Bad data from disk is one of the :class:`JournalError` subclasses below, never an
   ``assert``: a disk can hand back anything.
3. A storage failure (``OSError`` from a write or a sync) marks the journal broken. The
   page cache state after a failed ``fsync`` is unknown, so the journal refuses all later
   writes with :class:`JournalBroken` and the runtime exits with a reason.
"""

from __future__ import annotations

__all__ = [
    "JournalBroken",
    "JournalError",
    "OffsetNotRetained",
    "OpBeyondHead",
    "OpNotRetained",
    "RecordFaulty",
    "RecoveryError",
    "RepairRejected",
    "SuperblockCorrupt",
]


class JournalError(Exception):
    """Base class of every typed journal error."""


class OffsetNotRetained(JournalError):
    """A read asked for a message offset that retention has already deleted.

    Attributes:
        offset: The offset that was asked for.
        offset_min: The first offset the journal still holds; a consumer resumes there.
    """

    def __init__(self, offset: int, offset_min: int) -> None:
        assert offset < offset_min
        super().__init__(f"offset {offset} is no longer retained; first retained is {offset_min}")
        self.offset = offset
        self.offset_min = offset_min


class OpNotRetained(JournalError):
    """A read asked for an op below the first op the journal still holds.

    Attributes:
        op: The op that was asked for.
        op_min: The first op the journal still holds (0 when the journal is empty).
    """

    def __init__(self, op: int, op_min: int) -> None:
        super().__init__(f"op {op} is no longer retained; first retained op is {op_min}")
        self.op = op
        self.op_min = op_min


class OpBeyondHead(JournalError):
    """A read asked for an op the journal does not hold yet.

    Attributes:
        op: The op that was asked for.
        op_head: The highest op in the journal (0 when empty).
    """

    def __init__(self, op: int, op_head: int) -> None:
        assert op > op_head
        super().__init__(f"op {op} is beyond the journal head {op_head}")
        self.op = op
        self.op_head = op_head


class RecordFaulty(JournalError):
    """The record of ``op`` is known to be damaged; repair it from a peer.

    Attributes:
        op: The damaged op (see ``Journal.faulty_ops``).
    """

    def __init__(self, op: int) -> None:
        super().__init__(f"record of op {op} is damaged and awaits repair")
        self.op = op


class RepairRejected(JournalError):
    """``Journal.repair`` refused a record: it does not fit the damaged slot.

    Attributes:
        op: The op whose repair was refused.
        reason: Why, in words.
    """

    def __init__(self, op: int, reason: str) -> None:
        super().__init__(f"repair of op {op} rejected: {reason}")
        self.op = op
        self.reason = reason


class RecoveryError(JournalError):
    """Opening found damage that the journal cannot resolve on its own.

    The journal refuses to open rather than guess (a guess could drop committed ops);
    the replica must be rebuilt from its peers by state transfer.
    """


class SuperblockCorrupt(JournalError):
    """Both superblock copies exist but neither is valid."""


class JournalBroken(JournalError):
    """An earlier storage failure left the journal in an unknown state."""
