"""Metric math against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from bench.load.metrics import (
    BatchRecords,
    actor_metrics,
    bucket_sums,
    distribution,
    group_metrics,
    latency_summary,
    moving_average,
    percentile,
)


def test_percentile_interpolates_linearly_between_closest_ranks() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 90) == pytest.approx(3.7)  # rank 2.7: 3 + 0.7 * (4 - 3)
    assert percentile(values, 100) == 4.0


def test_percentile_of_one_value_is_that_value_and_of_none_is_zero() -> None:
    assert percentile([7.0], 99.99) == 7.0
    assert percentile([], 50) == 0.0


def test_latency_summary_of_1_to_100_ms() -> None:
    summary = latency_summary([i / 1000 for i in range(1, 101)])
    assert summary.p50 == pytest.approx(50.5)
    assert summary.p90 == pytest.approx(90.1)
    assert summary.p99 == pytest.approx(99.01)
    assert summary.p999 == pytest.approx(99.901)
    assert summary.p9999 == pytest.approx(99.9901)
    assert summary.avg == pytest.approx(50.5)
    assert summary.median == summary.p50
    assert (summary.min, summary.max) == pytest.approx((1.0, 100.0))
    assert summary.std_dev == pytest.approx(math.sqrt((100**2 - 1) / 12))  # population


def test_latency_summary_does_not_depend_on_input_order() -> None:
    ordered = latency_summary([0.001, 0.002, 0.010])
    shuffled = latency_summary([0.010, 0.001, 0.002])
    assert ordered == shuffled


def test_bucket_sums_put_each_value_in_the_bucket_of_its_time() -> None:
    sums = bucket_sums([0.0, 0.004, 0.011, 0.029, 0.031], [1, 2, 3, 4, 5], 0.01, 0.03)
    assert sums == [3.0, 3.0, 9.0]  # the value at 0.031 (past the end) joins the last


def test_moving_average_is_trailing_and_averages_the_start_over_what_exists() -> None:
    assert moving_average([2, 4, 6, 8], 2) == [2.0, 3.0, 5.0, 7.0]
    assert moving_average([5, 5, 5], 1) == [5.0, 5.0, 5.0]


def _steady_records(
    batches: int, period_s: float, user_bytes: int, start_s: float = 0.0
) -> BatchRecords:
    records = BatchRecords(start_s=start_s)
    for i in range(batches):
        records.add(start_s + (i + 1) * period_s, 0.002, 100, user_bytes, user_bytes + 4800)
    return records


def test_actor_throughput_is_user_bytes_over_measured_time() -> None:
    # 10 batches of 1 MB, one every 0.1 s: 10 MB in 1 s.
    metrics = actor_metrics(
        "producer-1", "producers", _steady_records(10, 0.1, 1_000_000), sampling_s=0.1, window=1
    )
    assert metrics.total_time_s == pytest.approx(1.0)
    assert metrics.throughput_megabytes_per_second == pytest.approx(10.0)
    assert metrics.throughput_messages_per_second == pytest.approx(1000.0)
    assert metrics.total_bytes == 10 * 1_004_800
    assert metrics.latency_ms.p50 == pytest.approx(2.0)
    # One batch per 0.1 s bucket: every bucket is 10 MB/s and the mean equals the total.
    assert metrics.throughput_mb_ts.value == pytest.approx([10.0] * 10)
    assert metrics.latency_ts.value == pytest.approx([2.0] * 10)


def test_actor_without_batches_is_all_zero() -> None:
    metrics = actor_metrics("consumer-1", "consumers", BatchRecords(), sampling_s=0.01, window=20)
    assert metrics.total_message_batches == 0
    assert metrics.throughput_megabytes_per_second == 0.0
    assert metrics.latency_ms.max == 0.0


def test_group_totals_sum_actors_and_averages_are_means_of_actors() -> None:
    fast = _steady_records(10, 0.1, 2_000_000)
    slow = _steady_records(10, 0.1, 1_000_000)
    slow.latency_s[:] = type(slow.latency_s)("d", [0.004] * 10)
    actors = [
        actor_metrics(name, "producers", r, sampling_s=0.1, window=1)
        for name, r in (("producer-1", fast), ("producer-2", slow))
    ]
    group = group_metrics("producers", actors, [fast, slow], sampling_s=0.1)
    assert group.total_throughput_megabytes_per_second == pytest.approx(30.0)
    assert group.average_throughput_megabytes_per_second == pytest.approx(15.0)
    assert group.average_latency_ms.p50 == pytest.approx(3.0)  # mean of 2 ms and 4 ms
    assert group.pooled_latency_ms.p50 == pytest.approx(3.0)  # 2,2,...,4,4: halfway
    assert group.pooled_latency_ms.max == pytest.approx(4.0)
    assert group.total_messages == 2000
    assert group.throughput_mb_ts.value == pytest.approx([30.0] * 10)


def test_distribution_counts_every_sample_and_fits_the_log_of_the_latencies() -> None:
    latencies = [0.001] * 50 + [0.002] * 30 + [0.004] * 20
    d = distribution(latencies, bins=10)
    assert sum(d.counts) == 100
    assert len(d.bin_edges_ms) == 11
    expected_mu = (50 * math.log(1) + 30 * math.log(2) + 20 * math.log(4)) / 100
    assert d.lognormal_mu == pytest.approx(expected_mu)
    assert d.p50 == pytest.approx(1.5)
    assert d.p05 == pytest.approx(1.0)
