"""``viewstream-sim``: replay output, exit codes and the replay command on failure."""

from __future__ import annotations

import pytest

from sim.cli import main, replay_command
from sim.world import EXIT_CODES, run_seed


def test_seed_run_prints_summary_and_trace_hash(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "seed 1" in out and "verdict ok" in out
    assert f"trace {run_seed(1).trace_hash}" in out


def test_failure_prints_seed_checker_and_replay_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["--seed", "0", "--plant", "apply-past-commit"])
    out = capsys.readouterr().out
    assert code == EXIT_CODES["crash"] == 127
    assert "FAILED seed 0: crash" in out
    assert "replay: viewstream-sim --seed 0 --plant apply-past-commit" in out


def test_swarm_prints_a_summary_table_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "0..2"]) == 0
    out = capsys.readouterr().out
    assert "swarm 0..2 (3 seeds)" in out and "verdict ok" in out


def test_exit_codes_match_the_issue() -> None:
    assert EXIT_CODES == {"ok": 0, "crash": 127, "liveness": 128, "correctness": 129}


def test_replay_command_carries_every_option() -> None:
    assert replay_command(7, faults=True, plant=None) == "viewstream-sim --seed 7"
    assert (
        replay_command(7, faults=False, plant="longest-log")
        == "viewstream-sim --seed 7 --no-faults --plant longest-log"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--seeds", "5..2"],
        ["--seed", "-1"],
        ["--seeds", "x"],
        [],
        ["--seed", "1", "--seeds", "0..1"],
        ["--seed", "1", "--plant", "no-such-bug"],
        ["--seed", "1", "--no-such-flag"],
    ],
)
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2


def test_help_lists_every_flag_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--seed", "--seeds", "--no-faults", "--plant", "--lenient-polls", "--verbose"):
        assert flag in out
