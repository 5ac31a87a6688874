"""Metric math of the bench: pure functions over per-batch records, no IO and no clocks.

Purpose: turn what the actors recorded (one record per batch: when it ended, how long it
took, how many messages and bytes) into iggy-bench's metrics, per actor and per group.

Definitions (``docs/performance.md`` repeats them for readers):

1. **Latency of a batch**: producers, the wall time of one send call; consumers of
   consumer-only kinds, the wall time of one poll call; consumers of producer+consumer
   kinds and producing consumers, ``now - origin_timestamp`` of the first message the
   poll returned (end to end). Kept in seconds here, reported in milliseconds.
2. **Percentiles** ``p50 .. p9999``: linear interpolation between the closest ranks of
   the sorted raw latencies (rank ``p/100 * (n - 1)``), as iggy-bench and numpy's
   default do, computed by ``statistics.quantiles`` (inclusive method). ``avg`` and
   ``median`` are over the raw latencies too.
3. **min, max, std_dev**: over the raw latencies (population standard deviation).
   iggy-bench takes these three over its latency time series instead; raw values show
   the true extremes, which matter more when a run has few batches.
4. **Throughput** of an actor: its user-data bytes (payloads only, MB = 10^6 bytes) and
   messages over its measured time (first record's start to last record's end). This is
   the mean of the per-bucket series without its edge effects.
5. **Time series**: records are bucketed by their end time into ``sampling_s`` buckets;
   throughput buckets are smoothed with a trailing simple moving average of
   ``window`` buckets (iggy-bench's ``-W``); the latency series is the mean latency of
   the batches that ended in each bucket (empty buckets are left out).
6. **Group** (all producers, all consumers, ...): total throughput = sum of the actors'
   throughputs; average throughput and ``average_pXX`` = mean over the actors (iggy's
   definition); ``pooled`` percentiles over every batch of the group are given too.

Invariants: every input sequence may be empty (the summary is then all zeros); no
function mutates its arguments.
"""

from __future__ import annotations

import math
import statistics
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

__all__ = [
    "PERCENTILES",
    "ActorMetrics",
    "BatchRecords",
    "Distribution",
    "GroupMetrics",
    "LatencySummary",
    "TimeSeries",
    "actor_metrics",
    "bucket_sums",
    "distribution",
    "group_metrics",
    "latency_summary",
    "moving_average",
    "percentile",
    "percentiles",
]

MB: Final = 1_000_000
PERCENTILES: Final = (50.0, 90.0, 95.0, 99.0, 99.9, 99.99)
DISTRIBUTION_BINS: Final = 40


@dataclass(slots=True)
class BatchRecords:
    """One actor's raw records, one entry per batch, in the order they completed.

    Attributes:
        start_s: When the actor began its measured phase, in seconds since the run's
            measured start (the same origin as ``end_s``).
        end_s: When each batch completed.
        latency_s: Each batch's latency (see the module docstring).
        messages: Messages in each batch.
        user_bytes: Payload bytes in each batch.
        total_bytes: Bytes each batch took on the wire format (payloads, message headers
            and user headers).
    """

    start_s: float = 0.0
    end_s: array[float] = field(default_factory=lambda: array("d"))
    latency_s: array[float] = field(default_factory=lambda: array("d"))
    messages: array[int] = field(default_factory=lambda: array("q"))
    user_bytes: array[int] = field(default_factory=lambda: array("q"))
    total_bytes: array[int] = field(default_factory=lambda: array("q"))

    def add(
        self, end_s: float, latency_s: float, messages: int, user_bytes: int, total_bytes: int
    ) -> None:
        """Record one batch."""
        self.end_s.append(end_s)
        self.latency_s.append(latency_s)
        self.messages.append(messages)
        self.user_bytes.append(user_bytes)
        self.total_bytes.append(total_bytes)

    def __len__(self) -> int:
        return len(self.end_s)


PERCENTILE_STEPS: Final = 10_000
"""Percentiles are read from ``statistics.quantiles`` cut into this many parts, so any
percentile with up to two decimals (p99.99) is one of its cut points."""


def percentiles(values: Sequence[float], percents: Sequence[float]) -> list[float]:
    """The ``percents`` (0..100, at most two decimals) of ``values``, by linear
    interpolation between the closest ranks (rank ``p/100 * (n - 1)``:
    ``statistics.quantiles``' inclusive method, numpy's default); 0.0 for no values."""
    n = len(values)
    if n == 0:
        return [0.0] * len(percents)
    if n == 1:
        return [float(values[0])] * len(percents)
    cuts = statistics.quantiles(values, n=PERCENTILE_STEPS, method="inclusive")
    out: list[float] = []
    for p in percents:
        step = round(p * PERCENTILE_STEPS / 100)
        assert 0 <= step <= PERCENTILE_STEPS and math.isclose(step, p * 100, abs_tol=1e-6), p
        if step == 0:
            out.append(float(min(values)))
        elif step == PERCENTILE_STEPS:
            out.append(float(max(values)))
        else:
            out.append(cuts[step - 1])
    return out


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) of ``values`` (see :func:`percentiles`)."""
    return percentiles(values, [p])[0]


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Latency statistics in milliseconds."""

    p50: float = 0.0
    p90: float = 0.0
    p95: float = 0.0
    p99: float = 0.0
    p999: float = 0.0
    p9999: float = 0.0
    avg: float = 0.0
    median: float = 0.0
    min: float = 0.0
    max: float = 0.0
    std_dev: float = 0.0

    def to_json(self) -> dict[str, float]:
        return asdict(self)


def latency_summary(latencies_s: Iterable[float]) -> LatencySummary:
    """The summary of raw latencies given in seconds (reported in ms)."""
    values = [v * 1000.0 for v in latencies_s]
    if not values:
        return LatencySummary()
    p50, p90, p95, p99, p999, p9999 = percentiles(values, PERCENTILES)
    return LatencySummary(
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
        p999=p999,
        p9999=p9999,
        avg=statistics.fmean(values),
        median=p50,
        min=min(values),
        max=max(values),
        std_dev=statistics.pstdev(values),
    )


def bucket_sums(
    times_s: Sequence[float], values: Sequence[float], bucket_s: float, duration_s: float
) -> list[float]:
    """Sum ``values`` into buckets of ``bucket_s`` by their (end) time: bucket ``k`` holds
    times in ``(k * bucket_s, (k + 1) * bucket_s]``, so a batch that ended exactly on a
    boundary counts in the bucket it was transferred in; time 0 goes to the first bucket
    and a time past ``duration_s`` to the last."""
    assert bucket_s > 0
    count = max(1, math.ceil(duration_s / bucket_s - 1e-9))
    sums = [0.0] * count
    for t, v in zip(times_s, values, strict=True):
        index = min(count - 1, max(0, math.ceil(t / bucket_s - 1e-9) - 1))
        sums[index] += v
    return sums


def moving_average(series: Sequence[float], window: int) -> list[float]:
    """Trailing simple moving average; the first ``window - 1`` points average what
    there is so far."""
    assert window >= 1
    out: list[float] = []
    total = 0.0
    for i, value in enumerate(series):
        total += value
        if i >= window:
            total -= series[i - window]
        out.append(total / min(i + 1, window))
    return out


@dataclass(frozen=True, slots=True)
class TimeSeries:
    """Points ``(time_s, value)``; time is the end of each bucket since the measured
    start."""

    time_s: list[float] = field(default_factory=list)
    value: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, list[float]]:
        return {
            "time_s": [round(t, 6) for t in self.time_s],
            "value": [round(v, 6) for v in self.value],
        }

    @classmethod
    def from_json(cls, data: dict[str, list[float]]) -> TimeSeries:
        return cls(list(data["time_s"]), list(data["value"]))


@dataclass(frozen=True, slots=True)
class ActorMetrics:
    """iggy-bench's ``BenchmarkIndividualMetricsSummary`` for one actor."""

    actor: str
    role: str
    total_time_s: float
    total_user_data_bytes: int
    total_bytes: int
    total_messages: int
    total_message_batches: int
    throughput_megabytes_per_second: float
    throughput_messages_per_second: float
    latency_ms: LatencySummary
    throughput_mb_ts: TimeSeries
    throughput_msg_ts: TimeSeries
    latency_ts: TimeSeries

    def to_json(self) -> dict[str, Any]:
        return {
            "actor": self.actor,
            "role": self.role,
            "total_time_s": self.total_time_s,
            "total_user_data_bytes": self.total_user_data_bytes,
            "total_bytes": self.total_bytes,
            "total_messages": self.total_messages,
            "total_message_batches": self.total_message_batches,
            "throughput_megabytes_per_second": self.throughput_megabytes_per_second,
            "throughput_messages_per_second": self.throughput_messages_per_second,
            "latency_ms": self.latency_ms.to_json(),
            "throughput_mb_ts": self.throughput_mb_ts.to_json(),
            "throughput_msg_ts": self.throughput_msg_ts.to_json(),
            "latency_ts": self.latency_ts.to_json(),
        }


def actor_metrics(
    actor: str, role: str, records: BatchRecords, *, sampling_s: float, window: int
) -> ActorMetrics:
    """The per-actor summary and time series of ``records``."""
    n = len(records)
    if n == 0:
        return ActorMetrics(
            actor, role, 0.0, 0, 0, 0, 0, 0.0, 0.0, LatencySummary(), *([TimeSeries()] * 3)
        )
    total_time_s = max(records.end_s) - records.start_s
    user_bytes = sum(records.user_bytes)
    messages = sum(records.messages)
    seconds = max(total_time_s, 1e-9)
    relative = [t - records.start_s for t in records.end_s]
    buckets = bucket_sums(relative, records.user_bytes, sampling_s, total_time_s)
    message_buckets = bucket_sums(relative, records.messages, sampling_s, total_time_s)
    ends = [records.start_s + (i + 1) * sampling_s for i in range(len(buckets))]
    mb_ts = TimeSeries(ends, moving_average([b / sampling_s / MB for b in buckets], window))
    msg_ts = TimeSeries(ends, moving_average([b / sampling_s for b in message_buckets], window))
    latency_sums = bucket_sums(relative, records.latency_s, sampling_s, total_time_s)
    latency_counts = bucket_sums(relative, [1.0] * n, sampling_s, total_time_s)
    latency_ts = TimeSeries(
        [t for t, c in zip(ends, latency_counts, strict=True) if c],
        [s / c * 1000.0 for s, c in zip(latency_sums, latency_counts, strict=True) if c],
    )
    return ActorMetrics(
        actor=actor,
        role=role,
        total_time_s=total_time_s,
        total_user_data_bytes=user_bytes,
        total_bytes=sum(records.total_bytes),
        total_messages=messages,
        total_message_batches=n,
        throughput_megabytes_per_second=user_bytes / seconds / MB,
        throughput_messages_per_second=messages / seconds,
        latency_ms=latency_summary(records.latency_s),
        throughput_mb_ts=mb_ts,
        throughput_msg_ts=msg_ts,
        latency_ts=latency_ts,
    )


@dataclass(frozen=True, slots=True)
class Distribution:
    """The latency distribution of a group: a histogram and a log-normal fit.

    Attributes:
        bin_edges_ms: ``bins + 1`` edges, from the smallest latency to the p99.9 one
            (the few above are counted in the last bin).
        counts: Batches per bin.
        lognormal_mu: Mean of ``ln(latency_ms)``.
        lognormal_sigma: Standard deviation of ``ln(latency_ms)``.
        p05, p50, p95, p99: Percentiles of the raw latencies (ms).
    """

    bin_edges_ms: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    lognormal_mu: float = 0.0
    lognormal_sigma: float = 0.0
    p05: float = 0.0
    p50: float = 0.0
    p95: float = 0.0
    p99: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Distribution:
        return cls(**data)


def distribution(latencies_s: Iterable[float], bins: int = DISTRIBUTION_BINS) -> Distribution:
    """Histogram and log-normal fit of raw latencies (seconds in, ms out)."""
    values = [v * 1000.0 for v in latencies_s]
    if not values:
        return Distribution()
    p05, p50, p95, p99, p999 = percentiles(values, (5.0, 50.0, 95.0, 99.0, 99.9))
    low = min(values)
    high = max(p999, low)
    width = (high - low) / bins if high > low else 1.0
    edges = [low + i * width for i in range(bins + 1)]
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - low) / width))] += 1
    logs = [math.log(v) for v in values if v > 0]
    return Distribution(
        bin_edges_ms=edges,
        counts=counts,
        lognormal_mu=statistics.fmean(logs) if logs else 0.0,
        lognormal_sigma=statistics.pstdev(logs) if logs else 0.0,
        p05=p05,
        p50=p50,
        p95=p95,
        p99=p99,
    )


@dataclass(frozen=True, slots=True)
class GroupMetrics:
    """iggy-bench's ``BenchmarkGroupMetricsSummary``: one kind of actor together."""

    group: str
    actors: int
    total_throughput_megabytes_per_second: float
    total_throughput_messages_per_second: float
    average_throughput_megabytes_per_second: float
    average_throughput_messages_per_second: float
    average_latency_ms: LatencySummary
    pooled_latency_ms: LatencySummary
    total_messages: int
    total_user_data_bytes: int
    total_time_s: float
    distribution: Distribution
    throughput_mb_ts: TimeSeries
    throughput_msg_ts: TimeSeries
    latency_ts: TimeSeries

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "actors": self.actors,
            "total_throughput_megabytes_per_second": self.total_throughput_megabytes_per_second,
            "total_throughput_messages_per_second": self.total_throughput_messages_per_second,
            "average_throughput_megabytes_per_second": (
                self.average_throughput_megabytes_per_second
            ),
            "average_throughput_messages_per_second": self.average_throughput_messages_per_second,
            "average_latency_ms": self.average_latency_ms.to_json(),
            "pooled_latency_ms": self.pooled_latency_ms.to_json(),
            "total_messages": self.total_messages,
            "total_user_data_bytes": self.total_user_data_bytes,
            "total_time_s": self.total_time_s,
            "distribution": self.distribution.to_json(),
            "throughput_mb_ts": self.throughput_mb_ts.to_json(),
            "throughput_msg_ts": self.throughput_msg_ts.to_json(),
            "latency_ts": self.latency_ts.to_json(),
        }


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _sum_series(series: Sequence[TimeSeries], step_s: float) -> TimeSeries:
    """Point-wise sum of series sampled on the same grid (aligned by bucket index)."""
    by_index: dict[int, float] = {}
    for s in series:
        for t, v in zip(s.time_s, s.value, strict=True):
            key = round(t / step_s)
            by_index[key] = by_index.get(key, 0.0) + v
    keys = sorted(by_index)
    return TimeSeries([k * step_s for k in keys], [by_index[k] for k in keys])


def _mean_series(series: Sequence[TimeSeries], step_s: float) -> TimeSeries:
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for s in series:
        for t, v in zip(s.time_s, s.value, strict=True):
            key = round(t / step_s)
            sums[key] = sums.get(key, 0.0) + v
            counts[key] = counts.get(key, 0) + 1
    keys = sorted(sums)
    return TimeSeries([k * step_s for k in keys], [sums[k] / counts[k] for k in keys])


def group_metrics(
    group: str,
    actors: Sequence[ActorMetrics],
    records: Sequence[BatchRecords],
    *,
    sampling_s: float,
) -> GroupMetrics:
    """The group summary of ``actors`` (with their raw ``records``, in the same order)."""
    assert len(actors) == len(records)
    active = [a for a in actors if a.total_message_batches]
    pooled: list[float] = [v for r in records for v in r.latency_s]
    averaged = LatencySummary(
        **{
            name: _mean([getattr(a.latency_ms, name) for a in active])
            for name in LatencySummary.__dataclass_fields__
        }
    )
    start = min((r.start_s for r in records if len(r)), default=0.0)
    end = max((max(r.end_s) for r in records if len(r)), default=0.0)
    return GroupMetrics(
        group=group,
        actors=len(actors),
        total_throughput_megabytes_per_second=math.fsum(
            a.throughput_megabytes_per_second for a in actors
        ),
        total_throughput_messages_per_second=math.fsum(
            a.throughput_messages_per_second for a in actors
        ),
        average_throughput_megabytes_per_second=_mean(
            [a.throughput_megabytes_per_second for a in active]
        ),
        average_throughput_messages_per_second=_mean(
            [a.throughput_messages_per_second for a in active]
        ),
        average_latency_ms=averaged,
        pooled_latency_ms=latency_summary(pooled),
        total_messages=sum(a.total_messages for a in actors),
        total_user_data_bytes=sum(a.total_user_data_bytes for a in actors),
        total_time_s=max(0.0, end - start),
        distribution=distribution(pooled),
        throughput_mb_ts=_sum_series([a.throughput_mb_ts for a in actors], sampling_s),
        throughput_msg_ts=_sum_series([a.throughput_msg_ts for a in actors], sampling_s),
        latency_ts=_mean_series([a.latency_ts for a in actors], sampling_s),
    )
