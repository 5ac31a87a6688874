"""The fault injector of the fault phase: crashes, partitions, corruption, slow disks.

Purpose: decide, tick by tick and from one PRNG stream per fault class, which node
crashes or restarts, which links a partition cuts, which down node's journal gets a
damaged record and which disk turns slow.

Fault model (the budget that keeps a run within what VSR promises to survive):

1. *Process crash*: the node stops; its storage keeps everything written (a live kernel's
   page cache). Always allowed for up to f nodes down at once, for all nodes when the
   swarm chose ``correlated``.
2. *Power loss*: a crash that also drops every unsynced write and tears the newest
   (``MemoryStorage.crash``). A ``persisted`` group acks only synced prepares, so power
   loss costs it nothing. A ``replicated`` group acks written prepares: a replica that
   loses power may lose ops it acknowledged, so it counts against the group's failure
   budget f (the consensus author's rule, ``docs/consensus.md`` "Limits"). The metadata
   group is always ``persisted``.
3. *Corruption*: bytes of a journal record flipped while its node is down (a latent
   sector error that recovery meets at restart). It may destroy acknowledged ops, so it
   counts against f too.
4. A node that ever lost acknowledged ops (2 in a ``replicated`` run, or 3) is *damaged*
   for the rest of the run, conservatively: the injector never asks whether it has been
   repaired since. Damaged and down nodes together are at most f at any time; without a
   damaged node, at most f nodes are down at once, or any number when the swarm chose
   ``correlated`` (every replica still holds what it acknowledged, so a whole-cluster
   restart must recover). An *outage* (every node at once: power in ``persisted`` runs,
   processes in ``replicated`` runs) needs no damaged node either.
5. *Partitions*: isolate one node (a random one, or the primary of the first partition
   group, whose uncommitted prepares then compete with the next view's log), split the
   nodes in two sides (2/1, 3/2, 1/4...), or cut one direction of the links between two
   sides (asymmetric). Only replica links.
6. *Slow disks*: a node's write and sync latency is multiplied for a while.
7. A power loss may leave a hole rather than a torn tail: ``MemoryStorage`` can let the
   newest unsynced write reach the disk while an earlier one is lost. Recovery then
   reports a damaged record, which the replica cannot tell from corruption, so it will not
   vote until it has rejoined. The same holds for a tail that recovery cut without proof
   that it was debris (``RecoveryReport.tail_debris``), whether corruption (3) rotted the
   last records or not. The injector cannot choose this, only notice it at restart:
   such a node counts as damaged from then on, and if that takes the damaged nodes above
   f, the run is *over budget*: the safety checkers still run, liveness is not required
   (the VOPR's "stuck for a good reason"), and the summary says so.

Every decision draws from its own stream, in a fixed order each tick, so the schedule of
one class does not move when another's rates change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.network import Network
from sim.node import Node
from sim.options import Options
from sim.rng import stream


@dataclass(slots=True)
class FaultLog:
    """Counts for the run summary."""

    crashes: int = 0
    outages: int = 0
    power_losses: int = 0
    restarts: int = 0
    partitions: int = 0
    corruptions: int = 0
    slow_disks: int = 0
    events: list[str] = field(default_factory=list)


class Faults:
    """Injects the fault phase's faults into the nodes and the network."""

    def __init__(self, options: Options, nodes: list[Node], network: Network) -> None:
        self.options = options
        self.nodes = nodes
        self.network = network
        seed = options.seed
        self._crash = stream(seed, "faults.crash")
        self._partition = stream(seed, "faults.partition")
        self._corruption = stream(seed, "faults.corruption")
        self._disk = stream(seed, "faults.disk")
        self.damaged = [False] * options.node_count
        self.down_since = [0] * options.node_count
        self.partition_until = 0
        #: Set when the damage budget was exceeded by something the injector could not
        #: choose (a power loss that tore a hole into a persisted journal, see rule 7).
        self.over_budget = False
        #: An isolate-primary partition that, when it heals, isolates the next primary.
        self._flip_from: int | None = None
        self.log = FaultLog()

    def _note(self, tick: int, text: str) -> None:
        self.log.events.append(f"{tick}: {text}")

    def _within_budget(self, *, down: int | None = None, damaged: int | None = None) -> bool:
        """Whether the failures after a change stay within the budget (rule 4): with a
        damaged node, damaged and down nodes together are at most f; without one, at most
        f are down, or any number when the swarm chose ``correlated``."""
        down_set = [n.index for n in self.nodes if not n.alive] + (
            [down] if down is not None else []
        )
        damaged_set = [i for i, hurt in enumerate(self.damaged) if hurt]
        if damaged is not None:
            damaged_set.append(damaged)
        failed = sorted(dict.fromkeys(down_set + damaged_set))
        if not damaged_set and self.options.faults.correlated:
            return True
        return len(failed) <= self.options.failures_max

    def step(self, tick: int) -> list[tuple[str, int]]:
        """Decide this tick's faults; returns ``(what, node)`` pairs the world executes
        (``crash``, ``power_loss``, ``restart``), in order."""
        todo: list[tuple[str, int]] = []
        self._step_crashes(tick, todo)
        self._step_partitions(tick)
        self._step_corruption(tick)
        self._step_disks(tick)
        return todo

    def _step_crashes(self, tick: int, todo: list[tuple[str, int]]) -> None:
        faults = self.options.faults
        prng = self._crash
        nodes = self.nodes
        for node in nodes:
            down_long_enough = tick - self.down_since[node.index] >= faults.down_ticks_min
            # The restart draw happens only for a node that may restart, as before.
            if not node.alive and down_long_enough and prng.random() < faults.restart:
                todo.append(("restart", node.index))
                self.log.restarts += 1
                self._note(tick, f"restart node {node.index}")
        if faults.outage > 0.0 and prng.random() < faults.outage and not any(self.damaged):
            self._outage(tick, todo)
            return
        if faults.crash == 0.0 or prng.random() >= faults.crash:
            return
        alive = [node.index for node in nodes if node.alive]
        if not alive:
            return
        victim = alive[prng.randrange(len(alive))]
        power = prng.random() < faults.power_loss_ratio
        if not self._within_budget(down=victim):
            return
        if power and not self.options.persisted:
            # Losing unsynced writes loses acknowledged ops of the replicated groups.
            if not self._within_budget(down=victim, damaged=victim):
                power = False
            else:
                self.damaged[victim] = True
        self.down_since[victim] = tick
        self.log.crashes += 1
        if power:
            self.log.power_losses += 1
        todo.append(("power_loss" if power else "crash", victim))
        self._note(tick, f"{'power loss' if power else 'crash'} node {victim}")

    def _outage(self, tick: int, todo: list[tuple[str, int]]) -> None:
        # A power outage loses nothing a persisted group acknowledged; a replicated group
        # would lose acknowledged ops on every replica, so there every process crashes
        # instead and the kernels (page caches) live on.
        power = self.options.persisted
        alive = [node.index for node in self.nodes if node.alive]
        for index in alive:
            self.down_since[index] = tick
            self.log.crashes += 1
            self.log.power_losses += int(power)
            todo.append(("power_loss" if power else "crash", index))
        self.log.outages += 1
        self._note(tick, f"outage ({'power' if power else 'processes'}) nodes {alive}")

    def note_restart(self, tick: int, index: int, *, journal_damaged: bool) -> None:
        """A node restarted; ``journal_damaged``: recovery found damaged records."""
        if not journal_damaged or self.damaged[index]:
            return
        self.damaged[index] = True
        self._note(tick, f"node {index} restarted with a damaged journal")
        failed = [i for i, hurt in enumerate(self.damaged) if hurt]
        if len(failed) > self.options.failures_max:
            self.over_budget = True
            self._note(tick, "failure budget exceeded: liveness is not required")

    def _step_partitions(self, tick: int) -> None:
        faults = self.options.faults
        prng = self._partition
        count = self.options.node_count
        if self.network.blocked and tick >= self.partition_until:
            self.network.blocked = {}
            self._note(tick, "partition healed")
            if self._flip_from is not None:
                # Cut off the primary the isolation produced, at once: the old primary's
                # uncommitted log and the new view's committed one meet in a view change
                # before the old primary has caught up.
                isolated, self._flip_from = self._flip_from, None
                leader = self._leader()
                if leader is not None and leader != isolated:
                    self._isolate(tick, leader, prng.randint(20, faults.partition_ticks_max))
                    self._note(tick, f"partition flip: isolate new primary {leader}")
                    return
        if self.network.blocked or count == 1 or faults.partition == 0.0:
            return
        if prng.random() >= faults.partition:
            return
        mode = prng.choice(faults.partition_modes)
        order = list(range(count))
        prng.shuffle(order)
        if mode == "isolate-primary":
            # Cut off the node leading the first partition group, while clients still send
            # to it: its uncommitted prepares then compete with the next view's log.
            leader = self._leader()
            if leader is not None:
                order.remove(leader)
                order.insert(0, leader)
                if prng.random() < faults.flip:
                    self._flip_from = leader
        size = 1 if mode.startswith("isolate") else prng.randint(1, count - 1)
        side_a, side_b = order[:size], order[size:]
        blocked: dict[tuple[int, int], bool] = {}
        for a in side_a:
            for b in side_b:
                blocked[(a, b)] = True
                if mode != "asymmetric":
                    blocked[(b, a)] = True
        self.network.blocked = blocked
        self.partition_until = tick + prng.randint(20, faults.partition_ticks_max)
        self.log.partitions += 1
        self._note(tick, f"partition {mode} {sorted(side_a)} | {sorted(side_b)}")

    def _leader(self) -> int | None:
        """The live node whose replica of the first partition group leads its view."""
        for node in self.nodes:
            group = node.workload_group()
            host = None if group is None else node.groups.get(group)
            if host is None or not node.alive:
                continue
            replica = host.replica
            if replica.is_primary and replica.status.value == "normal":
                return node.index
        return None

    def _isolate(self, tick: int, index: int, duration: int) -> None:
        blocked: dict[tuple[int, int], bool] = {}
        for other in range(self.options.node_count):
            if other != index:
                blocked[(index, other)] = True
                blocked[(other, index)] = True
        self.network.blocked = blocked
        self.partition_until = tick + duration
        self.log.partitions += 1

    def _step_corruption(self, tick: int) -> None:
        faults = self.options.faults
        prng = self._corruption
        if faults.corruption == 0.0:
            return
        for node in self.nodes:
            if node.alive or prng.random() >= faults.corruption:
                continue
            if not self._within_budget(damaged=node.index):
                continue
            group, disk = list(node.disks.items())[prng.randrange(len(node.disks))]
            where = disk.corrupt_record(prng)
            if where is not None:
                self.damaged[node.index] = True
                self.log.corruptions += 1
                self._note(tick, f"corrupt node {node.index} group {group} {where}")

    def _step_disks(self, tick: int) -> None:
        faults = self.options.faults
        prng = self._disk
        if faults.slow_disk == 0.0:
            return
        for node in self.nodes:
            if tick >= node.disk_slow_until and prng.random() < faults.slow_disk:
                node.disk_slow_until = tick + prng.randint(10, self.options.disk.slow_ticks_max)
                self.log.slow_disks += 1
                self._note(tick, f"slow disk node {node.index} until {node.disk_slow_until}")
