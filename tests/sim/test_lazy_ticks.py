"""Lazy ticks change nothing: a run is the same, packet for packet, with or without them.

The runtime steps an idle replica only on the tick a timeout with something to do fires
(``Replica.ticks_until_due``) and passes the ticks before it in one ``Ticked(count)``
(``broker/runtime/group.py``). That is sound only if those ticks in one step are exactly
``count`` steps of one tick: nothing but countdowns and idle timeouts' rearms moves, and
"idle" is judged exactly for every timeout. The trace hash covers every packet
delivered, every fault and every verdict, so equal hashes for a seed in both modes show
it for that run; the seeds below mix cluster sizes, crashes, power loss, partitions and
view changes.
"""

from __future__ import annotations

import pytest

from sim.planted import PLANTED
from sim.world import run_seed

SEEDS = range(24)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_seed_runs_the_same_with_lazy_ticks(seed: int) -> None:
    eager = run_seed(seed)
    lazy = run_seed(seed, lazy_ticks=True)
    assert (lazy.verdict, lazy.trace_hash) == (eager.verdict, eager.trace_hash)
    assert lazy.ticks == eager.ticks


def test_a_planted_bug_fails_the_same_way_with_lazy_ticks() -> None:
    # The planted "apply-past-commit" replica fails seed 0 (tests/sim/test_planted_bugs):
    # the failing run, its checker and its message must not depend on how ticks are stepped.
    replica = PLANTED["apply-past-commit"]
    eager = run_seed(0, replica_class=replica)
    lazy = run_seed(0, replica_class=replica, lazy_ticks=True)
    assert not eager.ok
    assert (lazy.verdict, lazy.checker, lazy.message) == (
        eager.verdict,
        eager.checker,
        eager.message,
    )
    assert lazy.trace_hash == eager.trace_hash
