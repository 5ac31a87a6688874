"""A tiny consensus stand-in for partition tests: a log per replica, prepare, apply."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.state.partition import (
    Buffer,
    PartitionRequest,
    PartitionResult,
    PartitionState,
    operation_of,
)
from sdk.wire.batch import OutgoingMessage, build_batch, read_batch

STREAM_ID, TOPIC_ID, PARTITION_ID = 3, 4, 5


class MemoryLog:
    """Op-numbered bodies, as the host's journal would hold them."""

    def __init__(self) -> None:
        self.bodies: dict[int, tuple[int, bytes]] = {}

    def append(self, op: int, operation: int, body: bytes) -> None:
        self.bodies[op] = (operation, body)

    def truncate(self, op_max: int) -> None:
        for op in sorted(self.bodies):
            if op > op_max:
                del self.bodies[op]

    def read(self, op: int) -> tuple[int, Buffer]:
        return self.bodies[op]


@dataclass
class Replica:
    """One replica of a partition group: its log and its state machine."""

    log: MemoryLog = field(default_factory=MemoryLog)
    state: PartitionState = field(init=False)

    def __post_init__(self) -> None:
        self.state = PartitionState(STREAM_ID, TOPIC_ID, PARTITION_ID, self.log)

    @property
    def head_op(self) -> int:
        return max(self.log.bodies, default=self.state.commit_op)


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
                operation, body = replica.log.bodies[op]
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
