"""Segment files seen from outside: read records, compare replicas, damage a tail.

Purpose: the chaos harness reads and damages journals through their documented on-disk
format (``docs/journal.md``, "On-disk format"), not through ``journal/``, so that the
comparison of replicas owes nothing to the code under test.

- :func:`record_digests` walks the segments of one group's journal (records back to back:
  a 128-byte header whose ``body_size`` at byte 88 gives the length, checked by the
  header's xxh3-128 checksum over bytes [16, 128)) and returns a digest of every record's
  bytes by op. Replicas of a group must hold byte-identical records for every committed
  op: the header and body both come from the one prepare the primary made.
- :func:`truncate_tail` and :func:`corrupt_tail` damage the newest records of a stopped
  node's segment: a cut inside one of its last records, or flipped bytes in one of them.

Layout (``docs/operations.md``, "Data directory")::

    <data_dir>/metadata/journal/<20 digits>.log
    <data_dir>/partitions/<stream>-<topic>-<partition>-<created op>/journal/<20 digits>.log
"""

from __future__ import annotations

import hashlib
import os
import random
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import xxhash

RECORD_HEADER_SIZE: Final = 128
BODY_SIZE_MAX: Final = 64 * 1024 * 1024
_HEADER: Final = struct.Struct("<16s16s16sQQQQQIIH30s")
# checksum, checksum_body, client_id, op, view, offset, timestamp_us, request, body_size,
# message_count, format_version, reserved
assert _HEADER.size == RECORD_HEADER_SIZE
METADATA_GROUP_NAME: Final = "metadata"


@dataclass(frozen=True, slots=True)
class RecordSpan:
    """Where one valid record sits in a segment file."""

    path: Path
    position: int
    size: int
    op: int


def journal_dirs(data_dir: Path) -> dict[str, Path]:
    """Every group's journal directory of one node, by group name (``metadata`` or the
    partition directory's name, which is the same on every node)."""
    found: dict[str, Path] = {}
    metadata = data_dir / "metadata" / "journal"
    if metadata.is_dir():
        found[METADATA_GROUP_NAME] = metadata
    partitions = data_dir / "partitions"
    if partitions.is_dir():
        for group in sorted(partitions.iterdir()):
            if (group / "journal").is_dir():
                found[group.name] = group / "journal"
    return found


def segments(journal_dir: Path) -> list[Path]:
    """The segment logs of a journal, oldest first (names are zero-padded numbers)."""
    return sorted(p for p in journal_dir.glob("*.log") if p.stem.isdigit())


def _valid_header(raw: bytes) -> tuple[int, int] | None:
    """``(op, body_size)`` of a valid header, else None."""
    fields = _HEADER.unpack(raw)
    # message_count (field 9) is not checked: a record may hold no message (a
    # partition's control op: a consumer offset, a purge, a retention).
    checksum, op, body_size, version, reserved = (
        fields[0],
        fields[3],
        fields[8],
        fields[10],
        fields[11],
    )
    if xxhash.xxh3_128_intdigest(raw[16:]).to_bytes(16, "little") != checksum:
        return None
    if version != 1 or reserved != bytes(30) or op < 1:
        return None
    if body_size > BODY_SIZE_MAX:
        return None
    return op, body_size


def walk(path: Path) -> list[RecordSpan]:
    """The records of one segment from its start up to the first invalid header or the
    end of the file (a torn or damaged tail ends the walk)."""
    spans: list[RecordSpan] = []
    data = path.read_bytes()
    position = 0
    while position + RECORD_HEADER_SIZE <= len(data):
        parsed = _valid_header(data[position : position + RECORD_HEADER_SIZE])
        if parsed is None:
            break
        op, body_size = parsed
        size = RECORD_HEADER_SIZE + body_size
        if position + size > len(data):
            break
        spans.append(RecordSpan(path, position, size, op))
        position += size
    return spans


def record_digests(journal_dir: Path, op_max: int) -> dict[int, bytes]:
    """SHA-256 of every valid record's bytes with ``op <= op_max``, by op."""
    digests: dict[int, bytes] = {}
    for segment in segments(journal_dir):
        data = segment.read_bytes()
        for span in walk(segment):
            if span.op <= op_max:
                record = data[span.position : span.position + span.size]
                digests[span.op] = hashlib.sha256(record).digest()
    return digests


def _tail(journal_dir: Path) -> tuple[Path, list[RecordSpan]] | None:
    for segment in reversed(segments(journal_dir)):
        spans = walk(segment)
        if spans:
            return segment, spans
    return None


def truncate_tail(journal_dir: Path, rng: random.Random, records_max: int = 3) -> str:
    """Cut the newest segment inside one of its last ``records_max`` records (a torn
    write that lost the records after it); returns what was done."""
    tail = _tail(journal_dir)
    if tail is None:
        return f"{journal_dir}: no record to truncate"
    segment, spans = tail
    victim = spans[-rng.randint(1, min(records_max, len(spans)))]
    cut = victim.position + rng.randrange(0, victim.size)
    size = segment.stat().st_size
    os.truncate(segment, cut)
    return (
        f"truncated {segment.name} from {size} to {cut} bytes, inside op {victim.op} "
        f"(last op was {spans[-1].op})"
    )


def corrupt_tail(journal_dir: Path, rng: random.Random, records_max: int = 3) -> str:
    """Flip one to four bytes of one of the newest segment's last ``records_max``
    records, in its header or its body; returns what was done."""
    tail = _tail(journal_dir)
    if tail is None:
        return f"{journal_dir}: no record to corrupt"
    segment, spans = tail
    victim = spans[-rng.randint(1, min(records_max, len(spans)))]
    flips = rng.randint(1, 4)
    positions = sorted(victim.position + rng.randrange(0, victim.size) for _ in range(flips))
    with segment.open("r+b") as file:
        for position in positions:
            file.seek(position)
            byte = file.read(1)[0]
            file.seek(position)
            file.write(bytes([byte ^ (1 << rng.randrange(8))]))
    where = ", ".join(str(p - victim.position) for p in positions)
    return f"flipped bits at record bytes {where} of op {victim.op} in {segment.name}"
