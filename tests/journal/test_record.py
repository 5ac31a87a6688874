"""The record codec: round trips, and nothing but an intact header parses.

Method: hypothesis draws header fields and bodies; every truncation and every single-byte
change of a built header must fail to parse (the checksum covers every byte after it and
the checksum itself is compared), while the untouched header parses back to its fields.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from journal.index import INDEX_ENTRY_SIZE, IndexEntry, encode_entries, parse_entries
from journal.record import (
    RECORD_BODY_SIZE_MAX,
    RECORD_HEADER_SIZE,
    body_matches,
    encode_header,
    header_in_range,
    parse_header,
)

u64 = st.integers(0, (1 << 64) - 1)


class HeaderFields(TypedDict):
    """The header fields ``encode_header`` takes besides the body (what mypy needs to
    know that ``**fields`` never supplies ``body_prefix``)."""

    op: int
    view: int
    client_id: int
    request: int
    offset: int
    message_count: int
    timestamp_us: int


header_fields = st.fixed_dictionaries(
    {
        "op": st.integers(1, (1 << 64) - 1),
        "view": u64,
        "client_id": st.integers(0, (1 << 128) - 1),
        "request": u64,
        "offset": st.integers(0, (1 << 63)),
        "message_count": st.integers(0, (1 << 32) - 1),
        "timestamp_us": u64,
    }
)


@given(fields=header_fields, body=st.binary(max_size=512))
def test_record_header_round_trips(fields: HeaderFields, body: bytes) -> None:
    data, header = encode_header(body, **fields)
    assert len(data) == RECORD_HEADER_SIZE
    parsed = parse_header(data, 0)
    assert parsed == header
    assert header_in_range(header)
    assert body_matches(header, body)
    for name, value in fields.items():
        assert getattr(parsed, name) == value
    assert header.body_size == len(body)
    assert header.size == RECORD_HEADER_SIZE + len(body)


@settings(max_examples=50)
@given(fields=header_fields, body=st.binary(min_size=1, max_size=64), data=st.data())
def test_record_header_any_changed_byte_fails_to_parse(
    fields: HeaderFields, body: bytes, data: st.DataObject
) -> None:
    built, header = encode_header(body, **fields)
    for position in range(RECORD_HEADER_SIZE):
        damaged = bytearray(built)
        damaged[position] ^= data.draw(st.integers(1, 255))
        assert parse_header(damaged, 0) is None, position
    changed = bytearray(body)
    changed[data.draw(st.integers(0, len(body) - 1))] ^= 0x01
    assert not body_matches(header, changed)
    assert not body_matches(header, body[:-1])


@given(raw=st.binary(min_size=RECORD_HEADER_SIZE, max_size=RECORD_HEADER_SIZE))
def test_record_header_random_bytes_do_not_parse(raw: bytes) -> None:
    assert parse_header(raw, 0) is None


def test_record_header_zeros_do_not_parse() -> None:
    assert parse_header(bytes(RECORD_HEADER_SIZE), 0) is None


def test_record_header_parses_at_a_position_in_a_larger_buffer() -> None:
    built, header = encode_header(
        b"x", op=5, view=0, client_id=0, request=0, offset=0, message_count=1, timestamp_us=0
    )
    buffer = bytes(7) + built + bytes(3)
    assert parse_header(buffer, 7) == header
    assert parse_header(buffer, 6) is None


def test_record_header_out_of_range_fields_are_refused_for_repair() -> None:
    _, header = encode_header(
        b"", op=1, view=0, client_id=0, request=0, offset=0, message_count=1, timestamp_us=0
    )
    assert header_in_range(header)
    assert not header_in_range(replace(header, op=0))
    assert header_in_range(replace(header, message_count=0))  # a record of no message
    assert not header_in_range(replace(header, message_count=1 << 32))
    assert not header_in_range(replace(header, body_size=RECORD_BODY_SIZE_MAX + 1))
    assert not header_in_range(replace(header, client_id=1 << 128))


@given(
    entries=st.lists(st.tuples(u64, u64, u64, u64).map(lambda t: IndexEntry(*t)), max_size=20),
    tail=st.integers(0, INDEX_ENTRY_SIZE - 1),
)
def test_index_entries_round_trip_and_ignore_a_partial_tail(
    entries: list[IndexEntry], tail: int
) -> None:
    data = encode_entries(entries)
    assert len(data) == INDEX_ENTRY_SIZE * len(entries)
    assert parse_entries(data + bytes(tail)) == entries


@settings(max_examples=100)
@given(fields=header_fields, prefix=st.binary(max_size=200), body=st.binary(max_size=512))
def test_a_body_prefix_gives_the_header_of_the_joined_body(
    fields: HeaderFields, prefix: bytes, body: bytes
) -> None:
    joined_bytes, joined = encode_header(prefix + body, **fields)
    split_bytes, split = encode_header(memoryview(body), body_prefix=prefix, **fields)
    assert split_bytes == joined_bytes and split == joined
