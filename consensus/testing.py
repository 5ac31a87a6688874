"""An in-memory log and a deterministic state machine for driving replicas without a disk.

Purpose: the smallest real implementations of :class:`consensus.protocols.Log` and
:class:`consensus.protocols.StateMachine`, for unit tests, scenario tests and simulators
that want a replica without the segment journal or the broker's state machines.

Invariants:

1. ``MemoryLog`` holds a contiguous run of ops ``base+1..op_max`` (``base`` is the op the
   journal restarted after, at a checkpoint); ops up to ``synced_op`` survive a power loss.
2. ``LedgerStateMachine`` is a pure function of the prepares applied to it, in order: its
   replies and snapshots are identical bytes on every replica.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from consensus.events import ClientRequested
from consensus.messages import Prepare, checksum
from consensus.protocols import Prepared, RequestBody, RequestRejected, joined_body

#: A request body the ledger refuses at prepare time, to exercise rejections.
REJECTED_BODY: Final = b"reject me"
#: The status a rejected request is answered with.
REJECTED_STATUS: Final = 4022

_APPLIED: Final = struct.Struct("<Q16sQQ16s")  # op, client_id, session, request, body checksum
_LEDGER_HEADER: Final = struct.Struct("<4sI16sQ")  # magic, count, digest, retained from (0: all)


@dataclass(slots=True)
class MemoryLog:
    """A journal in memory: appends, truncation, sync, and crashes that lose unsynced ops."""

    base: int = 0
    prepares: list[Prepare] = field(default_factory=list)
    synced_op: int = 0
    faulty: list[int] = field(default_factory=list)
    #: Recovery cut records after the last that may have been durable (damaged, not torn).
    faulty_head: bool = False

    # Log protocol --------------------------------------------------------------------------

    def read(self, op: int) -> Prepare | None:
        if op <= self.base or op > self.op_max() or op in self.faulty:
            return None
        prepare = self.prepares[op - self.base - 1]
        assert prepare.op == op
        return prepare

    def op_max(self) -> int:
        return self.base + len(self.prepares)

    def faulty_ops(self) -> Sequence[int]:
        return sorted(op for op in self.faulty if self.base < op <= self.op_max())

    def head_faulty(self) -> bool:
        return self.faulty_head

    # Host side -----------------------------------------------------------------------------

    def append(self, prepare: Prepare) -> None:
        assert prepare.op == self.op_max() + 1, (prepare.op, self.op_max())
        self.prepares.append(prepare)
        self.faulty_head = False  # a new head was written after whatever was cut

    def truncate(self, after_op: int) -> None:
        assert after_op >= self.base
        del self.prepares[after_op - self.base :]
        self.synced_op = min(self.synced_op, after_op)
        self.faulty = [op for op in self.faulty if op <= after_op]

    def sync(self) -> None:
        self.synced_op = self.op_max()

    def checkpoint(self, op: int, journal_restart_op: int = 0) -> None:
        """Ops up to ``op`` are in a snapshot; restart the journal after it if it is behind,
        or empty at ``journal_restart_op`` when given (``WriteCheckpoint``)."""
        if journal_restart_op:
            assert journal_restart_op <= op + 1
            self.base = journal_restart_op - 1
            self.prepares = []
            self.synced_op = self.base
            self.faulty = []
        elif self.op_max() < op:
            self.base = op
            self.prepares = []
            self.synced_op = op
            self.faulty = []

    def retain(self, op: int) -> None:
        """Drop the records below ``op`` (retention deleted them): reads of them fail."""
        drop = min(max(0, op - 1 - self.base), len(self.prepares))
        del self.prepares[:drop]
        self.base += drop
        self.faulty = [k for k in self.faulty if k > self.base]

    def repair(self, prepare: Prepare) -> None:
        """A ``RepairJournal``: rewrite a damaged record, or append the head's next op."""
        if prepare.op in self.faulty:
            self.prepares[prepare.op - self.base - 1] = prepare
            self.faulty.remove(prepare.op)
        else:
            self.append(prepare)
            self.sync()

    def lose_unsynced(self) -> None:
        """A power loss: every op above ``synced_op`` is gone."""
        self.truncate(max(self.synced_op, self.base))

    def lose_head(self, op: int) -> None:
        """Damage the records from ``op`` on at rest, as recovery meets them at the head of
        a journal: it cuts them, unable to tell them from a torn write, and says so."""
        assert self.base < op <= self.op_max()
        self.truncate(op - 1)
        self.faulty_head = True

    def corrupt(self, op: int) -> None:
        """Make the record at ``op`` unreadable, as a failed checksum would."""
        assert self.base < op <= self.op_max()
        self.faulty.append(op)


@dataclass(slots=True)
class Applied:
    op: int
    client_id: int
    session: int
    request: int
    body_checksum: bytes


class LedgerStateMachine:
    """Records every applied op and chains a digest over them.

    The reply to op n is the digest after applying it, so two replicas that applied
    different histories give different replies. ``applied`` lets tests check that a client
    request was applied exactly once and that replicas agree on every committed op.
    """

    def __init__(self) -> None:
        self.applied: list[Applied] = []
        self.digest = bytes(16)
        #: The first op whose record the log must keep (None: the ledger holds all).
        self.retained_from: int | None = None

    def prepare(
        self, op: int, operation: int, body: RequestBody, timestamp_us: int, frontier: int
    ) -> Prepared:
        """Counts ops in the frontier, so tests can check it follows the log."""
        del operation, timestamp_us
        assert frontier == op - 1, "the frontier follows the log"
        body = joined_body(body)
        if body == REJECTED_BODY:
            raise RequestRejected(REJECTED_STATUS, "the test asked for a rejection")
        return Prepared(body=body, frontier=frontier + 1)

    def apply(self, prepare: Prepare) -> bytes:
        header = prepare.header
        if self.applied:
            assert header.op == self.applied[-1].op + 1, "ops are applied in order, once"
        entry = Applied(
            header.op, header.client_id, header.session, header.request, header.body_checksum
        )
        self.applied.append(entry)
        self.digest = checksum(self.digest + _pack(entry))
        return b"reply:" + self.digest

    def log_op_min(self) -> int | None:
        """Where the ledger's log is its data, the first op it still serves; None: it
        holds everything (``retain_from`` moves it)."""
        return self.retained_from

    def retain_from(self, op: int) -> None:
        """From now on the ledger needs the log's records from ``op`` on only (as a
        partition after a retention); ops it applies later keep it."""
        assert self.applied and op <= self.applied[-1].op + 1
        assert self.retained_from is None or op >= self.retained_from
        self.retained_from = op

    def snapshot(self) -> bytes:
        header = _LEDGER_HEADER.pack(
            b"LSM2", len(self.applied), self.digest, self.retained_from or 0
        )
        return header + b"".join(_pack(entry) for entry in self.applied)

    def restore(self, snapshot: bytes) -> None:
        magic, count, digest, retained_from = _LEDGER_HEADER.unpack_from(snapshot, 0)
        assert magic == b"LSM2"
        applied = []
        offset = _LEDGER_HEADER.size
        for _ in range(count):
            op, client, session, request, body = _APPLIED.unpack_from(snapshot, offset)
            offset += _APPLIED.size
            applied.append(Applied(op, int.from_bytes(client, "little"), session, request, body))
        assert offset == len(snapshot)
        self.applied = applied
        self.digest = digest
        self.retained_from = retained_from or None


def _pack(entry: Applied) -> bytes:
    return _APPLIED.pack(
        entry.op,
        entry.client_id.to_bytes(16, "little"),
        entry.session,
        entry.request,
        entry.body_checksum,
    )


def client_request(
    client_id: int,
    session: int,
    request: int,
    operation: int,
    body: bytes,
    timestamp_us: int,
) -> ClientRequested:
    """A ``ClientRequested`` whose identity digest is the checksum of its body, as a host
    that digests the bodies it receives would give it."""
    return ClientRequested(
        client_id, session, request, operation, body, timestamp_us, checksum(body)
    )
