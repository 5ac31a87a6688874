"""The actor loops: producer, consumer and producing consumer.

Purpose: each loop drives one :class:`~bench.load.drivers.LoadClient` and records one
:class:`~bench.load.metrics.BatchRecords` entry per batch. The loops await only their
client and the ``sleep`` they are given, so the same code runs on trio (our SDK) and on
asyncio (the official SDK).

Theory of operation:

* Every actor starts at the run's origin and runs ``warmup_s`` unrecorded; a batch is
  recorded when it *started* at or after the measured start (``RunClock``).
* A producer sends ``batches`` recorded batches, lock-step (one in flight), paced by its
  share of ``--rate-limit``.
* A consumer of a consumer-only kind polls until it recorded ``batches`` non-empty polls
  (pinned: by offset from 0, wrapping to 0 at the end of the preloaded data; group
  member: ``next`` with auto-commit, until its group read all preloaded messages).
  A consumer of a producer+consumer kind follows the producers of its stream and stops
  when they are done and it has read everything they wrote.
* A producing consumer sends one batch, then polls until it has read it back (pinned:
  by offset; group member: until it received as many messages as it sent, or its group
  has read everything its writers wrote), then sends the next.

Invariants: an empty poll is never recorded; counters in :class:`Shared` are only
touched from the one event loop that runs the actors (no locks needed); every wait for
data is bounded by the runner's stall watchdog (``Shared.stalled``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bench.load.drivers import BatchPool, LoadClient, Polled, Sleep
from bench.load.metrics import BatchRecords
from bench.load.plan import ActorSpec, Role

__all__ = [
    "GroupState",
    "Progress",
    "RunClock",
    "Shared",
    "StreamState",
    "consume",
    "produce",
    "produce_and_consume",
]


@dataclass(frozen=True, slots=True)
class RunClock:
    """The run's time origin (``time.perf_counter`` seconds) and warmup."""

    origin: float
    warmup_s: float

    @property
    def measured_start(self) -> float:
        return self.origin + self.warmup_s

    def relative(self, t: float) -> float:
        """``t`` in seconds since the measured start."""
        return t - self.measured_start


@dataclass(slots=True)
class Progress:
    """Live counters of one role (read by the progress display's thread)."""

    batches: int = 0
    messages: int = 0
    user_bytes: int = 0
    actors_done: int = 0


@dataclass(slots=True)
class StreamState:
    """Messages acknowledged on a stream (warmup included) and its writers still going."""

    produced: int = 0
    writers_left: int = 0


@dataclass(slots=True)
class GroupState:
    """A consumer group: messages its members read, and for consumer-only kinds how
    many there are to read; for ``e2ecg`` what its own members wrote."""

    consumed: int = 0
    total: int | None = None
    produced: int = 0
    writers_left: int = 0
    next_offsets: dict[int, int] = field(default_factory=dict)
    """Per partition, the offset after the last message any member read."""
    duplicates: int = 0
    """Messages delivered again (auto-commit stores offsets after the poll is answered,
    so a quick next poll can return them once more); not counted in ``consumed``."""

    def take(self, polled: Polled) -> None:
        """Count what a member's poll returned: new messages and repeats."""
        seen = self.next_offsets.get(polled.partition_id, 0)
        fresh = max(0, polled.next_offset - max(seen, polled.first_offset))
        fresh = min(fresh, polled.messages)
        self.consumed += fresh
        self.duplicates += polled.messages - fresh
        self.next_offsets[polled.partition_id] = max(seen, polled.next_offset)


@dataclass(slots=True)
class Shared:
    """State the actors of one run share (one event loop, so plain fields)."""

    streams: dict[str, StreamState] = field(default_factory=dict)
    groups: dict[str, GroupState] = field(default_factory=dict)
    progress: dict[Role, Progress] = field(default_factory=dict)
    preloaded: dict[tuple[str, int], int] = field(default_factory=dict)
    """Messages preloaded per ``(stream, partition)``: where pinned consumers wrap."""
    poll_interval_s: float = 0.0005
    stalled: bool = False
    """Set by the runner's watchdog: every loop ends at its next step."""


def _wall_us() -> int:
    return time.time_ns() // 1000


class _Pacer:
    """Spaces an actor's batches so its bytes per second stay at ``rate`` (token bucket
    with no burst): batch ``k`` may start at ``start + bytes_before_k / rate``."""

    __slots__ = ("_bytes", "_rate", "_start")

    def __init__(self, rate_bytes_per_s: float | None, start: float) -> None:
        self._rate = rate_bytes_per_s
        self._start = start
        self._bytes = 0

    async def wait(self, nbytes: int, sleep: Sleep) -> None:
        if self._rate is None:
            return
        due = self._start + self._bytes / self._rate
        self._bytes += nbytes
        delay = due - time.perf_counter()
        if delay > 0:
            await sleep(delay)


def _record(
    records: BatchRecords,
    clock: RunClock,
    progress: Progress,
    started: float,
    ended: float,
    latency_s: float,
    messages: int,
    user_bytes: int,
    total_bytes: int,
) -> None:
    if started < clock.measured_start:
        return
    if not len(records):
        records.start_s = clock.relative(started)
    records.add(clock.relative(ended), latency_s, messages, user_bytes, total_bytes)
    progress.batches += 1
    progress.messages += messages
    progress.user_bytes += user_bytes


async def produce(
    spec: ActorSpec,
    client: LoadClient,
    pool: BatchPool,
    shared: Shared,
    clock: RunClock,
    sleep: Sleep,
    batches: int,
) -> BatchRecords:
    """Send ``batches`` recorded batches; latency = the send call."""
    prepared = [client.prepare(batch) for batch in pool.batches]
    stream = shared.streams[spec.stream]
    progress = shared.progress[spec.role]
    records = BatchRecords()
    pacer = None if spec.rate_bytes_per_s is None else _Pacer(spec.rate_bytes_per_s, clock.origin)
    # The loop's per-batch work outside the send is kept to the clock reads and the
    # record: it is part of the load generator's CPU per batch.
    send = client.send
    perf_counter = time.perf_counter
    target_stream, partition = spec.stream, spec.partition
    turn = 0
    try:
        while len(records) < batches and not shared.stalled:
            index = turn % len(prepared)
            turn += 1
            batch = pool.batches[index]
            if pacer is not None:
                await pacer.wait(batch.user_bytes, sleep)
            started = perf_counter()
            await send(target_stream, partition, prepared[index])
            ended = perf_counter()
            stream.produced += batch.messages
            _record(
                records,
                clock,
                progress,
                started,
                ended,
                ended - started,
                batch.messages,
                batch.user_bytes,
                batch.total_bytes,
            )
    finally:
        stream.writers_left -= 1
        progress.actors_done += 1
    return records


async def _poll(
    spec: ActorSpec, client: LoadClient, offset: int | None, count: int
) -> tuple[float, float, Polled]:
    started = time.perf_counter()
    # A group member names no partition: the broker serves the one the group assigns it.
    # Join order decides the assignment, so an e2ecg member's own partition (the one it
    # writes) may belong to another member; polling it would be refused for ever.
    polled = await client.poll(
        spec.stream,
        partition=None if spec.group is not None else spec.partition,
        group=spec.group,
        offset=offset,
        count=count,
        consumer_id=spec.index,
    )
    return started, time.perf_counter(), polled


async def consume(
    spec: ActorSpec,
    client: LoadClient,
    shared: Shared,
    clock: RunClock,
    sleep: Sleep,
    *,
    batches: int,
    count: int,
    follow_producers: bool,
) -> BatchRecords:
    """Poll ``count`` messages at a time; see the module docstring for when it stops."""
    stream = shared.streams[spec.stream]
    group = shared.groups[spec.group] if spec.group is not None else None
    progress = shared.progress[spec.role]
    records = BatchRecords()
    pacer = _Pacer(spec.rate_bytes_per_s, clock.origin)
    end = shared.preloaded.get((spec.stream, spec.partition or 0), 0)
    offset = 0
    try:
        if group is not None:
            assert spec.group is not None
            await client.join_group(spec.stream, spec.group)
        while not shared.stalled:
            if not follow_producers and len(records) >= batches:
                break
            await pacer.wait(0, sleep)
            started, ended, polled = await _poll(
                spec, client, None if group is not None else offset, count
            )
            if not polled.messages:
                if follow_producers:
                    read = group.consumed if group is not None else offset
                    if stream.writers_left == 0 and read >= stream.produced:
                        break
                elif group is not None:
                    assert group.total is not None
                    if group.consumed >= group.total:
                        break
                elif offset > 0:
                    offset = 0  # the end of the preloaded data: read it again
                    continue
                await sleep(shared.poll_interval_s)
                continue
            if group is not None:
                group.take(polled)
            else:
                offset = polled.next_offset
                if not follow_producers and end and offset >= end:
                    offset = 0
            if spec.end_to_end:
                latency = max(0.0, (_wall_us() - polled.first_origin_us) / 1e6)
            else:
                latency = ended - started
            _record(
                records,
                clock,
                progress,
                started,
                ended,
                latency,
                polled.messages,
                polled.user_bytes,
                polled.total_bytes,
            )
            if spec.rate_bytes_per_s is not None:
                await pacer.wait(polled.user_bytes, sleep)
    finally:
        progress.actors_done += 1
    return records


async def produce_and_consume(
    spec: ActorSpec,
    client: LoadClient,
    pool: BatchPool,
    shared: Shared,
    clock: RunClock,
    sleep: Sleep,
    *,
    batches: int,
    count: int,
) -> BatchRecords:
    """Send a batch, read it back, repeat; one record per non-empty poll, latency
    ``now - origin_timestamp`` of its first message."""
    prepared = [client.prepare(batch) for batch in pool.batches]
    group = shared.groups[spec.group] if spec.group is not None else None
    progress = shared.progress[spec.role]
    records = BatchRecords()
    pacer = _Pacer(spec.rate_bytes_per_s, clock.origin)
    sent = received = offset = rounds = turn = 0
    try:
        if group is not None:
            assert spec.group is not None
            await client.join_group(spec.stream, spec.group)
        while rounds < batches and not shared.stalled:
            index = turn % len(prepared)
            turn += 1
            batch = pool.batches[index]
            await pacer.wait(batch.user_bytes, sleep)
            round_started = time.perf_counter()
            await client.send(spec.stream, spec.partition, prepared[index])
            sent += batch.messages
            if group is not None:
                group.produced += batch.messages
            while not shared.stalled:
                if group is None:
                    if offset >= sent:
                        break
                elif received >= sent or group.consumed >= group.produced:
                    break
                polled = await _read_once(
                    spec, client, shared, clock, sleep, records, progress, offset, count
                )
                received += polled.messages
                if polled.messages and group is None:
                    offset = polled.next_offset
            if round_started >= clock.measured_start:
                rounds += 1
        if group is not None:
            group.writers_left -= 1
            while not shared.stalled and (
                group.writers_left > 0 or group.consumed < group.produced
            ):
                await _read_once(spec, client, shared, clock, sleep, records, progress, 0, count)
    finally:
        progress.actors_done += 1
    return records


async def _read_once(
    spec: ActorSpec,
    client: LoadClient,
    shared: Shared,
    clock: RunClock,
    sleep: Sleep,
    records: BatchRecords,
    progress: Progress,
    offset: int,
    count: int,
) -> Polled:
    """One poll of a producing consumer."""
    group = shared.groups[spec.group] if spec.group is not None else None
    started, ended, polled = await _poll(spec, client, None if group else offset, count)
    if not polled.messages:
        await sleep(shared.poll_interval_s)
        return polled
    if group is not None:
        group.take(polled)
    latency = max(0.0, (_wall_us() - polled.first_origin_us) / 1e6)
    _record(
        records,
        clock,
        progress,
        started,
        ended,
        latency,
        polled.messages,
        polled.user_bytes,
        polled.total_bytes,
    )
    return polled
