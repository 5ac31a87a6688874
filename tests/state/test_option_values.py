"""Topic options given as text, read as Iggy's server reads them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import EXPIRY_NEVER, SIZE_UNLIMITED, Durability
from broker.state.option_values import U64_MAX, parse_duration_us, parse_size_bytes
from broker.state.options import topic_options
from sdk import wire

DAY_US = 86_400_000_000


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("7 days", 7 * DAY_US),
        ("1h 30m", 5_400_000_000),
        ("15days 2min 2s", 15 * DAY_US + 122_000_000),
        ("500ms", 500_000),
        ("250us", 250),
        ("1500ns", 1),
        ("1w", 7 * DAY_US),
        ("1M", 2_630_016_000_000),
        ("2 years", 2 * 31_557_600_000_000),
    ],
)
def test_durations_read_as_humantime(text: str, micros: int) -> None:
    assert parse_duration_us(text) == micros


@pytest.mark.parametrize("text", ["", "7", "days", "7 fortnights", "1.5h", "-1s", "1 d ays"])
def test_malformed_durations_are_refused(text: str) -> None:
    assert parse_duration_us(text) is None


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1 GiB", 1 << 30),
        ("128MiB", 128 << 20),
        ("1.5 GB", 1_500_000_000),
        ("4096", 4096),
        ("1 gib", 1 << 30),
        ("10 kB", 10_000),
        ("2 B", 2),
    ],
)
def test_sizes_read_with_decimal_and_binary_units(text: str, size: int) -> None:
    assert parse_size_bytes(text) == size


@pytest.mark.parametrize("text", ["", "GiB", "1 XB", "1e3", "-1 MiB", "99999999 EiB"])
def test_malformed_or_too_large_sizes_are_refused(text: str) -> None:
    assert parse_size_bytes(text) is None


@given(st.integers(0, U64_MAX))
def test_a_plain_byte_count_reads_as_itself(size: int) -> None:
    assert parse_size_bytes(str(size)) == size


def _text(key: str, value: str) -> wire.OptionEntry:
    return wire.OptionEntry(key, wire.HeaderKind.STRING, value.encode())


def test_topic_options_take_text_as_iggys_clients_send_it() -> None:
    patch = topic_options(
        (
            _text("message_expiry", "7 days"),
            _text("max_topic_size", "10 GiB"),
            _text("segment_size", "128 MiB"),
            _text("messages_required_to_save", "5000"),
            _text("size_of_messages_required_to_save", "2 MiB"),
            _text("preallocate_segments", "true"),
        )
    )
    assert patch.message_expiry_us == 7 * DAY_US
    assert patch.max_topic_size_bytes == 10 << 30
    assert patch.segment_size_bytes == 128 << 20
    assert patch.messages_required_to_save == 5000
    assert patch.size_of_messages_required_to_save_bytes == 2 << 20
    assert patch.preallocate_segments is True


def test_the_words_for_never_unlimited_and_the_server_default() -> None:
    never = topic_options((_text("message_expiry", "never_expire"),))
    assert never.message_expiry_us == EXPIRY_NEVER
    unlimited = topic_options((_text("max_topic_size", "unlimited"),))
    assert unlimited.max_topic_size_bytes == SIZE_UNLIMITED
    defaults = topic_options(
        (
            _text("message_expiry", "server_default"),
            _text("max_topic_size", "0"),
            _text("segment_size", "none"),
        )
    )
    assert defaults.message_expiry_us is None  # 0 is the server default: not given
    assert defaults.max_topic_size_bytes is None and defaults.segment_size_bytes is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("message_expiry", "soon"),
        ("message_expiry", "200000 weeks"),  # over u32::MAX seconds
        ("segment_size", "big"),
        ("messages_required_to_save", "5k"),
        ("messages_required_to_save", "4294967296"),
        ("preallocate_segments", "yes"),
        ("preallocate_segments", "True"),
    ],
)
def test_text_that_does_not_read_is_an_invalid_option_value(key: str, value: str) -> None:
    with pytest.raises(StateError) as refused:
        topic_options((_text(key, value),))
    assert refused.value.code is ErrorCode.INVALID_OPTION_VALUE


def test_iggys_enforce_fsync_asks_for_persisted_durability() -> None:
    on = topic_options((_text("enforce_fsync", "true"),))
    assert on.durability is Durability.PERSISTED
    # The official SDK sends durability on every create: enforce_fsync true still wins,
    # since persisted is the stronger promise.
    both = topic_options((_text("durability", "replicated"), _text("enforce_fsync", "true")))
    assert both.durability is Durability.PERSISTED
    off = topic_options((wire.OptionEntry("enforce_fsync", wire.HeaderKind.BOOL, b"\x00"),))
    assert off.durability is None  # durability decides (the default: replicated)
    kept = topic_options((_text("enforce_fsync", "false"), _text("durability", "persisted")))
    assert kept.durability is Durability.PERSISTED
    with pytest.raises(StateError):
        topic_options((_text("enforce_fsync", "yes"),))
