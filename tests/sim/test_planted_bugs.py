"""The planted bugs: a small swarm must catch each one, or the checkers prove nothing.

Each test runs a small swarm until one of the checkers named for the planted bug fails a
run, and then replays that seed with the correct replica and node, which must pass: the
failure is the planted bug's, not the world's. The swarm sizes are bounds, not the
expected cost: the first failing seeds are noted next to each (they move when the options
a seed draws change).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from sim.options import Options
from sim.planted import planted_classes
from sim.world import Result, World

Profile = Callable[[Options], Options | None]
"""What a swarm does to a seed's options before it runs them (None: skip the seed)."""


def _as_drawn(options: Options) -> Options:
    return options


def _primary_flips(options: Options) -> Options | None:
    """Every partition cuts off the primary of the workload's first partition while clients
    still send to it, then, when it heals, cuts off the primary the isolation produced (a
    partition starts about every 100 ticks and lasts at most 200); clients send every write
    to the primary they know. So the old primary's uncommitted log meets the next view's
    committed one in a view change before it caught up, and is the longer one. Under the
    seeds' own rates backups forward writes to the new primary so promptly that the next
    view's log is nearly always the longer (no seed of 0..1,100 found the bug)."""
    if options.node_count == 1:
        return None
    faults = dataclasses.replace(
        options.faults,
        partition=0.01,
        partition_ticks_max=min(options.faults.partition_ticks_max, 200),
        partition_modes=("isolate-primary",),
        flip=1.0,
    )
    # Three times the producers: each client adds at most one new op to the isolated
    # primary's log before it times out, so more clients make its log the longer one
    # more often (with the seed's own count, one seed of 0..300 found the bug).
    workload = dataclasses.replace(
        options.workload, any_node_writes=0.0, producers=options.workload.producers * 3
    )
    return dataclasses.replace(options, faults=faults, workload=workload)


# bug -> (seeds to try, the checkers that must catch it: ``Result.checker``, which names
# the failed checker of ``sim.checkers``, or the exception a replica's own invariant
# assertion raised; the options profile)
SWARMS: dict[str, tuple[range, tuple[str, ...], Profile]] = {
    # A longer, older log replaces committed ops: replicas disagree on an op. Rare under
    # the primary-flips profile with three times the producers: since primaries send
    # Commit as their pipeline drains, seeds 60, 183 and 191 of 0..200 find it (before,
    # 24 and 58 of 0..100: every seed's schedule moved, not the rate), so the search
    # covers the last two. With the seed's own producers it became rare once a login
    # passed a fresh read barrier (seed 268 of 0..300; why is not understood: keeping
    # every session open found none in 0..69 either). Before: seed 60 of 0..70, and 23,
    # and 11, 23, 60 before clients closed connections and logged out. Part of why: the
    # bug needs a pipeline of two or more (with one, a cut-off primary holds one op past
    # the commit, which the newer view either lacks or commits itself, a tie on op that
    # log_view breaks rightly), and a quarter of the seeds draw one. Every catching seed
    # above draws two or more. ``test_scenarios_view_change.py`` builds the situation
    # step by step and catches the bug every time.
    "longest-log": (range(180, 195), ("agreement", "model"), _primary_flips),
    # Acked-but-unsynced prepares die in a power outage: committed ops are lost. Rare in
    # the swarm: seeds 123 and 132 of 100..140 find it (with writes forwarded by backups;
    # before, 21 and 123), so the search starts near them.
    "ack-before-write": (range(100, 140), ("agreement", "converged", "acked"), _as_drawn),
    # A request recorded at prepare and then discarded: a reply that was never committed,
    # or its client locked out (liveness: seed 4; seed 58 before clients closed
    # connections and logged out).
    "table-at-prepare": (range(120), ("reply", "liveness"), _as_drawn),
    # A backup applies what is not committed: the replica's own invariants trip first.
    "apply-past-commit": (range(20), ("AssertionError",), _as_drawn),
    # A request under a reused number answered with another's reply: acked, never stored.
    # Only number reusers hit it (about half the seeds have some); seed 3 finds it.
    "number-only-dedup": (range(40), ("acked", "reply"), _as_drawn),
    # A node answers a forwarded send once it is prepared, not committed (seed 0).
    "forward-ack-at-prepare": (range(20), ("reply",), _as_drawn),
    # A node serves a read-back before it applied the send it acknowledged (seed 1).
    "backup-poll-above-applied": (range(20), ("read-your-writes",), _as_drawn),
    # A node keeps hosting the group of a deleted partition (seed 0).
    "keep-removed-group": (range(20), ("hosting",), _as_drawn),
    # A node skips the session check: it admits a request under a session that ended (a
    # closed connection's, a logout's) or that its connection never logged in to (seed 0).
    "skip-session-check": (range(20), ("session",), _as_drawn),
    # A node's partitions apply retentions as moving nothing (seed 2).
    "retain-ignored": (range(20), ("retained-start",), _as_drawn),
    # A node deletes sealed segments up to its checkpoint, retained or not (seed 4).
    "delete-past-floor": (range(20), ("retained",), _as_drawn),
    # A node's partitions keep retired batches indexed and serve them (seed 4).
    "index-outlives-retention": (range(20), ("deleted-read",), _as_drawn),
    # A backup's read index trusts the primary's commit alone: with five replicas, a
    # primary and a backup cut off from a newer view serve an offset older than one it
    # acknowledged; with three, a deposed primary trusts its own commit. Since primaries
    # send Commit as their pipeline drains, seeds 100 and 123 of 0..150 find it (before:
    # 24 and 82 of 0..120; each seed's schedule moved), so the search covers both.
    "read-index-unconfirmed": (range(95, 125), ("fresh-read",), _as_drawn),
}


def _first_failure(bug: str) -> tuple[Options, Result]:
    seeds, checkers, profile = SWARMS[bug]
    replica_class, node_class = planted_classes(bug)
    for seed in seeds:
        options = profile(Options.from_seed(seed))
        if options is None:
            continue
        result = World(options, replica_class, node_class=node_class).run()
        if result.checker in checkers:
            return options, result
    pytest.fail(f"no checker of {checkers} caught {bug} in seeds {seeds.start}..{seeds.stop - 1}")


@pytest.mark.parametrize("bug", sorted(SWARMS))
def test_planted_bug_is_caught_by_its_checker(bug: str) -> None:
    options, found = _first_failure(bug)
    clean = World(options).run()
    assert clean.ok, f"seed {found.seed} fails without the planted bug: {clean.message}"
