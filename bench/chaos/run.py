"""One chaos run: a 3-node cluster under load, faults from a seed, then the verdict.

Phases:

1. **Start**: the fault proxy and three ``viewstream serve`` processes in a fresh folder
   (:class:`bench.chaos.nodes.ChaosCluster`); a stream with a ``replicated`` and a
   ``persisted`` topic of three partitions each; wait until every group has a primary.
2. **Chaos** (``duration_s``): producers and consumers run
   (:mod:`bench.chaos.workload`) while faults from :class:`bench.chaos.faults.FaultSchedule`
   are applied one at a time: apply, hold, heal, wait for recovery, a gap, the next.
3. **Heal**: every rule and block of the proxy is cleared, paused nodes continue, dead
   nodes restart; producers finish the call in hand and stop; the cluster must converge.
4. **Check**: every node's log of every partition is read from that node alone and the
   history is checked (:func:`bench.chaos.history.check`).
5. **Crash everything**: every node is killed with SIGKILL at once; the committed records
   of every group are compared byte for byte across the replicas' segment files
   (:mod:`bench.chaos.segments`); the nodes restart, and every node must serve exactly the
   logs it served before the crash.

Recovery (after each fault, and in phases 3 and 5): every node answers its counters,
every group is ``normal`` on every node with the same view and one primary, every node
holds every op that any node had committed when recovery began, and one probe message was
acknowledged on every partition. Its time is measured from the moment the fault was healed.

Verdict: correctness violations (the checker, the replica comparison, the crash check)
exit with 129; a cluster that does not recover within its bound (liveness) with 128; a
failure of the harness itself with 127; a clean run with 0. The same numbers as
``viewstream-sim``.
"""

from __future__ import annotations

import json
import random
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import trio

from bench.chaos import segments
from bench.chaos.faults import (
    BALLAST_NAME,
    DISK_BUDGET_BYTES,
    FAULT_KINDS,
    FaultPlan,
    FaultRecord,
    FaultSchedule,
)
from bench.chaos.history import PartitionKey, Polled, Verdict, check
from bench.chaos.nodes import ChaosCluster, HarnessError
from bench.chaos.workload import STREAM, Workload, WorkloadConfig, read_node_log
from sdk.errors import IggyError

EXIT_OK: Final = 0
EXIT_HARNESS: Final = 127
EXIT_LIVENESS: Final = 128
EXIT_CORRECTNESS: Final = 129
STATS_INTERVAL_S: Final = 0.25
SETUP_TIMEOUT_S: Final = 90.0


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    """Settings of one chaos run.

    Attributes:
        seed: Draws the fault schedule, the workload's choices and the proxy's drops.
        duration_s: How long faults are injected (the run takes longer: start, heal,
            checks).
        faults_min: Faults applied even past ``duration_s`` (a slow machine recovers
            slowly and would otherwise apply fewer): the schedule deals every kind once
            per round, so ``len(kinds)`` faults cover every kind.
        kinds: Fault kinds to draw from.
        hold_s: Range of how long a fault lasts.
        gap_s: Range of fault-free load between a recovery and the next fault.
        recover_timeout_s: Bound on recovery after a fault (liveness).
        final_timeout_s: Bound on the final heal, convergence and reads.
        tick_ms: The nodes' consensus tick.
        workload: How much load.
        folder: Where data and logs go; None: a fresh temporary folder, removed after a
            clean run and kept after a failed one.
        keep: Keep the folder even after a clean run.
        final_crash: Run phase 5 (kill every node at once and compare).
        allow_retained_gaps: Count, rather than fail on, a node that serves a partition
            only from some offset on (see :func:`bench.chaos.history.check`).
        bus_tls: Run the replica bus over mutual TLS with certificates made for the run;
            the proxy forwards the links as opaque streams (``bench.chaos.proxy``,
            invariant 4).
    """

    seed: int
    duration_s: float
    kinds: tuple[str, ...] = FAULT_KINDS
    faults_min: int = 0
    hold_s: tuple[float, float] = (2.0, 6.0)
    gap_s: tuple[float, float] = (1.0, 3.0)
    recover_timeout_s: float = 90.0
    final_timeout_s: float = 150.0
    tick_ms: int = 10
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    folder: Path | None = None
    keep: bool = False
    final_crash: bool = True
    allow_retained_gaps: bool = False
    bus_tls: bool = False


@dataclass
class RunReport:
    """Everything a run found; ``exit_code`` is the verdict."""

    seed: int
    duration_s: float
    folder: str = ""
    faults: list[FaultRecord] = field(default_factory=list)
    verdict: Verdict | None = None
    crash_verdict: Verdict | None = None
    replica_problems: list[str] = field(default_factory=list)
    crash_problems: list[str] = field(default_factory=list)
    liveness: list[str] = field(default_factory=list)
    harness_error: str | None = None
    final_recover_s: float | None = None
    crash_recover_s: float | None = None
    records_compared: int = 0
    client_errors: dict[str, int] = field(default_factory=dict)
    proxy: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def correctness_failed(self) -> bool:
        verdicts = [v for v in (self.verdict, self.crash_verdict) if v is not None]
        return (
            any(not v.ok for v in verdicts)
            or bool(self.replica_problems)
            or bool(self.crash_problems)
        )

    @property
    def exit_code(self) -> int:
        if self.correctness_failed:
            return EXIT_CORRECTNESS
        if self.harness_error is not None:
            return EXIT_HARNESS
        if self.liveness:
            return EXIT_LIVENESS
        if self.verdict is None:
            return EXIT_HARNESS
        return EXIT_OK

    def fault_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in self.faults:
            counts[record.plan.kind] = counts.get(record.plan.kind, 0) + 1
        return counts

    def summary(self) -> str:
        """The human summary the CLI prints (and the docs' table is made from)."""
        lines = [
            f"seed {self.seed}, {self.duration_s:.0f} s of faults, {self.elapsed_s:.0f} s total"
        ]
        lines.append("")
        lines.append("| fault | injected | recovery (s): median | max |")
        lines.append("|---|---:|---:|---:|")
        for kind in FAULT_KINDS:
            times = sorted(
                r.recover_s for r in self.faults if r.plan.kind == kind and r.recover_s is not None
            )
            count = sum(1 for r in self.faults if r.plan.kind == kind)
            if not count:
                continue
            median = f"{times[len(times) // 2]:.1f}" if times else "-"
            worst = f"{times[-1]:.1f}" if times else "-"
            lines.append(f"| {kind} | {count} | {median} | {worst} |")
        verdict = self.verdict
        if verdict is not None:
            lines += [
                "",
                f"sends {verdict.sends}, acknowledged {verdict.sends_acknowledged} "
                f"({verdict.messages_acknowledged} messages), outcome unknown "
                f"{verdict.messages_unknown} messages ({verdict.messages_unknown_present} "
                f"landed), failed {verdict.messages_failed}",
                f"lost (no node serves them) {verdict.lost}, missing on some replica "
                f"{verdict.missing_on_a_replica}, duplicated {verdict.duplicated}",
                f"polls checked {verdict.polls} ({verdict.messages_polled} messages, "
                f"{verdict.polls_unverifiable} at offsets no node serves any more)",
                f"messages in the final logs {verdict.messages_in_logs}; committed records "
                f"compared across replicas {self.records_compared}",
            ]
        if verdict is not None and verdict.lost_below_retained_start:
            lines.append(
                f"LOST below the first offset every node still serves (counted apart with "
                f"--allow-retained-gaps): {verdict.lost_below_retained_start} acknowledged "
                "messages"
            )
        gaps = list(verdict.retained_gaps if verdict else [])
        if self.crash_verdict is not None:
            gaps += [g for g in self.crash_verdict.retained_gaps if g not in gaps]
        if gaps:
            lines.append(f"known gaps counted, not failed ({len(gaps)}):")
            lines += [f"  {gap}" for gap in gaps[:20]]
        if self.final_recover_s is not None:
            lines.append(f"converged after the final heal in {self.final_recover_s:.1f} s")
        if self.crash_recover_s is not None:
            lines.append(f"recovered from kill -9 of every node in {self.crash_recover_s:.1f} s")
        if self.client_errors:
            errors = ", ".join(f"{k} {v}" for k, v in sorted(self.client_errors.items()))
            lines.append(f"client errors (retried by the SDK until its deadline): {errors}")
        for label, judged in (("", verdict), ("after the crash, ", self.crash_verdict)):
            if judged is not None and judged.counts:
                kinds = ", ".join(f"{k} {v}" for k, v in sorted(judged.counts.items()))
                lines.append(f"{label}violations by kind: {kinds}")
        problems = self.problems()
        lines.append("")
        lines.append("PASS" if not problems else f"FAIL ({len(problems)} problems)")
        lines += [f"  {p}" for p in problems[:50]]
        if len(problems) > 50:
            lines.append(f"  ... and {len(problems) - 50} more")
        return "\n".join(lines)

    def problems(self) -> list[str]:
        found: list[str] = []
        if self.harness_error:
            found.append(f"harness: {self.harness_error}")
        found += [f"liveness: {p}" for p in self.liveness]
        for label, verdict in (("", self.verdict), ("after the crash: ", self.crash_verdict)):
            if verdict is not None:
                found += [f"{label}{v}" for v in verdict.violations]
                if verdict.violations_omitted:
                    found.append(f"{label}{verdict.violations_omitted} more violations")
        found += [f"replicas: {p}" for p in self.replica_problems]
        found += [f"crash: {p}" for p in self.crash_problems]
        return found

    def to_json(self) -> dict[str, Any]:
        plain: dict[str, Any] = {
            "seed": self.seed,
            "duration_s": self.duration_s,
            "elapsed_s": self.elapsed_s,
            "exit_code": self.exit_code,
            "faults": [
                {
                    **asdict(r.plan),
                    "wall_clock": r.wall_clock,
                    "target": r.target,
                    "detail": r.detail,
                    "started_s": r.started_s,
                    "healed_s": r.healed_s,
                    "recover_s": r.recover_s,
                }
                for r in self.faults
            ],
            "fault_counts": self.fault_counts(),
            "problems": self.problems(),
            "final_recover_s": self.final_recover_s,
            "crash_recover_s": self.crash_recover_s,
            "records_compared": self.records_compared,
            "retained_gaps": (self.verdict.retained_gaps if self.verdict else []),
            "violations_by_kind": (self.verdict.counts if self.verdict else {}),
            "client_errors": self.client_errors,
            "proxy": self.proxy,
        }
        if self.verdict is not None:
            plain["verdict"] = {k: v for k, v in asdict(self.verdict).items() if k != "violations"}
        return plain


# -- cluster observation --------------------------------------------------------------------


Reports = list[dict[str, Any] | None]


async def all_stats(cluster: ChaosCluster) -> Reports:
    """Every node's runtime counters at once (None for a node that does not answer)."""
    results: Reports = [None] * cluster.count

    async def one(index: int) -> None:
        results[index] = await trio.to_thread.run_sync(cluster.runtime_stats, index)

    async with trio.open_nursery() as nursery:
        for index in range(cluster.count):
            nursery.start_soon(one, index)
    return results


def _groups(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = report.get("groups", {})
    return groups


def primary_of(reports: Reports, group: str) -> int | None:
    """The node whose replica of ``group`` is primary in the highest view reported."""
    candidates = []
    for index, report in enumerate(reports):
        if report is None:
            continue
        entry = _groups(report).get(group)
        if entry and entry.get("primary") and entry.get("status") == "normal":
            candidates.append((int(entry.get("view", 0)), index))
    return max(candidates)[1] if candidates else None


def converged(reports: Reports, target: dict[str, int]) -> str | None:
    """None if the cluster looks recovered, else what is still missing."""
    if any(r is None for r in reports):
        missing = [i for i, r in enumerate(reports) if r is None]
        return f"nodes {missing} do not answer"
    present = [r for r in reports if r is not None]
    names = [set(_groups(r)) for r in present]
    if any(n != names[0] for n in names):
        return "nodes host different groups"
    for group in sorted(names[0]):
        entries = [_groups(r)[group] for r in present]
        if any(e.get("status") != "normal" for e in entries):
            return f"{group} is not normal everywhere"
        if len({e.get("view") for e in entries}) != 1:
            return f"{group} has several views"
        if sum(1 for e in entries if e.get("primary")) != 1:
            return f"{group} has no single primary"
        floor = target.get(group, 0)
        if any(int(e.get("commit", 0)) < floor or int(e.get("op", 0)) < floor for e in entries):
            return f"{group} is behind op {floor} on some node"
    return None


def commit_targets(reports: Reports) -> dict[str, int]:
    target: dict[str, int] = {}
    for report in reports:
        if report is None:
            continue
        for group, entry in _groups(report).items():
            target[group] = max(target.get(group, 0), int(entry.get("commit", 0)))
    return target


async def wait_recovered(
    cluster: ChaosCluster, workload: Workload | None, timeout_s: float
) -> tuple[float | None, str]:
    """Wait until the cluster has recovered (module docstring); returns the seconds it
    took (None: not within ``timeout_s``) and, then, what was still missing."""
    started = trio.current_time()
    probed = trio.Event()
    missing = "no answer yet"
    if workload is None:
        probed.set()

    last_error = ""

    async def probe_until_acknowledged() -> None:
        nonlocal last_error
        assert workload is not None
        while True:
            try:
                await workload.probe()
                probed.set()
                return
            except (IggyError, RuntimeError) as error:
                last_error = f"{type(error).__name__}: {error}"
                await trio.sleep(0.2)

    target: dict[str, int] | None = None
    with trio.move_on_after(timeout_s):
        async with trio.open_nursery() as nursery:
            if workload is not None:
                nursery.start_soon(probe_until_acknowledged)
            while True:
                reports = await all_stats(cluster)
                if target is None and all(r is not None for r in reports):
                    target = commit_targets(reports)
                state = converged(reports, target or {})
                if state is None and target is not None and probed.is_set():
                    nursery.cancel_scope.cancel()
                    return trio.current_time() - started, ""
                missing = state or (
                    f"probes not acknowledged (last: {last_error or 'none yet'})"
                    if target
                    else "no answer yet"
                )
                await trio.sleep(STATS_INTERVAL_S)
    return None, missing


# -- the run -------------------------------------------------------------------------------


class ChaosRun:
    """State of one run (see the module docstring)."""

    def __init__(self, config: ChaosConfig, log: Callable[[str], None]) -> None:
        self.config = config
        self.log = log
        self.report = RunReport(config.seed, config.duration_s)
        self.password = secrets.token_urlsafe(16)
        self.cluster: ChaosCluster | None = None
        self.workload: Workload | None = None
        self.t0 = 0.0

    def _now(self) -> float:
        return trio.current_time() - self.t0

    async def _blocking(self, function: Callable[..., Any], *args: Any) -> Any:
        return await trio.to_thread.run_sync(function, *args)

    async def run(self, folder: Path) -> None:
        config = self.config
        self.t0 = trio.current_time()
        cluster = ChaosCluster(
            folder,
            root_password=self.password,
            cluster_secret=secrets.token_urlsafe(24),
            tick_ms=config.tick_ms,
            proxy_seed=config.seed,
            env={"VIEWSTREAM_LIMITS__DISK_BUDGET_BYTES": str(DISK_BUDGET_BYTES)},
            bus_tls=config.bus_tls,
        )
        self.cluster = cluster
        await self._blocking(cluster.start)
        self.log(f"cluster up: clients on {', '.join(cluster.client_addresses)}")
        workload = Workload(cluster.client_addresses, self.password, config.workload, config.seed)
        workload.started_at = self.t0
        self.workload = workload
        try:
            with trio.fail_after(SETUP_TIMEOUT_S):
                await workload.setup()
            ready, missing = await wait_recovered(cluster, workload, config.recover_timeout_s)
            if ready is None:
                raise HarnessError(f"the new cluster did not settle: {missing}")
            await self._chaos_and_check(cluster, workload)
        finally:
            self.report.client_errors = dict(workload.history.errors)
            with trio.CancelScope(shield=True):
                await workload.close()

    async def _chaos_and_check(self, cluster: ChaosCluster, workload: Workload) -> None:
        config = self.config
        stop = trio.Event()
        producers_done = trio.Event()
        async with trio.open_nursery() as nursery:

            async def producers() -> None:
                try:
                    async with trio.open_nursery() as inner:
                        for index in range(config.workload.producers):
                            inner.start_soon(workload.producer, index, stop)
                finally:
                    producers_done.set()

            nursery.start_soon(producers)
            for index in range(config.workload.consumers):
                nursery.start_soon(workload.positional_consumer, index, stop)
            for index in range(config.workload.stored_consumers):
                nursery.start_soon(workload.stored_consumer, index, stop)
            await self._fault_loop(cluster, workload)
            self.log(f"{self._now():7.1f}s heal everything and stop the load")
            await self._heal_everything(cluster)
            stop.set()
            with trio.move_on_after(config.final_timeout_s):
                await producers_done.wait()
            if not producers_done.is_set():
                self.report.liveness.append(
                    f"producers did not finish their last call within {config.final_timeout_s} s"
                )
            nursery.cancel_scope.cancel()
        recovered, missing = await wait_recovered(cluster, workload, config.final_timeout_s)
        self.report.final_recover_s = recovered
        if recovered is None:
            self.report.liveness.append(f"no convergence after the final heal: {missing}")
            return
        keys = workload.partitions
        logs = await self._read_logs(cluster, workload, keys)
        self.report.verdict = check(
            workload.history.sends,
            workload.history.polls,
            logs,
            keys,
            allow_retained_gaps=config.allow_retained_gaps,
        )
        self.log(
            f"{self._now():7.1f}s checked: {sum(self.report.verdict.counts.values())} violations, "
            f"{self.report.verdict.messages_acknowledged} acknowledged messages"
        )
        if config.final_crash:
            await self._crash_everything(cluster, workload, logs)
        self.report.proxy = (await self._blocking(cluster.proxy_command, {"op": "stats"}))["links"]
        desyncs = sum(int(link["desyncs"]) for link in self.report.proxy.values())
        if desyncs:
            self.report.harness_error = f"the proxy lost the bus framing {desyncs} times"
        await self._blocking(cluster.stop_all)

    async def _read_logs(
        self, cluster: ChaosCluster, workload: Workload, keys: list[PartitionKey]
    ) -> dict[int, dict[PartitionKey, list[Polled]]]:
        """Every node's logs, read again until all nodes serve the same (a backup learns
        the last commits from the primary's next heartbeat): every partition ends at the
        same offset on every node. After the final timeout the checker judges whatever was
        read last."""
        logs: dict[int, dict[PartitionKey, list[Polled]]] = {}
        with trio.move_on_after(self.config.final_timeout_s):
            while True:
                for index, address in enumerate(cluster.client_addresses):
                    logs[index] = await read_node_log(workload, address, keys)
                ends = [
                    {k: log[-1].offset if log else -1 for k, log in logs[i].items()} for i in logs
                ]
                if all(e == ends[0] for e in ends):
                    return logs
                await trio.sleep(STATS_INTERVAL_S)
        missing = [i for i in range(cluster.count) if i not in logs]
        if missing:
            raise HarnessError(f"nodes {missing} did not serve their logs in time")
        return logs

    async def _crash_everything(
        self,
        cluster: ChaosCluster,
        workload: Workload,
        logs: dict[int, dict[PartitionKey, list[Polled]]],
    ) -> None:
        reports = await all_stats(cluster)
        with trio.move_on_after(self.config.final_timeout_s):
            # A probe connection idle through the long final reads was closed by the
            # node (its idle timeout): the next probe redials, so ask until all answer.
            while any(report is None for report in reports):
                await trio.sleep(STATS_INTERVAL_S)
                reports = await all_stats(cluster)
        self.log(f"{self._now():7.1f}s kill -9 every node at once")
        await self._blocking(cluster.kill_all)
        self._compare_replica_files(cluster, reports)
        healed = trio.current_time()
        for handle in cluster.nodes:
            await self._blocking(cluster.launch, handle.index)
        for handle in cluster.nodes:
            await self._blocking(cluster.wait_ready, handle.index)
        recovered, missing = await wait_recovered(cluster, None, self.config.final_timeout_s)
        if recovered is None:
            self.report.liveness.append(f"no convergence after kill -9 of every node: {missing}")
            return
        self.report.crash_recover_s = trio.current_time() - healed
        keys = workload.partitions
        after = await self._read_logs(cluster, workload, keys)
        self.report.crash_verdict = check(
            workload.history.sends,
            [],
            after,
            keys,
            allow_retained_gaps=self.config.allow_retained_gaps,
        )
        for index in sorted(logs):
            for key in keys:
                before, now = logs[index].get(key, []), after[index].get(key, [])
                if before != now:
                    self.report.crash_problems.append(
                        f"node {index} {key[0]}/{key[1]} served {len(before)} messages before "
                        f"the crash and {len(now)} after"
                        + ("" if len(before) != len(now) else " (different ones)")
                    )
        self.log(f"{self._now():7.1f}s every node restarted and serves the same logs")

    def _compare_replica_files(self, cluster: ChaosCluster, reports: Reports) -> None:
        """Committed records must be byte-identical on every replica (nodes are down)."""
        if any(r is None for r in reports):
            self.report.replica_problems.append("a node did not report its commits")
            return
        commits: dict[str, int] = {}
        for report in reports:
            assert report is not None
            for group, entry in _groups(report).items():
                name = _group_dir_name(group)
                commits[name] = min(commits.get(name, 1 << 62), int(entry["commit"]))
        digests: list[dict[str, dict[int, bytes]]] = []
        for node in cluster.nodes:
            dirs = segments.journal_dirs(node.data_dir)
            found: dict[str, dict[int, bytes]] = {}
            for prefix, commit in commits.items():
                matches = [d for name, d in dirs.items() if _dir_matches(name, prefix)]
                if len(matches) != 1:
                    self.report.replica_problems.append(
                        f"node {node.index}: {len(matches)} journals for group {prefix}"
                    )
                    continue
                found[prefix] = segments.record_digests(matches[0], commit)
            digests.append(found)
        compared = 0
        for prefix, commit in sorted(commits.items()):
            per_node = [d.get(prefix, {}) for d in digests]
            common = set.intersection(*(set(ops) for ops in per_node)) if per_node else set()
            for index, ops in enumerate(per_node):
                if ops and max(ops) < commit:
                    self.report.replica_problems.append(
                        f"node {index} group {prefix}: journal ends at op {max(ops)}, "
                        f"commit is {commit}"
                    )
            for op in sorted(common):
                if len({ops[op] for ops in per_node}) != 1:
                    self.report.replica_problems.append(
                        f"group {prefix} op {op}: the replicas' records differ"
                    )
                compared += 1
        self.report.records_compared = compared
        self.log(
            f"{self._now():7.1f}s {compared} committed records identical on every replica"
            if not self.report.replica_problems
            else f"{self._now():7.1f}s replica files differ"
        )

    async def _heal_everything(self, cluster: ChaosCluster) -> None:
        await self._blocking(cluster.proxy_command, {"op": "heal"})
        for node in cluster.nodes:
            if node.paused:
                await self._blocking(cluster.resume, node.index)
            if not node.running:
                await self._blocking(cluster.restart, node.index)

    # -- faults -----------------------------------------------------------------------------

    async def _fault_loop(self, cluster: ChaosCluster, workload: Workload) -> None:
        config = self.config
        schedule = FaultSchedule(config.seed, config.kinds, config.hold_s, config.gap_s)
        deadline = trio.current_time() + config.duration_s
        while True:
            plan = schedule.next()
            owed = len(self.report.faults) < config.faults_min
            if not owed and trio.current_time() + plan.hold_s > deadline:
                await trio.sleep_until(max(trio.current_time(), deadline))
                return
            record = FaultRecord(plan)
            self.report.faults.append(record)
            await self._apply(cluster, plan, record)
            recovered, missing = await wait_recovered(cluster, workload, config.recover_timeout_s)
            if recovered is not None:
                record.recovered_s = record.healed_s + recovered
            took = "did not recover" if recovered is None else f"recovered in {recovered:.1f} s"
            self.log(
                f"{record.started_s:7.1f}s ({record.wall_clock}) fault {plan.number} "
                f"{plan.kind} {record.target}: "
                f"{record.detail} held {plan.hold_s:.1f} s, {took}"
            )
            if recovered is None:
                self.report.liveness.append(
                    f"fault {plan.number} ({plan.kind} {record.target}): no recovery within "
                    f"{config.recover_timeout_s:.0f} s: {missing}"
                )
                return
            if len(self.report.faults) < config.faults_min:
                await trio.sleep(plan.gap_s)
                continue
            with trio.move_on_at(deadline):
                await trio.sleep(plan.gap_s)
            if trio.current_time() >= deadline:
                return

    async def _apply(self, cluster: ChaosCluster, plan: FaultPlan, record: FaultRecord) -> None:
        reports = await all_stats(cluster)
        names = sorted({g for r in reports if r is not None for g in _groups(r)})
        group = names[plan.group_pick % len(names)] if names else "metadata"
        count = cluster.count
        primary = primary_of(reports, group)
        if primary is None:
            primary = plan.choice % count
        backups = [i for i in range(count) if i != primary]
        backup = backups[plan.choice % len(backups)]
        kind = plan.kind
        record.started_s = self._now()
        record.wall_clock = time.strftime("%H:%M:%S", time.localtime())
        if kind in ("kill-primary", "kill-backup"):
            node = primary if kind == "kill-primary" else backup
            role = "primary" if node == primary else "backup"
            record.target = f"node {node} ({role} of {group})"
            await self._blocking(cluster.kill, node)
            await trio.sleep(plan.hold_s)
            record.healed_s = self._now()
            await self._blocking(cluster.restart, node)
        elif kind in ("pause-primary", "pause-backup"):
            node = primary if kind == "pause-primary" else backup
            role = "primary" if node == primary else "backup"
            record.target = f"node {node} ({role} of {group})"
            await self._blocking(cluster.pause, node)
            await trio.sleep(plan.hold_s)
            record.healed_s = self._now()
            await self._blocking(cluster.resume, node)
        elif kind == "isolate":
            node = primary if plan.choice % 2 == 0 else plan.choice % count
            record.target = f"node {node}" + (
                " (primary of " + group + ")" if node == primary else ""
            )
            links = [cluster.link_name(node, peer) for peer in range(count) if peer != node]
            for link in links:
                await self._blocking(
                    cluster.proxy_command, {"op": "block", "link": link, "blocked": True}
                )
            await trio.sleep(plan.hold_s)
            record.healed_s = self._now()
            for link in links:
                await self._blocking(
                    cluster.proxy_command, {"op": "block", "link": link, "blocked": False}
                )
        elif kind == "one-way":
            node = primary
            outgoing = plan.choice % 2 == 0
            record.target = f"node {node} (primary of {group})"
            record.detail = (
                "every frame from it dropped;" if outgoing else "every frame to it dropped;"
            )
            for peer in range(count):
                if peer == node:
                    continue
                # fwd carries frames from the lower index to the higher.
                sender_is_lower = (node < peer) == outgoing
                direction = "fwd" if sender_is_lower else "back"
                await self._blocking(
                    cluster.proxy_command,
                    {
                        "op": "rule",
                        "link": cluster.link_name(node, peer),
                        "direction": direction,
                        "rule": {"cut": True},
                    },
                )
            await trio.sleep(plan.hold_s)
            record.healed_s = self._now()
            await self._blocking(cluster.proxy_command, {"op": "heal"})
        elif kind in ("lossy", "delay"):
            if kind == "lossy":
                rule = {"drop_p": round(0.05 + 0.25 * plan.rate, 3)}
                record.detail = f"each frame dropped with p={rule['drop_p']};"
            else:
                delay = round(20 + 130 * plan.rate, 1)
                rule = {"delay_ms": delay, "jitter_ms": round(delay / 2, 1)}
                record.detail = f"{delay} ms + up to {delay / 2:.0f} ms jitter;"
            record.target = "every link"
            for link in cluster.links:
                await self._blocking(
                    cluster.proxy_command,
                    {"op": "rule", "link": link, "direction": "both", "rule": rule},
                )
            await trio.sleep(plan.hold_s)
            record.healed_s = self._now()
            await self._blocking(cluster.proxy_command, {"op": "heal"})
        elif kind == "stall":
            link = cluster.links[plan.choice % len(cluster.links)]
            record.target = f"link {link}"
            await self._blocking(
                cluster.proxy_command,
                {"op": "rule", "link": link, "direction": "both", "rule": {"stall": True}},
            )
            await trio.sleep(plan.hold_s)
            record.healed_s = self._now()
            await self._blocking(cluster.proxy_command, {"op": "heal"})
        elif kind in ("truncate-tail", "corrupt-tail"):
            node = plan.choice % count
            role = "primary" if node == primary else "backup"
            record.target = f"node {node} ({role} of {group})"
            await self._blocking(cluster.kill, node)
            record.detail = self._damage(cluster, node, group, plan) + ";"
            await trio.sleep(plan.hold_s)
            record.healed_s = self._now()
            await self._blocking(cluster.restart, node)
        elif kind == "kill-all":
            record.target = "every node"
            await self._blocking(cluster.kill_all)
            await trio.sleep(min(plan.hold_s, 3.0))
            record.healed_s = self._now()
            for node_handle in cluster.nodes:
                await self._blocking(cluster.launch, node_handle.index)
            for node_handle in cluster.nodes:
                await self._blocking(cluster.wait_ready, node_handle.index)
        elif kind == "fill-disk":
            node = primary if plan.choice % 2 == 0 else backup
            role = "primary" if node == primary else "backup"
            record.target = f"node {node} ({role} of {group})"
            ballast = cluster.nodes[node].data_dir / BALLAST_NAME
            record.detail = f"a {DISK_BUDGET_BYTES:,}-byte sparse ballast;"
            await self._blocking(_write_ballast, ballast)
            await trio.sleep(plan.hold_s)
            record.healed_s = self._now()
            await self._blocking(ballast.unlink)
        else:
            raise HarnessError(f"unknown fault kind {kind}")

    def _damage(self, cluster: ChaosCluster, node: int, group: str, plan: FaultPlan) -> str:
        dirs = segments.journal_dirs(cluster.nodes[node].data_dir)
        prefix = _group_dir_name(group)
        matches = [d for name, d in dirs.items() if _dir_matches(name, prefix)]
        if not matches:
            return f"no journal for {group} on node {node}"
        rng = random.Random(plan.file_seed)
        if plan.kind == "truncate-tail":
            return f"{group}: " + segments.truncate_tail(matches[0], rng)
        return f"{group}: " + segments.corrupt_tail(matches[0], rng)


def _write_ballast(path: Path) -> None:
    """A sparse file of the nodes' whole disk budget: the node counts it by its size."""
    with path.open("wb") as ballast:
        ballast.truncate(DISK_BUDGET_BYTES)


def _group_dir_name(group: str) -> str:
    """The directory prefix of a group named by the runtime counters: ``metadata`` or
    ``partition s/t/p`` -> ``s-t-p-`` (the directory adds the creating op)."""
    if group == "metadata":
        return "metadata"
    stream, topic, partition = group.removeprefix("partition ").split("/")
    return f"{stream}-{topic}-{partition}-"


def _dir_matches(name: str, prefix: str) -> bool:
    return name == prefix if prefix == "metadata" else name.startswith(prefix)


def run_chaos(config: ChaosConfig, log: Callable[[str], None] = print) -> RunReport:
    """Run one chaos run to its verdict; every process it started is gone when it returns."""
    owned = config.folder is None
    folder = config.folder or Path(tempfile.mkdtemp(prefix="viewstream-chaos-"))
    run = ChaosRun(config, log)
    run.report.folder = str(folder)
    started = time.monotonic()
    try:
        trio.run(run.run, folder)
    except HarnessError as error:
        run.report.harness_error = str(error)
    except (IggyError, trio.TooSlowError) as error:
        run.report.harness_error = f"{type(error).__name__}: {error}"
    finally:
        if run.cluster is not None:
            run.cluster.close()
        run.report.elapsed_s = time.monotonic() - started
    if owned and not config.keep and run.report.exit_code == EXIT_OK:
        shutil.rmtree(folder, ignore_errors=True)
    return run.report


def report_json(report: RunReport) -> str:
    return json.dumps(report.to_json(), indent=2, default=str)


__all__ = [
    "EXIT_CORRECTNESS",
    "EXIT_HARNESS",
    "EXIT_LIVENESS",
    "EXIT_OK",
    "STREAM",
    "ChaosConfig",
    "RunReport",
    "run_chaos",
]
