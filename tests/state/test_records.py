"""A prepare as a journal record: append, read back, restore a damaged or cut record."""

from __future__ import annotations

import random

from broker.state.records import append_prepare, prepare_of, restore_prepare
from consensus.messages import PREPARE_HEADER, Prepare, make_prepare_header, root_header
from journal import Journal, MemoryStorage
from journal.record import RECORD_HEADER_SIZE


def _prepares(count: int) -> list[Prepare]:
    parent = root_header(3).checksum
    out = []
    for op in range(1, count + 1):
        body = f"body of op {op}".encode() * op
        header = make_prepare_header(
            group=3,
            view=1,
            op=op,
            commit=op - 1,
            parent=parent,
            client_id=7,
            session=2,
            request=op,
            operation=9,
            timestamp_us=1_000 * op,
            frontier=op,
            body=body,
        )
        out.append(Prepare(header, body))
        parent = header.checksum
    return out


def _read(journal: Journal, op: int) -> Prepare | None:
    return prepare_of(journal.read_record(op), op)


def test_an_appended_prepare_reads_back_whole_at_its_op_and_offset() -> None:
    journal = Journal.open(MemoryStorage(random.Random(1)))
    prepares = _prepares(3)
    for prepare in prepares:
        size = append_prepare(journal, prepare)
        assert size == PREPARE_HEADER.size + len(prepare.body)
    journal.sync()
    assert [_read(journal, op) for op in (1, 2, 3)] == prepares
    assert journal.read_record(2).header.offset == 1  # the offset space is the op space
    assert prepare_of(journal.read_record(2), 3) is None  # not the op it claims


def test_restore_rewrites_a_damaged_record_and_appends_a_cut_one() -> None:
    storage = MemoryStorage(random.Random(2))
    journal = Journal.open(storage)
    prepares = _prepares(4)
    for prepare in prepares[:3]:
        append_prepare(journal, prepare)
    journal.sync()
    first = RECORD_HEADER_SIZE + PREPARE_HEADER.size + len(prepares[0].body)
    storage.corrupt("00000000000000000000.log", first + RECORD_HEADER_SIZE + 3, 1)
    journal = Journal.open(storage)
    assert journal.faulty_ops() == [2]
    restore_prepare(journal, prepares[1])  # in place
    restore_prepare(journal, prepares[3])  # at the head, durably
    assert journal.faulty_ops() == []
    assert journal.op_durable == 4
    assert [_read(journal, op) for op in (1, 2, 3, 4)] == prepares
