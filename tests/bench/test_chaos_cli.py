"""``viewstream-chaos``'s command line: its flags build the run's settings, its exit code
is the run's verdict, and bad arguments exit 2 (the run itself is faked here; the real
harness runs in ``tests/cluster``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench.chaos import cli
from bench.chaos.faults import FAULT_KINDS
from bench.chaos.run import EXIT_HARNESS, EXIT_LIVENESS, ChaosConfig, RunReport


def fake_run(monkeypatch: pytest.MonkeyPatch, report: RunReport) -> list[ChaosConfig]:
    """Replace the harness with one that records its settings and returns ``report``."""
    seen: list[ChaosConfig] = []

    def run(config: ChaosConfig, log: Callable[[str], None]) -> RunReport:
        seen.append(config)
        log("faked run")
        return report

    monkeypatch.setattr(cli, "run_chaos", run)
    return seen


def test_every_flag_reaches_the_run_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen = fake_run(monkeypatch, RunReport(seed=7, duration_s=60.0, liveness=["slow"]))
    argv = [
        "--seed", "7", "--duration", "60", "--faults-min", "3",
        "--faults", "kill-primary,isolate", "--hold", "1..4", "--gap", "2",
        "--recover-timeout", "30", "--tick-ms", "5", "--producers", "2",
        "--consumers", "1", "--stored-consumers", "0", "--dir", str(tmp_path / "run"),
        "--keep", "--json", str(tmp_path / "report.json"), "--allow-retained-gaps",
        "--no-final-crash",
    ]  # fmt: skip
    assert cli.main(argv) == EXIT_LIVENESS
    (config,) = seen
    assert (config.seed, config.duration_s, config.faults_min) == (7, 60.0, 3)
    assert config.kinds == ("kill-primary", "isolate")
    assert (config.hold_s, config.gap_s) == ((1.0, 4.0), (2.0, 2.0))
    assert (config.recover_timeout_s, config.tick_ms) == (30.0, 5)
    workload = config.workload
    assert (workload.producers, workload.consumers, workload.stored_consumers) == (2, 1, 0)
    assert config.folder == tmp_path / "run" and config.keep
    assert config.allow_retained_gaps and not config.final_crash
    assert '"seed": 7' in (tmp_path / "report.json").read_text()


def test_defaults_and_a_failed_run_print_the_replay_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = RunReport(seed=9, duration_s=12.5, harness_error="boom", folder="/somewhere")
    seen = fake_run(monkeypatch, report)
    assert cli.main(["--seed", "9", "--duration", "12.5"]) == EXIT_HARNESS
    (config,) = seen
    assert config.kinds == FAULT_KINDS
    assert (config.hold_s, config.gap_s, config.faults_min) == ((2.0, 6.0), (1.0, 3.0), 0)
    assert config.folder is None and config.final_crash and not config.keep
    out = capsys.readouterr().out
    assert "faked run" in out and "data and logs kept in /somewhere" in out
    assert "replay: viewstream-chaos --seed 9 --duration 12.5" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--duration", "10"],
        ["--seed", "1"],
        ["--seed", "1", "--duration", "10", "--faults", "meteor"],
        ["--seed", "1", "--duration", "10", "--hold", "5..2"],
        ["--seed", "1", "--duration", "10", "--gap", "x"],
        ["--seed", "x", "--duration", "10"],
    ],
)
def test_bad_arguments_exit_2_before_any_run(
    monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    seen = fake_run(monkeypatch, RunReport(seed=0, duration_s=0.0))
    with pytest.raises(SystemExit) as raised:
        cli.main(argv)
    assert raised.value.code == 2
    assert seen == []
