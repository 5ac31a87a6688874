"""What a replica needs from its host: the log, the state machine and the durable state.

Purpose: the contracts between the sans-IO replica and the code that hosts it (the trio
runtime, the simulator, the tests). The journal package is never imported here; the host
adapts its journal to :class:`Log`.

Host contract (the host executes the actions of one ``step`` in order):

1. ``AppendToJournal``, ``TruncateJournal`` and ``WriteCheckpoint`` take effect in the
   log's reads before the next ``step``: ``Log.read`` sees an appended prepare at once,
   whether or not it is written yet ("read your writes").
2. ``WriteSuperblock`` is durable before any later action of the same list is executed.
   The replica relies on this ordering rule: it emits the superblock write before the
   view-scoped messages that depend on it (VSR Revisited §4.3 assumes no disk; the fix,
   as in TigerBeetle, is to persist view and log_view before sending anything that
   reveals them).
3. ``PrepareWritten(op, checksum)`` is reported once every append up to ``op`` is written,
   in append order; ``PrepareSynced(op, checksum)`` once a ``SyncJournal`` covering ``op``
   has completed. A report whose checksum no longer matches (the op was truncated and
   replaced meanwhile) is ignored by the replica.
4. After a crash the host passes the last durable :class:`DurableState` (the superblock)
   and the snapshot of the last ``WriteCheckpoint`` to the new replica, and its log holds
   whatever prepares survived, with ``faulty_ops`` naming records recovery found corrupt
   and ``head_faulty`` saying whether it may have cut durable records after the last.
   The host keeps every field of :class:`DurableState`; ``log_damaged`` goes in the
   superblock's first extra field (``SUPERBLOCK_EXTRA_LOG_DAMAGED``), 1 for true.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TypeAlias

from consensus.messages import Prepare, PrepareBody

SUPERBLOCK_EXTRA_LOG_DAMAGED: Final = 0
"""The index of the superblock's extra u64 field that holds ``DurableState.log_damaged``."""


@dataclass(frozen=True, slots=True)
class DurableState:
    """The replica-local state that survives a crash: the superblock's consensus fields.

    Invariants: ``log_view <= view``; view, log_view, commit and checkpoint never move
    backwards across writes (checkpoint moves forward by state transfer too).
    """

    #: The highest view this replica has joined (it will never take part in a lower one).
    view: int
    #: The latest view in which this replica's log was installed in normal status; when it
    #: is durable, the journal holds that view's log at least up to the view's start op.
    log_view: int
    #: Every op up to ``commit`` is committed and was in the journal when this was written.
    commit: int
    #: The op of the last checkpoint snapshot (0: none); ops up to it need not be in the log.
    checkpoint: int
    #: A restart found the journal damaged (a record corrupt or missing, or a head cut that
    #: recovery could not prove debris), and the replica has not since installed a view's
    #: log durably (what makes log_view durable). It may have acknowledged prepares its
    #: journal no longer holds, so it must not vote before it rejoins, however whole the
    #: journal looks at a later restart: its own truncation of the damage erases the
    #: evidence that recovery would find again (Protocol-Aware Recovery).
    log_damaged: bool = False

    def __post_init__(self) -> None:
        assert 0 <= self.log_view <= self.view
        assert 0 <= self.checkpoint <= self.commit


class Log(Protocol):
    """The group's journal as the replica sees it (the host owns and writes it)."""

    def read(self, op: int) -> Prepare | None:
        """The intact prepare at ``op``, or None if absent, discarded or corrupt."""
        ...

    def op_max(self) -> int:
        """The highest op held (0 for an empty log)."""
        ...

    def faulty_ops(self) -> Sequence[int]:
        """Ops whose records recovery found corrupt, in ascending order (checked at start)."""
        ...

    def head_faulty(self) -> bool:
        """Whether recovery may have cut durable records above ``op_max`` (checked at start).

        Damage to the last records of a journal looks the same to recovery as a write torn
        by the crash, and both are cut; only a cut that is provably an unfinished write
        is not faulty. The ops cut are then unknown, not absent: they may have been
        acknowledged.
        """
        ...


RequestBody: TypeAlias = bytes | memoryview | tuple[bytes | memoryview, ...]
"""A client request's body as its host hands it to a replica: one buffer, or a tuple of
parts whose concatenation is the body. Parts let a host pass a body made of pieces it
already holds (a received batch and what admission computed of it) without joining them:
the replica never reads a request body, only ``StateMachine.prepare`` does, and a state
machine that wants one buffer joins them (:func:`joined_body`). The buffers are read,
never kept past ``prepare`` nor written: the prepare body is the state machine's own."""


def joined_body(body: RequestBody) -> bytes:
    """``body`` as one ``bytes`` (a copy unless it already is one)."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, memoryview):
        return body.tobytes()
    return b"".join(body)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What the primary-side ``StateMachine.prepare`` made of a request."""

    #: The body the prepare carries (and the journal stores), e.g. a stamped batch.
    body: PrepareBody
    #: The state machine's frontier after this op, carried in the prepare header.
    frontier: int


class RequestRejected(Exception):
    """``StateMachine.prepare`` refused a request before it entered the log.

    The replica answers the client with ``status`` (an application error code) and
    creates no prepare; nothing enters the client table, so a retry is judged afresh.
    """

    def __init__(self, status: int, reason: str = "") -> None:
        assert status != 0
        super().__init__(f"request rejected with status {status}: {reason}")
        self.status = status
        self.reason = reason


class StateMachine(Protocol):
    """The replicated application: deterministic, fed committed prepares in op order."""

    def prepare(
        self, op: int, operation: int, body: RequestBody, timestamp_us: int, frontier: int
    ) -> Prepared:
        """Turn a client request into the body of prepare ``op``; called on the primary only.

        ``frontier`` is the frontier of op ``op - 1`` in the log (0 before the first),
        which may be uncommitted: this is how a partition stamps dense message offsets onto
        a batch while earlier batches are still in the pipeline. The result must depend
        only on the arguments. Raise :class:`RequestRejected` for a request that must not
        enter the log (a malformed batch, say).
        """
        ...

    def apply(self, prepare: Prepare) -> bytes:
        """Execute one committed op and return the reply body.

        The result must depend only on the state and the prepare: anything random or
        time-dependent is chosen by the primary and carried in the prepare (VSR Revisited
        §4.4), so every replica computes identical bytes.
        """
        ...

    def snapshot(self) -> bytes:
        """A deterministic encoding of the whole state after the last applied op."""
        ...

    def log_op_min(self) -> int | None:
        """The oldest op whose record the log must keep beside :meth:`snapshot`, where the
        log is the data (a partition's messages): the first op holding data the state
        still serves. None when the state holds everything it serves (the metadata).
        Never decreases, never above the op after the last applied one. A state transfer
        carries it, and the receiver backfills the committed records from it up to the
        snapshot's op from its peers."""
        ...

    def restore(self, snapshot: bytes) -> None:
        """Replace the whole state with one produced by ``snapshot``."""
        ...
