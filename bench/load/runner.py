"""One benchmark run: server, streams, preload, the load itself, and the raw results.

Purpose: :func:`run_benchmark` takes resolved parameters and returns a :class:`RunResult`
(raw per-batch records, client CPU, server snapshots); ``bench.load.report`` turns it
into metrics and ``report.json``.

Theory of operation:

1. With ``--embedded``, start the node or cluster (``bench.load.servers``); otherwise
   learn the roster of ``--server-address`` from the cluster metadata.
2. Set up with our blocking client: delete and recreate ``bench-stream-*`` (unless
   ``--reuse-streams``), one topic each with the run's durability, the consumer groups,
   and for consumer-only kinds write the data the consumers will read (not measured).
3. Snapshot the server counters, open one client per actor (logged in, not measured),
   take the client's CPU and wall clock, run every actor at once on one event loop
   (trio for our SDK, asyncio for the official one), take them again, snapshot again.
4. A watchdog ends the run if no actor makes progress for ``STALL_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import math
import resource
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final

from bench.load.actors import (
    GroupState,
    Progress,
    RunClock,
    Shared,
    StreamState,
    consume,
    produce,
    produce_and_consume,
)
from bench.load.drivers import BatchPool, LoadClient, OfficialClient, OursClient, Sleep
from bench.load.metrics import BatchRecords
from bench.load.params import BenchParams, Embedded, SdkChoice
from bench.load.plan import TOPIC, ActorSpec, Plan, Role, make_plan
from bench.load.servers import (
    NodeSnapshot,
    cluster_addresses,
    embedded_server,
    snapshot_nodes,
)

__all__ = ["STALL_TIMEOUT_S", "ClientUsage", "RunResult", "run_benchmark"]

STALL_TIMEOUT_S: Final = 30.0
"""No actor progressed for this long: the run ends, with a warning."""
WATCHDOG_PERIOD_S: Final = 0.5
SATURATED_CPU_PERCENT: Final = 90.0
"""Client CPU (of one core) above which the report says the load generator was the
bottleneck: our SDK runs every actor on one thread."""


@dataclass(frozen=True, slots=True)
class ClientUsage:
    """The load generator's own resource use during the load (setup excluded).

    Attributes:
        wall_s: Wall time of the load phase.
        cpu_s: User + system CPU seconds of this process (every thread).
        user_s: User CPU seconds.
        system_s: System CPU seconds.
        process_time_s: ``time.process_time()`` over the load (the same, by another
            clock; kept as a cross-check).
        max_rss_bytes: Peak resident set of this process.
    """

    wall_s: float
    cpu_s: float
    user_s: float
    system_s: float
    process_time_s: float
    max_rss_bytes: int

    @property
    def cpu_percent(self) -> float:
        """CPU over wall time, in percent of one core."""
        return self.cpu_s / self.wall_s * 100.0 if self.wall_s > 0 else 0.0

    @property
    def saturated(self) -> bool:
        return self.cpu_percent >= SATURATED_CPU_PERCENT

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "user_s": self.user_s,
            "system_s": self.system_s,
            "process_time_s": self.process_time_s,
            "max_rss_bytes": self.max_rss_bytes,
            "cpu_percent": self.cpu_percent,
            "saturated": self.saturated,
            "saturated_threshold_percent": SATURATED_CPU_PERCENT,
        }


@dataclass
class RunResult:
    """Everything a run produced, before the metrics are computed."""

    params: BenchParams
    plan: Plan
    started_at: datetime
    addresses: list[str]
    records: dict[str, BatchRecords]
    client: ClientUsage
    server_before: list[NodeSnapshot]
    server_after: list[NodeSnapshot]
    embedded_pids: list[int] = field(default_factory=list)
    preload_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    groups: dict[str, GroupState] = field(default_factory=dict)


ProgressFactory = Callable[[BenchParams, Plan, Shared], AbstractContextManager[object]]


def run_benchmark(params: BenchParams, *, progress: ProgressFactory | None = None) -> RunResult:
    """Run one benchmark (see the module docstring).

    Args:
        params: Resolved parameters (:meth:`BenchParams.resolved`).
        progress: Makes the live display for the load phase (``None``: no display).

    Raises:
        bench.load.servers.ServerError: an embedded server did not start.
        sdk.errors.IggyError: setup failed (the server refused or was unreachable).
    """
    with ExitStack() as stack:
        embedded_pids: list[int] = []
        if params.embedded is not Embedded.NONE:
            server = stack.enter_context(
                embedded_server(params.embedded, username=params.username, password=params.password)
            )
            params = replace(params, server_addresses=tuple(server.addresses))
            addresses = list(server.addresses)
            embedded_pids = server.pids
        else:
            addresses = cluster_addresses(
                params.server_addresses[0], params.username, params.password
            )
        plan = make_plan(params)
        started_at = datetime.now(UTC)
        preload_started = time.monotonic()
        preloaded = _setup(params, plan)
        preload_s = time.monotonic() - preload_started
        shared = _shared(params, plan, preloaded)
        before = snapshot_nodes(addresses, params.username, params.password)
        display = progress(params, plan, shared) if progress else nullcontext()
        with display:
            if params.sdk is SdkChoice.OURS:
                import trio

                records, usage, warnings = trio.run(_load_trio, params, plan, shared)
            else:
                records, usage, warnings = asyncio.run(_load_asyncio(params, plan, shared))
        after = snapshot_nodes(addresses, params.username, params.password)
        return RunResult(
            params=params,
            plan=plan,
            started_at=started_at,
            addresses=addresses,
            records=records,
            client=usage,
            server_before=before,
            server_after=after,
            embedded_pids=embedded_pids,
            preload_s=preload_s,
            warnings=warnings,
            groups=shared.groups,
        )
    raise AssertionError("unreachable")  # pragma: no cover  (ExitStack does not swallow)


# --- setup -------------------------------------------------------------------------------


def _setup(params: BenchParams, plan: Plan) -> dict[tuple[str, int], int]:
    """Create the streams, topics and groups; preload consumer-only kinds. Returns the
    messages in each ``(stream, partition)`` the consumers will read."""
    from sdk import Client, ClientConfig, NodeAddress

    seeds = []
    for address in params.server_addresses:
        host, _, port = address.rpartition(":")
        seeds.append(NodeAddress(host, int(port)))
    config = ClientConfig(
        seeds=tuple(seeds),
        username=params.username,
        password=params.password,
        request_timeout_s=30.0,
        retry_deadline_s=60.0,
    )
    preloaded: dict[tuple[str, int], int] = {}
    with Client(config) as client:
        existing = {s.name for s in client.get_streams()}
        settings: dict[str, Any] = {"durability": params.durability.value}
        if params.max_topic_size_bytes is not None:
            settings["max_topic_size"] = params.max_topic_size_bytes
        if params.message_expiry_s is not None:
            from datetime import timedelta

            settings["message_expiry"] = timedelta(seconds=params.message_expiry_s)
        for stream in plan.streams:
            if stream in existing and not params.reuse_streams:
                client.delete_stream(stream)
                existing.discard(stream)
            if stream not in existing:
                client.create_stream(stream)
                client.create_topic(stream, TOPIC, plan.partitions, **settings)
        for group, stream in plan.groups:
            if not any(g.name == group for g in client.get_consumer_groups(stream, TOPIC)):
                client.create_consumer_group(stream, TOPIC, group)
        pinned = params.kind.pinned
        for stream, needed in plan.preload_messages.items():
            partitions = [0] if pinned else list(range(plan.partitions))
            per_partition = math.ceil(needed / len(partitions))
            for partition in partitions:
                info = client.get_partition(stream, TOPIC, partition)
                have = info.messages_count if info is not None else 0
                _preload(client, stream, partition, per_partition - have, params)
                preloaded[(stream, partition)] = max(have, per_partition)
    return preloaded


def _preload(client: Any, stream: str, partition: int, messages: int, params: BenchParams) -> None:
    pool = BatchPool(params.message_size, params.messages_per_batch, params.seed)
    while messages > 0:
        batch = pool.next()
        payloads = list(batch.payloads[:messages])
        client.send_messages(stream, TOPIC, payloads, partition)
        messages -= len(payloads)


def _shared(params: BenchParams, plan: Plan, preloaded: dict[tuple[str, int], int]) -> Shared:
    shared = Shared(poll_interval_s=params.poll_interval_s, preloaded=preloaded)
    shared.streams = {stream: StreamState() for stream in plan.streams}
    for actor in plan.actors:
        if actor.role is Role.PRODUCER:
            shared.streams[actor.stream].writers_left += 1
    totals: dict[str, int] = {}
    for (stream, _), count in preloaded.items():
        totals[stream] = totals.get(stream, 0) + count
    for group, stream in plan.groups:
        state = GroupState(total=totals.get(stream) if params.kind.needs_preload else None)
        state.writers_left = sum(
            1 for a in plan.actors if a.group == group and a.role is Role.PRODUCING_CONSUMER
        )
        shared.groups[group] = state
    shared.progress = {role: Progress() for role in Role}
    return shared


# --- the load ----------------------------------------------------------------------------


def _actor_coroutine(
    spec: ActorSpec,
    client: LoadClient,
    params: BenchParams,
    plan: Plan,
    shared: Shared,
    clock: RunClock,
    sleep: Sleep,
) -> Coroutine[Any, Any, BatchRecords]:
    count = params.messages_per_batch.high
    if spec.role is Role.PRODUCER:
        pool = BatchPool(params.message_size, params.messages_per_batch, params.seed + spec.index)
        return produce(spec, client, pool, shared, clock, sleep, plan.batches_per_actor)
    if spec.role is Role.CONSUMER:
        return consume(
            spec,
            client,
            shared,
            clock,
            sleep,
            batches=plan.batches_per_actor,
            count=count,
            follow_producers=params.kind.has_producers,
        )
    pool = BatchPool(params.message_size, params.messages_per_batch, params.seed + spec.index)
    return produce_and_consume(
        spec, client, pool, shared, clock, sleep, batches=plan.batches_per_actor, count=count
    )


class _Usage:
    """CPU and wall clock at the start of the load."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.process = time.process_time()
        self.rusage = resource.getrusage(resource.RUSAGE_SELF)

    def finish(self) -> ClientUsage:
        rusage = resource.getrusage(resource.RUSAGE_SELF)
        user = rusage.ru_utime - self.rusage.ru_utime
        system = rusage.ru_stime - self.rusage.ru_stime
        return ClientUsage(
            wall_s=time.perf_counter() - self.wall,
            cpu_s=user + system,
            user_s=user,
            system_s=system,
            process_time_s=time.process_time() - self.process,
            max_rss_bytes=rusage.ru_maxrss * 1024,
        )


def _progress_total(shared: Shared) -> int:
    return sum(p.batches for p in shared.progress.values()) + sum(
        s.produced for s in shared.streams.values()
    )


class _Watchdog:
    """Ends the run when nothing moved for ``STALL_TIMEOUT_S``."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.last_total = -1
        self.last_change = time.monotonic()
        self.warnings: list[str] = []

    def check(self) -> None:
        total = _progress_total(self.shared)
        now = time.monotonic()
        if total != self.last_total:
            self.last_total, self.last_change = total, now
        elif now - self.last_change > STALL_TIMEOUT_S and not self.shared.stalled:
            self.shared.stalled = True
            self.warnings.append(
                f"no progress for {STALL_TIMEOUT_S:.0f} s: the run was stopped early"
            )


async def _load_trio(
    params: BenchParams, plan: Plan, shared: Shared
) -> tuple[dict[str, BatchRecords], ClientUsage, list[str]]:
    import trio

    root = await OursClient.open_root(params)
    clients: list[OursClient] = []
    try:
        for _ in plan.actors:
            clients.append(await OursClient.open(root))
        watchdog = _Watchdog(shared)
        records: dict[str, BatchRecords] = {}
        usage = _Usage()
        clock = RunClock(time.perf_counter(), params.warmup_s)

        async def actor(spec: ActorSpec, client: LoadClient) -> None:
            records[spec.name] = await _actor_coroutine(
                spec, client, params, plan, shared, clock, trio.sleep
            )

        async with trio.open_nursery() as outer:

            async def watch() -> None:
                while True:
                    await trio.sleep(WATCHDOG_PERIOD_S)
                    watchdog.check()

            outer.start_soon(watch)
            async with trio.open_nursery() as nursery:
                for spec, client in zip(plan.actors, clients, strict=True):
                    nursery.start_soon(actor, spec, client)
            outer.cancel_scope.cancel()
        finished = usage.finish()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            for client in clients:
                await client.close()
            await root.close()
    return _ordered(plan, records), finished, watchdog.warnings


async def _load_asyncio(
    params: BenchParams, plan: Plan, shared: Shared
) -> tuple[dict[str, BatchRecords], ClientUsage, list[str]]:
    clients: list[OfficialClient] = []
    try:
        for _ in plan.actors:
            clients.append(await OfficialClient.open(params))
        watchdog = _Watchdog(shared)
        records: dict[str, BatchRecords] = {}
        usage = _Usage()
        clock = RunClock(time.perf_counter(), params.warmup_s)

        async def actor(spec: ActorSpec, client: LoadClient) -> None:
            records[spec.name] = await _actor_coroutine(
                spec, client, params, plan, shared, clock, asyncio.sleep
            )

        async def watch() -> None:
            while True:
                await asyncio.sleep(WATCHDOG_PERIOD_S)
                watchdog.check()

        watcher = asyncio.create_task(watch())
        try:
            async with asyncio.TaskGroup() as group:
                for spec, client in zip(plan.actors, clients, strict=True):
                    group.create_task(actor(spec, client))
        finally:
            watcher.cancel()
        finished = usage.finish()
    finally:
        for client in clients:
            await asyncio.wait_for(client.close(), timeout=10)
    return _ordered(plan, records), finished, watchdog.warnings


def _ordered(plan: Plan, records: dict[str, BatchRecords]) -> dict[str, BatchRecords]:
    return {a.name: records.get(a.name, BatchRecords()) for a in plan.actors}


def actor_specs(plan: Plan) -> Sequence[ActorSpec]:
    """The plan's actors (re-exported for the report)."""
    return plan.actors
