"""Shared encodings: names, identifiers, consumers, partitioning, polling, TLV blocks."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk.wire import (
    Balanced,
    Consumer,
    ConsumerKind,
    HeaderKind,
    Identifier,
    MessagesKey,
    OptionEntry,
    PartitionId,
    PollingKind,
    PollingStrategy,
    ProtocolError,
    UserHeader,
    decode_header_value,
    decode_user_headers,
    encode_header_value,
    encode_user_headers,
)
from sdk.wire._buffer import Reader, Writer
from sdk.wire.primitives import (
    decode_consumer,
    decode_identifier,
    decode_name,
    decode_options,
    decode_options_prefixed,
    decode_partition_flag,
    decode_partitioning,
    decode_polling_strategy,
    encode_consumer,
    encode_identifier,
    encode_name,
    encode_options,
    encode_options_prefixed,
    encode_partition_flag,
    encode_partitioning,
    encode_polling_strategy,
)
from tests.wire.strategies import (
    consumers,
    identifiers,
    names,
    option_lists,
    partition_flags,
    partitionings,
    polling_strategies,
    user_headers,
)

T = TypeVar("T")
SETTINGS = settings(max_examples=100, deadline=None)


def _encode(write: Callable[[Writer, T], None], value: T) -> bytes:
    writer = Writer()
    write(writer, value)
    return writer.getvalue()


def _decode_all(read: Callable[[Reader], T], raw: bytes) -> T:
    reader = Reader(raw)
    value = read(reader)
    reader.finish("test value")
    return value


CODECS: list[
    tuple[
        str, Callable[[Writer, object], None], Callable[[Reader], object], st.SearchStrategy[object]
    ]
] = [
    ("name", encode_name, decode_name, names),  # type: ignore[list-item]
    ("identifier", encode_identifier, decode_identifier, identifiers),  # type: ignore[list-item]
    ("consumer", encode_consumer, decode_consumer, consumers),  # type: ignore[list-item]
    ("partition flag", encode_partition_flag, decode_partition_flag, partition_flags),  # type: ignore[list-item]
    ("partitioning", encode_partitioning, decode_partitioning, partitionings),  # type: ignore[list-item]
    ("polling", encode_polling_strategy, decode_polling_strategy, polling_strategies),  # type: ignore[list-item]
    ("options", encode_options_prefixed, decode_options_prefixed, option_lists()),  # type: ignore[list-item]
]


@pytest.mark.parametrize(("what", "write", "read", "values"), CODECS, ids=[c[0] for c in CODECS])
@SETTINGS
@given(data=st.data())
def test_primitive_round_trips_and_bit_flips_raise_only_protocol_error(
    what: str,
    write: Callable[[Writer, object], None],
    read: Callable[[Reader], object],
    values: st.SearchStrategy[object],
    data: st.DataObject,
) -> None:
    value = data.draw(values)
    raw = _encode(write, value)
    assert _decode_all(read, raw) == value
    flipped = bytearray(raw)
    index = data.draw(st.integers(0, len(flipped) - 1))
    flipped[index] ^= 1 << data.draw(st.integers(0, 7))
    try:
        again = _decode_all(read, bytes(flipped))
    except ProtocolError:
        return
    assert _encode(write, again) == bytes(flipped)


def test_known_encodings_from_the_reference() -> None:
    # Shapes quoted in iggy.md 1.9 and the captured create_stream body "02 s1".
    assert _encode(encode_name, "s1") == b"\x02s1"
    assert _encode(encode_identifier, Identifier(7)) == b"\x01\x04\x07\x00\x00\x00"
    assert _encode(encode_identifier, Identifier("s1")) == b"\x02\x02s1"
    assert _encode(encode_consumer, Consumer(ConsumerKind.CONSUMER, Identifier(1))) == (
        b"\x01\x01\x04\x01\x00\x00\x00"
    )
    assert _encode(encode_partition_flag, None) == b"\x00" * 5
    assert _encode(encode_partition_flag, 3) == b"\x01\x03\x00\x00\x00"
    assert _encode(encode_partitioning, Balanced()) == b"\x01\x00"
    assert _encode(encode_partitioning, PartitionId(2)) == b"\x02\x04\x02\x00\x00\x00"
    assert _encode(encode_partitioning, MessagesKey(b"k")) == b"\x03\x01k"
    assert _encode(encode_polling_strategy, PollingStrategy.offset(5)) == b"\x01" + (5).to_bytes(
        8, "little"
    )
    assert _encode(encode_polling_strategy, PollingStrategy.next()) == b"\x05" + bytes(8)


@pytest.mark.parametrize(
    ("read", "raw"),
    [
        (decode_name, b"\x00"),  # empty name
        (decode_name, b"\x02\xff\xfe"),  # not UTF-8
        (decode_identifier, b"\x01\x03\x00\x00\x00"),  # numeric of length 3
        (decode_identifier, b"\x02\x00"),  # empty string identifier
        (decode_identifier, b"\x03\x01x"),  # unknown kind
        (decode_consumer, b"\x03\x01\x04\x00\x00\x00\x00"),  # unknown consumer kind
        (decode_partition_flag, b"\x02\x00\x00\x00\x00"),  # flag 2
        (decode_partition_flag, b"\x00\x01\x00\x00\x00"),  # id under flag 0
        (decode_partitioning, b"\x01\x01x"),  # balanced with a value
        (decode_partitioning, b"\x02\x02\x00\x00"),  # partition id of length 2
        (decode_partitioning, b"\x03\x00"),  # empty messages key
        (decode_polling_strategy, b"\x06" + bytes(8)),  # unknown polling kind
        (decode_polling_strategy, b"\x01" + bytes(7)),  # truncated
    ],
)
def test_non_canonical_primitives_are_refused(read: Callable[[Reader], object], raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        _decode_all(read, raw)


@SETTINGS
@given(headers=st.lists(user_headers(), max_size=4), data=st.data())
def test_user_headers_round_trip_and_survive_only_as_protocol_errors(
    headers: list[UserHeader], data: st.DataObject
) -> None:
    block = encode_user_headers(headers)
    assert decode_user_headers(block) == tuple(headers)
    if block:
        flipped = bytearray(block)
        flipped[data.draw(st.integers(0, len(block) - 1))] ^= 0xFF
        try:
            again = decode_user_headers(bytes(flipped))
        except ProtocolError:
            return
        assert encode_user_headers(again) == bytes(flipped)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x01\x00\x00\x00k\x02\x01\x00\x00\x00v",  # key kind 0
        b"\x10\x01\x00\x00\x00k\x02\x01\x00\x00\x00v",  # key kind 16
        b"\x02\x00\x00\x00\x00\x02\x01\x00\x00\x00v",  # empty key
        b"\x02\x01\x00\x00\x00k",  # key without a value
        b"\x02\x01\x00\x00\x00k\x06\x02\x00\x00\x00vv",  # Int32 value of 2 bytes
        b"\x02\x00\x01\x00\x00" + b"k" * 256 + b"\x02\x01\x00\x00\x00v",  # 256-byte key
    ],
)
def test_malformed_user_headers_are_refused(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_user_headers(raw)


def test_options_refuse_non_string_keys_and_duplicates() -> None:
    duplicate = _encode(encode_options, [OptionEntry("a", HeaderKind.STRING, b"1")]) * 2
    with pytest.raises(ProtocolError):
        decode_options(duplicate)
    raw_key = b"\x01\x01\x00\x00\x00a\x02\x01\x00\x00\x001"
    with pytest.raises(ProtocolError):
        decode_options(raw_key)
    with pytest.raises(ValueError):
        _encode(encode_options, [OptionEntry("a", HeaderKind.STRING, b"1")] * 2)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("text", HeaderKind.STRING),
        (b"raw", HeaderKind.RAW),
        (True, HeaderKind.BOOL),
        (0, HeaderKind.UINT8),
        (300, HeaderKind.UINT16),
        (70_000, HeaderKind.UINT32),
        (5 * 10**9, HeaderKind.UINT64),
        (2**70, HeaderKind.UINT128),
        (-1, HeaderKind.INT8),
        (-300, HeaderKind.INT16),
        (-(2**40), HeaderKind.INT64),
        (1.5, HeaderKind.FLOAT32),
        (0.1, HeaderKind.FLOAT64),
    ],
)
def test_typed_header_value_gets_the_kind_the_official_sdk_picks(
    value: str | bytes | bool | int | float, kind: HeaderKind
) -> None:
    # docs/protocol.md section 3, captured step send_messages_header_kinds.
    header = UserHeader.of("k", value)
    assert header.value_kind is kind
    assert header.key_kind is HeaderKind.STRING
    assert decode_header_value(kind, header.value) == value
    assert encode_header_value(kind, value) == header.value


def test_header_value_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_header_value(HeaderKind.UINT32, "not a number")
    with pytest.raises(ProtocolError):
        decode_header_value(HeaderKind.BOOL, b"\x02")
    with pytest.raises(ProtocolError):
        decode_header_value(HeaderKind.STRING, b"\xff")


def test_encoders_refuse_unrepresentable_values() -> None:
    with pytest.raises(ValueError):
        _encode(encode_name, "")
    with pytest.raises(ValueError):
        _encode(encode_name, "x" * 256)
    with pytest.raises(ValueError):
        _encode(encode_identifier, Identifier(2**32))
    with pytest.raises(ValueError):
        _encode(encode_partitioning, MessagesKey(b""))
    assert PollingStrategy.first().kind is PollingKind.FIRST


def test_messages_key_partition_is_xxh32_of_the_key_modulo_the_count() -> None:
    # Known answers of XxHash32 with seed 0: "" -> 0x02CC5D05, "a" -> 0x550D7456.
    from sdk.wire import MessagesKey

    assert MessagesKey(b"").partition(7) == 0x02CC5D05 % 7
    assert MessagesKey(b"a").partition(1000) == 0x550D7456 % 1000
    assert MessagesKey(b"a").partition(1) == 0
