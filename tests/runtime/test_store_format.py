"""A partition group's journal format on real files: a new group says its records carry
message offsets, a group that holds data without saying so is refused, and a group whose
formatting a crash cut short is formatted again."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.runtime.store import (
    PARTITION_JOURNAL_FORMAT,
    PARTITION_JOURNAL_FORMAT_NAME,
    GroupStore,
)
from broker.state.partition import Frontier
from consensus.messages import CHECKSUM_SIZE, Prepare, make_prepare_header
from journal import JournalError
from sdk.wire.batch import OutgoingMessage, build_batch, stamped_batch, verify_batch
from sdk.wire.codes import Operation


def _batch_prepare() -> Prepare:
    """Op 1 of a partition log: a batch of two messages stamped at offset 0."""
    batch = build_batch([OutgoingMessage(1, b"a"), OutgoingMessage(2, b"b")])
    head = Frontier(0, 0)
    body = stamped_batch(
        batch,
        verify_batch(batch),
        partition_id=0,
        base_offset=head.next_offset,
        base_timestamp=1_000,
    )
    header = make_prepare_header(
        group=1,
        view=0,
        op=1,
        commit=0,
        parent=bytes(CHECKSUM_SIZE),
        client_id=0,
        session=0,
        request=0,
        operation=Operation.SEND_MESSAGES,
        timestamp_us=1_000,
        body=body,
    )
    return Prepare(header, body)


def _open(path: Path) -> GroupStore:
    return GroupStore(path, no_sync=False, segment_size_bytes=1 << 20, partition=True)


def test_a_partition_group_is_formatted_and_reopens(tmp_path: Path) -> None:
    store = _open(tmp_path / "group")
    store.append(_batch_prepare())
    store.sync()
    store.close()
    marker = tmp_path / "group" / PARTITION_JOURNAL_FORMAT_NAME
    assert marker.read_bytes() == PARTITION_JOURNAL_FORMAT
    again = _open(tmp_path / "group")
    try:
        assert again.journal.op_head == 1
        assert again.journal.offset_next == 2  # message offsets, not ops
    finally:
        again.close()


def test_a_partition_journal_without_its_format_is_refused(tmp_path: Path) -> None:
    store = _open(tmp_path / "group")
    store.append(_batch_prepare())
    store.sync()
    store.close()
    (tmp_path / "group" / PARTITION_JOURNAL_FORMAT_NAME).unlink()
    with pytest.raises(JournalError, match="older version"):
        _open(tmp_path / "group")


def test_a_group_whose_formatting_was_cut_short_is_formatted_again(tmp_path: Path) -> None:
    path = tmp_path / "group"
    (path / "journal").mkdir(parents=True)  # a crash right after the directories
    (path / PARTITION_JOURNAL_FORMAT_NAME).write_bytes(b"")  # and a torn format file
    store = GroupStore(path, no_sync=False, segment_size_bytes=1 << 20, partition=True)
    store.close()
    assert (path / PARTITION_JOURNAL_FORMAT_NAME).read_bytes() == PARTITION_JOURNAL_FORMAT
