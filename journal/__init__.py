"""Segment journals: durable, checksummed, recoverable logs, one per VSR group.

The public face of the package; ``docs/journal.md`` describes the on-disk format, the
recovery rules, the sync concurrency contract and retention. Modules:

- ``storage_api``: the :class:`Storage` and :class:`StorageFile` protocols.
- ``memory_storage``: :class:`MemoryStorage`, the simulated disk with crashes and faults.
- ``storage``: ``FileStorage``, real files; the package's only ``os`` user. It is not
  imported here, so that importing ``journal`` never reaches ``os`` (the simulator's and
  the state machines' import contracts forbid it, transitive imports included): the
  runtime writes ``from journal.storage import FileStorage``.
- ``record``: the 128-byte record header and its checksums.
- ``index``: the 32-byte sparse index entries.
- ``segment``: a segment's files and in-memory columns.
- ``recovery``: the walk that rebuilds a journal on open.
- ``journal``: :class:`Journal`, the API consensus and the partition state machine use.
- ``superblock``: :class:`Superblock`, the two-copy durable VSR state.
"""

from journal.errors import (
    JournalBroken,
    JournalError,
    OffsetNotRetained,
    OpBeyondHead,
    OpNotRetained,
    RecordFaulty,
    RecoveryError,
    RepairRejected,
    SuperblockCorrupt,
)
from journal.journal import (
    SEGMENT_SIZE_BYTES_DEFAULT,
    Journal,
    JournalConfig,
    SegmentInfo,
    SyncPlan,
)
from journal.memory_storage import MemoryStorage
from journal.record import RECORD_HEADER_SIZE, Record, RecordHeader
from journal.recovery import FaultyRegion, RecoveryReport
from journal.storage_api import Storage, StorageFile
from journal.superblock import Superblock, SuperblockState

__all__ = [
    "RECORD_HEADER_SIZE",
    "SEGMENT_SIZE_BYTES_DEFAULT",
    "FaultyRegion",
    "Journal",
    "JournalBroken",
    "JournalConfig",
    "JournalError",
    "MemoryStorage",
    "OffsetNotRetained",
    "OpBeyondHead",
    "OpNotRetained",
    "Record",
    "RecordFaulty",
    "RecordHeader",
    "RecoveryError",
    "RecoveryReport",
    "RepairRejected",
    "SegmentInfo",
    "Storage",
    "StorageFile",
    "Superblock",
    "SuperblockCorrupt",
    "SuperblockState",
    "SyncPlan",
]
