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
   take the client's CPU, the server processes' CPU (``/proc``) and the wall clock, run
   every actor at once on one event loop (trio for our SDK, asyncio for the official
   one), take them again, snapshot again.
4. With ``--processes N`` above 1 the actors are dealt to N worker processes
   (``bench.load.workers``), each running its share as in 3; the reports are merged
   (throughput summed, latencies from the raw per-batch records).
5. A watchdog ends the run if no actor makes progress for ``STALL_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final, Protocol

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
    is_local,
    process_cpu_s,
    snapshot_nodes,
)

__all__ = [
    "STALL_TIMEOUT_S",
    "ClientUsage",
    "LoadOutcome",
    "LoadWindow",
    "RunResult",
    "ServerCpu",
    "make_shared",
    "run_benchmark",
    "run_load",
]

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
        cpu_s: User + system CPU seconds of the load generator (every thread; with
            worker processes, summed over them).
        user_s: User CPU seconds.
        system_s: System CPU seconds.
        process_time_s: ``time.process_time()`` over the load (the same, by another
            clock; kept as a cross-check).
        max_rss_bytes: Peak resident set of the (largest) process.
        processes: Each worker process's own usage, when the load ran in workers.
    """

    wall_s: float
    cpu_s: float
    user_s: float
    system_s: float
    process_time_s: float
    max_rss_bytes: int
    processes: tuple[ClientUsage, ...] = ()

    @property
    def cpu_percent(self) -> float:
        """CPU over wall time, in percent of one core (above 100 with workers)."""
        return self.cpu_s / self.wall_s * 100.0 if self.wall_s > 0 else 0.0

    @property
    def process_count(self) -> int:
        return max(1, len(self.processes))

    @property
    def cpu_percent_per_process_max(self) -> float:
        """The busiest load process's CPU, in percent of one core."""
        if not self.processes:
            return self.cpu_percent
        return max(p.cpu_percent for p in self.processes)

    @property
    def saturated(self) -> bool:
        """A load process used nearly all of a core: it, not the server, may be the limit
        (each process runs its actors on one thread)."""
        return self.cpu_percent_per_process_max >= SATURATED_CPU_PERCENT

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "user_s": self.user_s,
            "system_s": self.system_s,
            "process_time_s": self.process_time_s,
            "max_rss_bytes": self.max_rss_bytes,
            "cpu_percent": self.cpu_percent,
            "processes": self.process_count,
            "cpu_percent_per_process": [p.cpu_percent for p in self.processes]
            or [self.cpu_percent],
            "cpu_percent_per_process_max": self.cpu_percent_per_process_max,
            "saturated": self.saturated,
            "saturated_threshold_percent": SATURATED_CPU_PERCENT,
        }


@dataclass
class LoadOutcome:
    """What the load phase of one process (or the merge of several) produced."""

    records: dict[str, BatchRecords]
    client: ClientUsage
    warnings: list[str]
    groups: dict[str, GroupState]


class LoadWindow(Protocol):
    """Where the measured load starts and stops, as the process running actors sees it."""

    def start(self) -> float:
        """Block until the load may start (every client is open); return the run's
        clock origin (``time.perf_counter``: one clock for every process of the host)."""
        ...

    def stop(self) -> None:
        """The actors are done (their clients are still open)."""
        ...

    def tick(self) -> None:
        """Called every ``WATCHDOG_PERIOD_S`` while the actors run."""
        ...


class ServerCpu:
    """CPU seconds of the local server processes between two reads (``/proc``)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self._pids = pids
        self._before: dict[str, float | None] = {}
        self.used_s: dict[str, float | None] = {}

    def start(self) -> None:
        self._before = {a: process_cpu_s(pid) for a, pid in self._pids.items()}

    def stop(self) -> None:
        for address, pid in self._pids.items():
            before, after = self._before.get(address), process_cpu_s(pid)
            self.used_s[address] = None if before is None or after is None else after - before


class _LocalWindow:
    """The in-process load: the window is the servers' CPU between start and stop."""

    def __init__(self, server: ServerCpu) -> None:
        self._server = server

    def start(self) -> float:
        self._server.start()
        return time.perf_counter()

    def stop(self) -> None:
        self._server.stop()

    def tick(self) -> None:
        pass


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
    server_cpu_s: dict[str, float | None] = field(default_factory=dict)
    """CPU seconds each local node used during the load window, by address."""
    processes_requested: int = 1
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
        shared = make_shared(params, plan, preloaded)
        before = snapshot_nodes(addresses, params.username, params.password)
        server_cpu = ServerCpu(_server_pids(addresses, embedded_pids, before))
        requested = params.processes or min(os.cpu_count() or 1, len(plan.actors))
        display = progress(params, plan, shared) if progress else nullcontext()
        with display:
            from bench.load.workers import assign_actors, run_workers

            assignment = assign_actors(plan, requested)
            if len(assignment) <= 1:
                outcome = run_load(params, plan, shared, plan.actors, _LocalWindow(server_cpu))
            else:
                outcome = run_workers(params, plan, preloaded, shared, assignment, server_cpu)
        if params.processes is not None and len(assignment) < params.processes:
            outcome.warnings.append(
                f"{requested} load processes asked for, {max(1, len(assignment))} used: "
                "actors that share a stream run in one process"
            )
        after = snapshot_nodes(addresses, params.username, params.password)
        return RunResult(
            params=params,
            plan=plan,
            started_at=started_at,
            addresses=addresses,
            records=outcome.records,
            client=outcome.client,
            server_before=before,
            server_after=after,
            embedded_pids=embedded_pids,
            server_cpu_s=server_cpu.used_s,
            processes_requested=requested,
            preload_s=preload_s,
            warnings=outcome.warnings,
            groups=outcome.groups,
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


def make_shared(params: BenchParams, plan: Plan, preloaded: dict[tuple[str, int], int]) -> Shared:
    """The actors' shared counters for a run of ``plan``."""
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


def run_load(
    params: BenchParams,
    plan: Plan,
    shared: Shared,
    actors: Sequence[ActorSpec],
    window: LoadWindow,
) -> LoadOutcome:
    """Run ``actors`` on this process's event loop (trio for our SDK, asyncio for the
    official one) between ``window.start()`` and ``window.stop()``."""
    if params.sdk is SdkChoice.OURS:
        import trio

        outcome: LoadOutcome = trio.run(_load_trio, params, plan, shared, actors, window)
        return outcome
    return asyncio.run(_load_asyncio(params, plan, shared, actors, window))


def _server_pids(
    addresses: Sequence[str], embedded_pids: Sequence[int], before: Sequence[NodeSnapshot]
) -> dict[str, int]:
    """The process id of each node this host runs: the embedded ones, else what a node
    on a loopback address says in ``GET_STATS``."""
    if embedded_pids:
        return dict(zip(addresses, embedded_pids, strict=True))
    pids: dict[str, int] = {}
    for snapshot in before:
        pid = snapshot.server.get("process_id")
        if isinstance(pid, int) and is_local(snapshot.address):
            pids[snapshot.address] = pid
    return pids


async def _load_trio(
    params: BenchParams,
    plan: Plan,
    shared: Shared,
    actors: Sequence[ActorSpec],
    window: LoadWindow,
) -> LoadOutcome:
    import trio

    root = await OursClient.open_root(params)
    clients: list[OursClient] = []
    try:
        for _ in actors:
            clients.append(await OursClient.open(root))
        watchdog = _Watchdog(shared)
        records: dict[str, BatchRecords] = {}
        origin = await trio.to_thread.run_sync(window.start)
        usage = _Usage()
        clock = RunClock(origin, params.warmup_s)

        async def actor(spec: ActorSpec, client: LoadClient) -> None:
            records[spec.name] = await _actor_coroutine(
                spec, client, params, plan, shared, clock, trio.sleep
            )

        async with trio.open_nursery() as outer:

            async def watch() -> None:
                while True:
                    await trio.sleep(WATCHDOG_PERIOD_S)
                    watchdog.check()
                    window.tick()

            outer.start_soon(watch)
            async with trio.open_nursery() as nursery:
                for spec, client in zip(actors, clients, strict=True):
                    nursery.start_soon(actor, spec, client)
            outer.cancel_scope.cancel()
        finished = usage.finish()
        window.stop()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            for client in clients:
                await client.close()
            await root.close()
    return LoadOutcome(_ordered(actors, records), finished, watchdog.warnings, shared.groups)


async def _load_asyncio(
    params: BenchParams,
    plan: Plan,
    shared: Shared,
    actors: Sequence[ActorSpec],
    window: LoadWindow,
) -> LoadOutcome:
    clients: list[OfficialClient] = []
    try:
        for _ in actors:
            clients.append(await OfficialClient.open(params))
        watchdog = _Watchdog(shared)
        records: dict[str, BatchRecords] = {}
        origin = await asyncio.to_thread(window.start)
        usage = _Usage()
        clock = RunClock(origin, params.warmup_s)

        async def actor(spec: ActorSpec, client: LoadClient) -> None:
            records[spec.name] = await _actor_coroutine(
                spec, client, params, plan, shared, clock, asyncio.sleep
            )

        async def watch() -> None:
            while True:
                await asyncio.sleep(WATCHDOG_PERIOD_S)
                watchdog.check()
                window.tick()

        watcher = asyncio.create_task(watch())
        try:
            async with asyncio.TaskGroup() as group:
                for spec, client in zip(actors, clients, strict=True):
                    group.create_task(actor(spec, client))
        finally:
            watcher.cancel()
        finished = usage.finish()
        window.stop()
    finally:
        for client in clients:
            await asyncio.wait_for(client.close(), timeout=10)
    return LoadOutcome(_ordered(actors, records), finished, watchdog.warnings, shared.groups)


def _ordered(
    actors: Sequence[ActorSpec], records: dict[str, BatchRecords]
) -> dict[str, BatchRecords]:
    return {a.name: records.get(a.name, BatchRecords()) for a in actors}


def actor_specs(plan: Plan) -> Sequence[ActorSpec]:
    """The plan's actors (re-exported for the report)."""
    return plan.actors
