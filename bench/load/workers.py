"""The load in several worker processes (``viewstream-bench --processes N``).

Purpose: one Python process drives its actors on one thread, so past some load the
load generator, not the server, is the limit. Dealing the actors to N processes gives
the load N threads of CPU; their reports are merged into one.

Theory of operation:

1. :func:`assign_actors` deals the plan's actors to at most N workers. Actors that share
   a stream (a producer and the consumers following it, the members of a consumer
   group) coordinate through in-process counters (``bench.load.actors.Shared``), so
   each stream's actors stay in one worker; whole streams are dealt, largest first, to
   the least loaded worker.
2. Each worker (a ``spawn``-ed process: no trio or thread state is inherited) opens its
   actors' clients, says ``ready`` and waits. When every worker is ready the parent
   reads the servers' CPU and sends every worker the same clock origin
   (``time.perf_counter``, one monotonic clock for the whole host), so the workers'
   records share one time axis. Each worker runs its actors exactly as a one-process run
   does, sends its progress every ``WATCHDOG_PERIOD_S``, says ``stopped`` when its
   actors are done, then sends its records.
3. :func:`merge_outcomes` unions the per-actor raw records (every batch's latency and
   sizes, so percentiles are computed over raw samples, never averaged), sums the
   workers' CPU and keeps each worker's own usage (``saturated`` is per process).

Invariants: every wait on a worker is bounded (``READY_TIMEOUT_S``, and
``SILENCE_TIMEOUT_S`` without any message while the load runs); every worker started
is joined, and terminated if it does not end by itself.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, Final

from bench.load.actors import GroupState, Progress, Shared
from bench.load.metrics import BatchRecords
from bench.load.params import BenchParams
from bench.load.plan import ActorSpec, Plan, Role
from bench.load.runner import (
    STALL_TIMEOUT_S,
    ClientUsage,
    LoadOutcome,
    ServerCpu,
)

__all__ = ["READY_TIMEOUT_S", "assign_actors", "merge_outcomes", "run_workers"]

READY_TIMEOUT_S: Final = 120.0
"""A worker did not open its clients within this long: the run fails."""
SILENCE_TIMEOUT_S: Final = STALL_TIMEOUT_S + 30.0
"""No message from any running worker for this long (a worker's own watchdog ends a
stalled load after ``STALL_TIMEOUT_S``): the run fails."""
JOIN_TIMEOUT_S: Final = 15.0


def assign_actors(plan: Plan, processes: int) -> list[tuple[ActorSpec, ...]]:
    """The actors of each worker: at most ``processes`` non-empty sets, each stream's
    actors together, in plan order within a worker."""
    assert processes >= 1
    by_stream: dict[str, list[ActorSpec]] = {}
    for actor in plan.actors:
        by_stream.setdefault(actor.stream, []).append(actor)
    workers = min(processes, len(by_stream))
    if workers <= 1:
        return [plan.actors] if plan.actors else []
    loads = [0] * workers
    chosen: list[set[str]] = [set() for _ in range(workers)]
    # Largest stream first to the least loaded worker (ties: the lowest index).
    for stream, actors in sorted(by_stream.items(), key=lambda item: -len(item[1])):
        index = loads.index(min(loads))
        loads[index] += len(actors)
        chosen[index].add(stream)
    return [tuple(a for a in plan.actors if a.stream in streams) for streams in chosen]


def merge_outcomes(plan: Plan, outcomes: Sequence[LoadOutcome], wall_s: float) -> LoadOutcome:
    """One outcome from the workers' (each actor's records come from exactly one).

    Args:
        plan: The run's plan (gives the actors' order).
        outcomes: Each worker's outcome.
        wall_s: Wall time of the whole load, as the parent measured it.
    """
    records: dict[str, BatchRecords] = {}
    groups: dict[str, GroupState] = {}
    warnings: list[str] = []
    for outcome in outcomes:
        for name, actor_records in outcome.records.items():
            assert name not in records, f"{name} ran in two workers"
            records[name] = actor_records
        for name, group in outcome.groups.items():
            assert name not in groups, f"consumer group {name} ran in two workers"
            groups[name] = group
        warnings += [w for w in outcome.warnings if w not in warnings]
    clients = [o.client for o in outcomes]
    client = ClientUsage(
        wall_s=wall_s,
        cpu_s=sum(c.cpu_s for c in clients),
        user_s=sum(c.user_s for c in clients),
        system_s=sum(c.system_s for c in clients),
        process_time_s=sum(c.process_time_s for c in clients),
        max_rss_bytes=max((c.max_rss_bytes for c in clients), default=0),
        processes=tuple(clients),
    )
    ordered = {a.name: records.get(a.name, BatchRecords()) for a in plan.actors}
    return LoadOutcome(ordered, client, warnings, groups)


# --- the worker side ---------------------------------------------------------------------


class _WorkerWindow:
    """A worker's load window: ``ready``/``go`` with the parent, progress on each tick."""

    def __init__(self, conn: Connection, shared: Shared) -> None:
        self._conn = conn
        self._shared = shared

    def start(self) -> float:
        self._conn.send(("ready",))
        if not self._conn.poll(READY_TIMEOUT_S * 2):
            raise RuntimeError("the parent never said go")
        message = self._conn.recv()
        assert message[0] == "go", message
        origin: float = message[1]
        return origin

    def stop(self) -> None:
        self.tick()
        self._conn.send(("stopped",))

    def tick(self) -> None:
        self._conn.send(("progress", dict(self._shared.progress)))


def _worker_main(
    conn: Connection,
    params: BenchParams,
    plan: Plan,
    names: tuple[str, ...],
    preloaded: dict[tuple[str, int], int],
) -> None:
    """A worker process: run ``names``' actors, send the outcome (or why not)."""
    from bench.load.runner import make_shared, run_load

    try:
        actors = tuple(a for a in plan.actors if a.name in names)
        shared = make_shared(params, plan, preloaded)
        outcome = run_load(params, plan, shared, actors, _WorkerWindow(conn, shared))
        mine = {a.group for a in actors if a.group is not None}
        outcome.groups = {name: g for name, g in outcome.groups.items() if name in mine}
        conn.send(("result", outcome))
    except BaseException as error:
        conn.send(("error", f"{type(error).__name__}: {error}"))
    finally:
        conn.close()


# --- the parent side ---------------------------------------------------------------------


class _Worker:
    def __init__(self, process: Any, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.progress: dict[Role, Progress] = {}
        self.stopped = False
        self.outcome: LoadOutcome | None = None

    def receive(self) -> tuple[Any, ...]:
        try:
            message: tuple[Any, ...] = self.conn.recv()
        except (EOFError, OSError):
            code = self.process.exitcode
            raise RuntimeError(f"a load worker ended without its report (exit {code})") from None
        if message[0] == "error":
            raise RuntimeError(f"a load worker failed: {message[1]}")
        return message


def run_workers(
    params: BenchParams,
    plan: Plan,
    preloaded: dict[tuple[str, int], int],
    shared: Shared,
    assignment: Sequence[tuple[ActorSpec, ...]],
    server: ServerCpu,
) -> LoadOutcome:
    """Run each set of ``assignment`` in its own worker process and merge the outcomes.
    ``shared.progress`` is kept at the workers' sum (for the live display).

    Raises:
        RuntimeError: a worker failed, died or went silent.
    """
    context = multiprocessing.get_context("spawn")
    workers: list[_Worker] = []
    try:
        for actors in assignment:
            parent_end, child_end = context.Pipe()
            names = tuple(a.name for a in actors)
            process = context.Process(
                target=_worker_main,
                args=(child_end, params, plan, names, preloaded),
                name=f"viewstream-bench-worker-{len(workers) + 1}",
                daemon=True,
            )
            process.start()
            child_end.close()
            workers.append(_Worker(process, parent_end))
        _wait_ready(workers)
        server.start()
        origin = time.perf_counter()
        for worker in workers:
            worker.conn.send(("go", origin))
        wall_s = _collect(workers, shared, server, origin)
        outcomes = [w.outcome for w in workers if w.outcome is not None]
        assert len(outcomes) == len(workers)
        return merge_outcomes(plan, outcomes, wall_s)
    finally:
        for worker in workers:
            worker.process.join(JOIN_TIMEOUT_S)
            if worker.process.is_alive():
                worker.process.terminate()
                worker.process.join(JOIN_TIMEOUT_S)
            worker.conn.close()


def _wait_ready(workers: Sequence[_Worker]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    waiting = {w.conn: w for w in workers}
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"{len(waiting)} load worker(s) did not open their clients")
        for conn in wait(list(waiting), timeout=left):
            message = waiting[conn].receive()  # type: ignore[index]
            assert message[0] == "ready", message
            del waiting[conn]  # type: ignore[arg-type]


def _collect(workers: Sequence[_Worker], shared: Shared, server: ServerCpu, origin: float) -> float:
    """Receive progress, ``stopped`` and the outcomes; return the load's wall time (to
    the last ``stopped``)."""
    wall_s = 0.0
    last_message = time.monotonic()
    running = {w.conn: w for w in workers}
    while running:
        ready = wait(list(running), timeout=WATCHDOG_WAIT_S)
        if not ready:
            if time.monotonic() - last_message > SILENCE_TIMEOUT_S:
                raise RuntimeError(f"no word from the load workers for {SILENCE_TIMEOUT_S} s")
            continue
        last_message = time.monotonic()
        for conn in ready:
            worker = running[conn]  # type: ignore[index]
            message = worker.receive()
            if message[0] == "progress":
                worker.progress = message[1]
                _sum_progress(workers, shared)
            elif message[0] == "stopped":
                worker.stopped = True
                if all(w.stopped for w in workers):
                    wall_s = time.perf_counter() - origin
                    server.stop()
            elif message[0] == "result":
                worker.outcome = message[1]
                del running[conn]  # type: ignore[arg-type]
    return wall_s


WATCHDOG_WAIT_S: Final = 0.5


def _sum_progress(workers: Sequence[_Worker], shared: Shared) -> None:
    for role in Role:
        total = Progress()
        for worker in workers:
            part = worker.progress.get(role)
            if part is not None:
                total.batches += part.batches
                total.messages += part.messages
                total.user_bytes += part.user_bytes
                total.actors_done += part.actors_done
        shared.progress[role] = total
