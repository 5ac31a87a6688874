"""The short chaos soak CI runs: real processes, every fault kind, nothing acknowledged lost.

``bench.chaos.run.run_chaos`` starts three node processes behind the fault proxy, loads
them with the SDK (producers with exactly-once retries, positional and stored-offset
consumers) and applies faults from ``CI_SEED`` for ``DURATION_S``: kill -9 of primaries
and backups, SIGSTOP, isolation, one-way cuts, loss, delay, stalls, a torn or corrupted
segment tail and a kill -9 of every node. Then it heals, checks the history against every
node's log, kills every node at once, compares the replicas' committed records byte for
byte, restarts them and checks again. ``docs/reliability.md`` has the 10-minute version.

Any anomaly fails the run: a lost, duplicated or diverging message, a node that serves a
partition from later than its first offset, and a consumer served an older stored offset
than one it saw acknowledged.
"""

from __future__ import annotations

from pathlib import Path

from bench.chaos.faults import FAULT_KINDS
from bench.chaos.run import ChaosConfig, run_chaos

CI_SEED = 3
DURATION_S = 75.0
FAULTS_MIN = len(FAULT_KINDS) - 2
"""Faults applied however slowly the machine recovers from them: a loaded machine got
through 10 kinds in 75 s, and a fixed duration made coverage depend on its speed."""


def test_chaos_soak_loses_and_duplicates_no_acknowledged_message(tmp_path: Path) -> None:
    lines: list[str] = []
    config = ChaosConfig(
        seed=CI_SEED,
        duration_s=DURATION_S,
        faults_min=FAULTS_MIN,
        hold_s=(1.0, 3.0),
        gap_s=(0.5, 1.0),
        recover_timeout_s=60.0,
        final_timeout_s=90.0,
        folder=tmp_path / "chaos",
    )
    report = run_chaos(config, lines.append)
    story = "\n".join(lines) + "\n" + report.summary()
    story += (
        f"\nreplay: viewstream-chaos --seed {CI_SEED} --duration {DURATION_S:g} "
        f"--faults-min {FAULTS_MIN} --hold 1..3 --gap 0.5..1 --recover-timeout 60"
    )
    assert report.harness_error is None, story
    assert not report.liveness, story
    assert report.verdict is not None, story
    assert report.verdict.lost == 0 and report.verdict.duplicated == 0, story
    assert report.verdict.missing_on_a_replica == 0, story
    for verdict in (report.verdict, report.crash_verdict):
        assert verdict is not None, story
        assert not verdict.counts and not verdict.violations_omitted, story
    assert not report.replica_problems and not report.crash_problems, story
    assert report.verdict.messages_acknowledged > 1000, story
    assert report.records_compared > 100, story
    assert len(report.fault_counts()) >= FAULTS_MIN, story
