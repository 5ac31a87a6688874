"""Faults of a chaos run: the schedule a seed draws, and how each fault is applied.

Purpose: turn ``--seed`` into a sequence of faults (pure: :class:`FaultSchedule`) and apply
each one to real processes, files and links (:class:`FaultInjector`), recording when it
started, when it was healed and how long the cluster took to recover.

Fault kinds (``FAULT_KINDS``):

- ``kill-primary``, ``kill-backup``: ``kill -9`` the node that is the primary (or a
  backup) of a group drawn from the seed, hold, restart it on the same data directory.
- ``pause-primary``, ``pause-backup``: SIGSTOP, hold, SIGCONT.
- ``isolate``: the proxy resets every link of one node and refuses new connections.
- ``one-way``: the proxy drops every frame *from* (or *to*) one node, TCP stays up.
- ``lossy``: every link drops each frame with a probability of 5-30%.
- ``delay``: every link adds 20-150 ms of latency, with jitter (order kept).
- ``stall``: one link stops being read in both directions (TCP backpressure, no loss).
- ``truncate-tail``, ``corrupt-tail``: ``kill -9`` a node, cut (or flip bits in) one of
  the last records of a group's newest segment, hold, restart it.
- ``kill-all``: ``kill -9`` every node at once, restart them all.
- ``fill-disk``: fill the disk budget of the primary or a backup of a group: a sparse
  ballast file of ``DISK_BUDGET_BYTES`` in its data directory (the node counts each file
  by its size, so the ballast costs no real disk; the nodes run with that budget), hold,
  remove it. Meanwhile that node refuses new messages where it is primary (4010, a send
  that failed); where it is a backup it still writes its primary's prepares (a backup
  drops message prepares only on a nearly exhausted file system, ``broker.core.disk``).
  The real file system of a shared machine is never filled.

One fault at a time: the injector heals a fault, then waits until the cluster has
recovered (see :func:`bench.chaos.run.wait_recovered`) before the next one. So at most one
node is down, paused, cut off or damaged at once (f = 1 of 3), except ``kill-all``, which
is a crash of every process (no power loss: the page cache survives, so even
``replicated`` topics keep every acknowledged message, ``docs/durability.md``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final

FAULT_KINDS: Final = (
    "kill-primary",
    "kill-backup",
    "pause-primary",
    "pause-backup",
    "isolate",
    "one-way",
    "lossy",
    "delay",
    "stall",
    "truncate-tail",
    "corrupt-tail",
    "kill-all",
    "fill-disk",
)
DISK_BUDGET_BYTES: Final = 16 * 1024**3
"""Every chaos node's disk budget: far above what a run writes, until a ballast fills it."""
BALLAST_NAME: Final = "chaos-ballast"
NODE_FAULTS: Final = frozenset(
    {"kill-primary", "kill-backup", "truncate-tail", "corrupt-tail", "kill-all"}
)
"""Faults that restart processes (their recovery includes a process start)."""


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """One fault as the seed drew it; targets are resolved against the live cluster.

    Attributes:
        number: Position in the schedule (1-based).
        kind: One of ``FAULT_KINDS``.
        hold_s: How long the fault lasts before it is healed.
        gap_s: Load without faults after the cluster recovered, before the next fault.
        group_pick: Picks the group whose primary or backup is targeted (modulo the
            groups that exist).
        choice: Picks among candidates (which backup, which node, which direction).
        rate: In [0, 1): scales drop probabilities and delays.
        file_seed: Seeds where a segment is cut or which bits flip.
    """

    number: int
    kind: str
    hold_s: float
    gap_s: float
    group_pick: int
    choice: int
    rate: float
    file_seed: int


@dataclass(slots=True)
class FaultSchedule:
    """The faults a seed draws: rounds of every enabled kind in a shuffled order, so any
    run of ``len(kinds)`` faults or more applies each kind at least once."""

    seed: int
    kinds: tuple[str, ...] = FAULT_KINDS
    hold_s: tuple[float, float] = (2.0, 6.0)
    gap_s: tuple[float, float] = (1.0, 3.0)
    _rng: random.Random = field(init=False)
    _round: list[str] = field(init=False, default_factory=list)
    _count: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        unknown = [k for k in self.kinds if k not in FAULT_KINDS]
        if unknown or not self.kinds:
            raise ValueError(f"unknown fault kinds {unknown}; known: {', '.join(FAULT_KINDS)}")
        self._rng = random.Random(f"chaos-schedule/{self.seed}")

    def next(self) -> FaultPlan:
        if not self._round:
            self._round = list(self.kinds)
            self._rng.shuffle(self._round)
        self._count += 1
        rng = self._rng
        return FaultPlan(
            number=self._count,
            kind=self._round.pop(0),
            hold_s=round(rng.uniform(*self.hold_s), 2),
            gap_s=round(rng.uniform(*self.gap_s), 2),
            group_pick=rng.randrange(1 << 16),
            choice=rng.randrange(1 << 16),
            rate=rng.random(),
            file_seed=rng.randrange(1 << 32),
        )

    def preview(self, count: int) -> list[FaultPlan]:
        """The first ``count`` faults of this seed (without consuming them)."""
        copy = FaultSchedule(self.seed, self.kinds, self.hold_s, self.gap_s)
        return [copy.next() for _ in range(count)]


@dataclass(slots=True)
class FaultRecord:
    """One applied fault: what, on whom, and how the cluster took it."""

    plan: FaultPlan
    wall_clock: str = ""
    """When it started, as the nodes' logs print time (to find it there)."""
    target: str = ""
    detail: str = ""
    started_s: float = 0.0
    healed_s: float = 0.0
    recovered_s: float | None = None

    @property
    def recover_s(self) -> float | None:
        """Seconds from healing to recovery (None: it did not recover in time)."""
        if self.recovered_s is None:
            return None
        return self.recovered_s - self.healed_s
