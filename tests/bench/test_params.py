"""Option values: sizes, durations, ranges, and the combinations a kind accepts."""

from __future__ import annotations

import pytest

from bench.load.params import (
    BenchParams,
    Embedded,
    Kind,
    ParamsError,
    Range,
    format_size,
    parse_duration_s,
    parse_range,
    parse_size_bytes,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1000", 1000), ("64KB", 64_000), ("1MiB", 2**20), ("2.5GB", 2_500_000_000), ("10 mb", 10**7)],
)
def test_sizes_use_decimal_and_binary_units(text: str, expected: int) -> None:
    assert parse_size_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0s", 0.0), ("10ms", 0.01), ("5s", 5.0), ("1m", 60.0), ("500us", 0.0005), ("2", 2.0)],
)
def test_durations(text: str, expected: float) -> None:
    assert parse_duration_s(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "ten", "5 parsecs", "-1s"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ParamsError):
        parse_duration_s(text)


def test_ranges_and_single_values() -> None:
    assert parse_range("200..500") == Range(200, 500)
    assert parse_range("250") == Range(250, 250)
    assert parse_range("1KB..4KB", sizes=True) == Range(1000, 4000)
    with pytest.raises(ParamsError):
        parse_range("500..200")
    with pytest.raises(ParamsError):
        parse_range("0")


def test_aliases_are_iggy_benchs() -> None:
    assert {k.alias for k in Kind} == {"pp", "pc", "ppc", "bp", "bcg", "bpcg", "e2e", "e2ecg"}


def test_pinned_kinds_default_to_one_stream_per_actor_and_balanced_to_24_partitions() -> None:
    pp = BenchParams(Kind.PINNED_PRODUCER, producers=3).resolved()
    assert (pp.stream_count, pp.partition_count) == (3, 1)
    bp = BenchParams(Kind.BALANCED_PRODUCER, producers=3).resolved()
    assert (bp.stream_count, bp.partition_count) == (1, 24)


def test_message_batches_default_and_total_data_split_over_writers() -> None:
    assert BenchParams(Kind.PINNED_PRODUCER).resolved().batches_per_actor() == 1000
    params = BenchParams(
        Kind.PINNED_PRODUCER,
        producers=4,
        total_data_bytes=4_000_000,
        message_size=Range(1000, 1000),
        messages_per_batch=Range(100, 100),
    ).resolved()
    assert params.batches_per_actor() == 10  # 1 MB each, 100 KB per batch


def test_batches_and_total_data_are_mutually_exclusive() -> None:
    with pytest.raises(ParamsError, match="mutually exclusive"):
        BenchParams(Kind.PINNED_PRODUCER, message_batches=5, total_data_bytes=10).resolved()


def test_pinned_kinds_refuse_fewer_streams_than_actors() -> None:
    with pytest.raises(ParamsError, match="--streams"):
        BenchParams(Kind.PINNED_PRODUCER, producers=4, streams=2).resolved()


def test_e2ecg_needs_a_partition_per_member() -> None:
    with pytest.raises(ParamsError, match="e2ecg"):
        BenchParams(Kind.END_TO_END_PRODUCING_CONSUMER_GROUP, producers=4, partitions=1).resolved()


def test_reuse_streams_is_refused_where_actors_read_back_from_offset_zero() -> None:
    with pytest.raises(ParamsError, match="reuse"):
        BenchParams(Kind.END_TO_END_PRODUCING_CONSUMER, reuse_streams=True).resolved()
    with pytest.raises(ParamsError, match="reuse"):
        BenchParams(Kind.PINNED_PRODUCER, reuse_streams=True, embedded=Embedded.SINGLE).resolved()


def test_params_round_trip_through_json() -> None:
    params = BenchParams(
        Kind.BALANCED_PRODUCER_AND_CONSUMER_GROUP,
        message_size=Range(200, 500),
        rate_limit_bytes_per_s=10**6,
        consumer_groups=2,
        streams=2,
    ).resolved()
    assert BenchParams.from_json(params.to_json()) == params


@pytest.mark.parametrize("text", ["", "ten", "5 parsecs", "-1KB", "1..2"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ParamsError):
        parse_size_bytes(text)


def test_sizes_print_in_decimal_units() -> None:
    assert format_size(1_500_000) == "1.5MB"
    assert format_size(parse_size_bytes("26GB")) == "26.0GB"
