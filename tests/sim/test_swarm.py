"""The fixed swarm CI runs: every seed must pass every checker, with and without faults.

The seeds are fixed so a failure here is a regression with a replay command; the long
swarms (``docs/simulator.md``) are for finding new failures.
"""

from __future__ import annotations

from functools import cache

import pytest

from sim.cli import replay_command
from sim.world import Result, run_seed

CI_SEEDS_FAULTS = range(60)
CI_SEEDS_CLEAN = range(1000, 1010)
SLOW_SEEDS = range(60, 400)


@cache
def _result(seed: int, faults: bool) -> Result:
    return run_seed(seed, faults=faults)


def _check(seed: int, *, faults: bool) -> None:
    result = _result(seed, faults)
    assert result.ok, (
        f"seed {seed}: {result.verdict} ({result.checker}) {result.message}\n"
        f"replay: {replay_command(seed, faults=faults, plant=None)}"
    )
    assert result.stats["committed_ops"] > 0


@pytest.mark.parametrize("seed", CI_SEEDS_FAULTS)
def test_swarm_with_faults_passes_every_checker(seed: int) -> None:
    _check(seed, faults=True)


@pytest.mark.parametrize("seed", CI_SEEDS_CLEAN)
def test_swarm_without_faults_passes_every_checker(seed: int) -> None:
    _check(seed, faults=False)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_longer_swarm_with_faults_passes_every_checker(seed: int) -> None:
    _check(seed, faults=True)


def test_swarm_covers_every_cluster_size_and_fault_class() -> None:
    """The fixed swarm is only worth its time if it meets every kind of fault."""
    sizes: set[int] = set()
    totals: dict[str, int] = {}
    for seed in CI_SEEDS_FAULTS[:30]:
        result = _result(seed, True)
        sizes.add(result.options.node_count)
        for key, value in result.stats.items():
            totals[key] = totals.get(key, 0) + value
    assert sizes == {1, 3, 5}
    for key in (
        "crashes",
        "power_losses",
        "outages",
        "partitions",
        "corruptions",
        "slow_disks",
        "packets_lost",
        "packets_duplicated",
        "messages_polled",
    ):
        assert totals[key] > 0, key
    assert totals["view_max"] > 0
