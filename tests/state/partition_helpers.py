"""A tiny consensus stand-in for partition tests: a log per replica, prepare, apply.

Each replica's log is a real journal (``journal.Journal`` over a ``MemoryStorage``) that
stores prepares as the hosts do (``broker.state.records``), so the partition reads the
journal's index exactly as on a node.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from broker.state.partition import (
    PartitionRequest,
    PartitionResult,
    PartitionState,
    operation_of,
)
from broker.state.records import PartitionJournal, append_prepare, partition_fields, prepare_of
from consensus.messages import CHECKSUM_SIZE, Prepare, PrepareBody, make_prepare_header
from journal import Journal, JournalConfig, JournalError, MemoryStorage
from sdk.wire.batch import OutgoingMessage, build_batch, read_batch

STREAM_ID, TOPIC_ID, PARTITION_ID = 3, 4, 5
SEGMENT_SIZE_BYTES = 128
"""The smallest segments: every record rolls one, so reads cross segments all the time."""


class JournalLog:
    """A partition group's journal host: prepares stored in a real journal, read back."""

    def __init__(self, segment_size_bytes: int = SEGMENT_SIZE_BYTES) -> None:
        self.storage = MemoryStorage(random.Random(0))
        self.config = JournalConfig(segment_size_bytes_max=segment_size_bytes)
        self.journal = Journal.open(self.storage, self.config)

    def read(self, op: int) -> Prepare | None:
        journal = self.journal
        if not journal.op_min <= op <= journal.op_head or op < 1:
            return None
        try:
            return prepare_of(journal.read_record(op), op)
        except JournalError:
            return None

    def op_max(self) -> int:
        return self.journal.op_head

    def append(self, prepare: Prepare) -> None:
        append_prepare(self.journal, prepare, partition_fields)

    def truncate(self, op_max: int) -> None:
        self.journal.truncate(max(op_max, self.journal.op_min - 1))

    def retain(self, op: int) -> int:
        """Delete the whole sealed segments below ``op`` (synced first, as a host does)."""
        self.journal.sync()
        return len(self.journal.retain(op))

    def reopen(self) -> None:
        """Open the journal again from its storage, as a restart does."""
        self.journal.close()
        self.journal = Journal.open(self.storage, self.config)


class MemoryLog(PartitionJournal):
    """A replica's log for :class:`PartitionState`: op-numbered bodies, as the host's
    journal holds them (and ``bodies`` to look at them)."""

    def __init__(self, segment_size_bytes: int = SEGMENT_SIZE_BYTES) -> None:
        self.host = JournalLog(segment_size_bytes)
        super().__init__(self.host)

    @property
    def journal(self) -> Journal:
        return self.host.journal

    @property
    def bodies(self) -> dict[int, tuple[int, PrepareBody]]:
        """Every op the journal holds, as ``(operation, body)``."""
        held: dict[int, tuple[int, PrepareBody]] = {}
        for op in range(max(1, self.journal.op_min), self.journal.op_head + 1):
            prepare = self.host.read(op)
            assert prepare is not None
            held[op] = (prepare.header.operation, prepare.body)
        return held

    def append(self, op: int, operation: int, body: PrepareBody) -> None:
        header = make_prepare_header(
            group=1,
            view=0,
            op=op,
            commit=0,
            parent=bytes(CHECKSUM_SIZE),
            client_id=0,
            session=0,
            request=0,
            operation=operation,
            timestamp_us=0,
            body=body,
        )
        self.host.append(Prepare(header, body))

    def truncate(self, op_max: int) -> None:
        self.host.truncate(op_max)


@dataclass
class Replica:
    """One replica of a partition group: its log and its state machine."""

    log: MemoryLog = field(default_factory=MemoryLog)
    state: PartitionState = field(init=False)

    def __post_init__(self) -> None:
        self.state = PartitionState(STREAM_ID, TOPIC_ID, PARTITION_ID, self.log)

    @property
    def head_op(self) -> int:
        return max(self.log.journal.op_head, self.state.commit_op)


@dataclass
class Group:
    """A primary and backups, driven in lock step: prepare, replicate, commit."""

    replicas: list[Replica]
    clock_us: int = 1_000_000

    @classmethod
    def of(cls, count: int) -> Group:
        return cls([Replica() for _ in range(count)])

    @property
    def primary(self) -> Replica:
        return self.replicas[0]

    def prepare(self, request: PartitionRequest, timestamp_us: int | None = None) -> int:
        """Prepare on the primary and journal on every replica; returns the op."""
        if timestamp_us is None:
            self.clock_us += 10
            timestamp_us = self.clock_us
        op = self.primary.head_op + 1
        body = self.primary.state.prepare(op, request, timestamp_us)
        operation = operation_of(request)
        self.primary.log.append(op, operation, body)
        for backup in self.replicas[1:]:
            assert backup.state.check_prepared(op, operation, body) is None
            backup.log.append(op, operation, body)
        return op

    def commit(self, op_max: int | None = None) -> list[list[PartitionResult]]:
        """Apply every journaled op up to ``op_max`` on every replica, in order."""
        results: list[list[PartitionResult]] = []
        for replica in self.replicas:
            applied: list[PartitionResult] = []
            last = replica.head_op if op_max is None else op_max
            for op in range(replica.state.commit_op + 1, last + 1):
                operation, body = replica.log.read(op)
                applied.append(replica.state.apply(op, operation, body))
            results.append(applied)
        return results

    def submit(self, request: PartitionRequest) -> PartitionResult:
        """Prepare and commit one request; every replica must give the same result."""
        self.prepare(request)
        results = self.commit()
        assert all(r == results[0] for r in results), results
        return results[0][-1]


def batch(*payloads: bytes, origin_timestamp: int = 0) -> bytearray:
    """A producer batch of the given payloads."""
    return build_batch(
        [
            OutgoingMessage(id=i + 1, payload=p, origin_timestamp=origin_timestamp)
            for i, p in enumerate(payloads)
        ]
    )


def payloads_of(slices_parts: list[bytes]) -> list[tuple[int, bytes]]:
    """(offset, payload) of every message in the given batch records."""
    found: list[tuple[int, bytes]] = []
    for record in slices_parts:
        _, messages = read_batch(record)
        found.extend((m.offset, bytes(m.payload)) for m in messages)
    return found
