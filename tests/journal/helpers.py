"""Shared helpers for the journal tests: storages of both kinds, records, damage."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from journal import Journal, JournalConfig, MemoryStorage, Record, Storage
from journal.record import RECORD_HEADER_SIZE, encode_header
from journal.storage import FileStorage


@dataclass(frozen=True)
class Spec:
    """What a test appended for one op: enough to compare a read with."""

    op: int
    offset: int
    message_count: int
    timestamp_us: int
    body: bytes
    view: int = 1
    client_id: int = 0
    request: int = 0

    @property
    def size(self) -> int:
        return RECORD_HEADER_SIZE + len(self.body)

    def record(self) -> Record:
        """The record as a peer would hand it over for a repair."""
        _, header = encode_header(
            self.body,
            op=self.op,
            view=self.view,
            client_id=self.client_id,
            request=self.request,
            offset=self.offset,
            message_count=self.message_count,
            timestamp_us=self.timestamp_us,
        )
        return Record(header, memoryview(self.body))


def make_body(op: int, size: int) -> bytes:
    """A deterministic body that differs from op to op."""
    return bytes((op * 7 + i) % 251 for i in range(size))


def append(journal: Journal, spec: Spec) -> None:
    journal.append(
        spec.body,
        op=spec.op,
        view=spec.view,
        client_id=spec.client_id,
        request=spec.request,
        offset=spec.offset,
        message_count=spec.message_count,
        timestamp_us=spec.timestamp_us,
    )


def append_many(
    journal: Journal,
    count: int,
    *,
    body_size: int = 100,
    op_first: int = 1,
    offset_first: int = 0,
    timestamp_first_us: int = 1_000,
    timestamp_step_us: int = 10,
) -> list[Spec]:
    """Appends ``count`` records (2 messages each); returns what was appended."""
    specs = []
    offset = offset_first
    for i in range(count):
        op = op_first + i
        spec = Spec(
            op=op,
            offset=offset,
            message_count=2,
            timestamp_us=timestamp_first_us + i * timestamp_step_us,
            body=make_body(op, body_size),
            client_id=(op << 64) | op,
            request=op,
        )
        append(journal, spec)
        specs.append(spec)
        offset += spec.message_count
    return specs


def assert_record(record: Record, spec: Spec) -> None:
    header = record.header
    assert header.op == spec.op
    assert header.offset == spec.offset
    assert header.message_count == spec.message_count
    assert header.timestamp_us == spec.timestamp_us
    assert header.view == spec.view
    assert header.client_id == spec.client_id
    assert header.request == spec.request
    assert bytes(record.body) == spec.body


def assert_journal_holds(journal: Journal, specs: list[Spec]) -> None:
    """The journal holds exactly ``specs``, readable one by one and as one range."""
    assert journal.op_head == (specs[-1].op if specs else 0)
    assert journal.faulty_ops() == []
    for spec in specs:
        assert_record(journal.read_record(spec.op), spec)
    if specs:
        records = journal.read_messages(
            specs[0].offset, count_max=1 << 30, size_max=64 * 1024 * 1024
        )
        assert [record.header.op for record in records] == [spec.op for spec in specs]
        for record, spec in zip(records, specs, strict=True):
            assert_record(record, spec)


# --- Storages of both kinds ------------------------------------------------------------------


class Disk:
    """A storage location that can be reopened: a directory, or one MemoryStorage."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self._path = tmp_path / "group"
        self._memory = MemoryStorage(random.Random(7)) if kind == "memory" else None
        self._opened: list[FileStorage] = []

    def storage(self) -> Storage:
        """The storage, as a freshly started process would open it."""
        if self._memory is not None:
            return self._memory
        storage = FileStorage(str(self._path))
        self._opened.append(storage)
        return storage

    def open(self, config: JournalConfig | None = None) -> Journal:
        return Journal.open(self.storage(), config)

    def close(self) -> None:
        for storage in self._opened:
            storage.close()


# --- Damage through the Storage protocol (works the same on both kinds) ----------------------


def read_file(storage: Storage, name: str) -> bytes:
    file = storage.open(name)
    try:
        buffer = bytearray(file.size())
        assert file.read_into(0, buffer) == len(buffer)
        return bytes(buffer)
    finally:
        file.close()


def overwrite(storage: Storage, name: str, position: int, data: bytes) -> None:
    file = storage.open(name)
    try:
        file.write(position, [data])
        file.sync()
    finally:
        file.close()


def cut(storage: Storage, name: str, size: int) -> None:
    file = storage.open(name)
    try:
        file.truncate(size)
        file.sync()
    finally:
        file.close()


def flip(storage: Storage, name: str, position: int) -> None:
    """Flips every bit of one byte."""
    byte = read_file(storage, name)[position]
    overwrite(storage, name, position, bytes([byte ^ 0xFF]))


def remove(storage: Storage, name: str) -> None:
    storage.remove(name)
    storage.sync_directory()


def log_name(offset_base: int = 0) -> str:
    return f"{offset_base:020}.log"


def index_name(offset_base: int = 0) -> str:
    return f"{offset_base:020}.index"


def position_of(specs: list[Spec], op: int) -> int:
    """Byte position of ``op`` when every spec sits in one segment from ``specs[0]``."""
    return sum(spec.size for spec in specs if spec.op < op)


Damage = Callable[[Storage], None]
