"""The world: a discrete-event loop over virtual ticks that runs a whole cluster.

Purpose: put N simulated nodes (:mod:`sim.node`), the network (:mod:`sim.network`), the
clients (:mod:`sim.client`), the fault injector (:mod:`sim.faults`) and the checkers
(:mod:`sim.checkers`) together, and run them from one seed to a verdict.

Invariants:

1. One seed (plus the code) determines the run bit for bit: every random draw comes from a
   named stream of :mod:`sim.rng`, every collection is iterated in insertion or index
   order, and nothing reads a clock. The trace hash (BLAKE2b-128 over every delivered
   packet, every fault and the final state) is the proof: same seed, same hash.
2. Within a tick the order is fixed: faults, packet deliveries (by delivery tick, then
   send order), disk completions (node by node, group by group), replica ticks (node by
   node, group by group), clients (by index). Actions a step returns are executed before
   the next step; the packets they send leave at the current tick.
3. A run ends in exactly one verdict: ``ok``, ``correctness`` (a checker), ``liveness``
   (the healed cluster did not finish within ``ticks_heal_max``), or ``crash`` (an
   exception escaped the code under test: an assertion in consensus, the journal or the
   state machines).

Theory of operation: the fault phase runs ``ticks_fault`` ticks with faults on. Then the
world heals: every down node restarts, partitions and packet loss end, disks are fast,
and clients start nothing new. The healed phase runs until no client has a request
pending and every group has converged (every replica normal in one view, all at the
primary's commit, nothing uncommitted), or fails liveness after ``ticks_heal_max`` ticks.
Finally the end-of-run checkers run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
import traceback
from dataclasses import dataclass, field
from typing import Final, Literal

from broker.state.errors import StateError
from consensus.events import MessageReceived
from consensus.messages import MessageError, decode_message
from consensus.replica import Replica, Status
from sim.checkers import Checkers, CheckFailed
from sim.client import Client, Role
from sim.faults import Faults
from sim.network import (
    CLIENT_BASE,
    ClientReply,
    ClientRequest,
    ForwardedOutcome,
    ForwardedRequest,
    Network,
    Packet,
    ReadIndexAsk,
    ReadIndexReply,
    ReplicaFrame,
)
from sim.node import STREAM_ID, TOPIC_ID, Node
from sim.options import Options
from sim.rng import stream

Verdict = Literal["ok", "correctness", "liveness", "crash"]

EXIT_CODES: Final[dict[Verdict, int]] = {"ok": 0, "crash": 127, "liveness": 128, "correctness": 129}
"""Process exit codes of ``viewstream-sim`` for each verdict."""
CONVERGENCE_CHECK_TICKS: Final = 10
"""How often the healed phase checks for convergence (it is a full scan)."""
_PACKET: Final = struct.Struct("<QII")  # tick, source, target


@dataclass(slots=True)
class Result:
    """The verdict and summary of one run."""

    seed: int
    options: Options
    verdict: Verdict
    checker: str
    message: str
    trace_hash: str
    ticks: int
    stats: dict[str, int] = field(default_factory=dict)
    fault_events: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]


class World:
    """One simulated cluster and its workload; see the module docstring."""

    def __init__(
        self,
        options: Options,
        replica_class: type[Replica] = Replica,
        *,
        strict_polls: bool = True,
        node_class: type[Node] = Node,
    ) -> None:
        self.options = options
        seed = options.seed
        self.tick_now = 0
        self.network = Network(options.network, stream(seed, "network"))
        self.checkers = Checkers(strict_polls=strict_polls)
        workload = stream(seed, "workload")
        roles = [Role.OPERATOR]
        roles += [Role.PRODUCER] * options.workload.producers
        roles += [Role.CONSUMER] * options.workload.consumers
        self.clients: list[Client] = []
        self.client_endpoints: dict[int, int] = {}
        for index, role in enumerate(roles):
            client_id = workload.getrandbits(128) | 1  # never 0: that id is reserved
            client = Client(
                index=index,
                endpoint=CLIENT_BASE + index,
                client_id=client_id,
                role=role,
                options=options,
                prng=stream(seed, f"client.{index}"),
                reporter=self.checkers,
                # The first producers and consumers (index 0 is the operator).
                reuses_numbers=0 < index <= options.workload.number_reusers,
            )
            self.clients.append(client)
            self.client_endpoints[client_id] = client.endpoint
        self.nodes = [
            node_class(index, options, self.checkers, self.client_endpoints, replica_class)
            for index in range(options.node_count)
        ]
        self.faults = Faults(options, self.nodes, self.network)
        self._trace = hashlib.blake2b(digest_size=16, person=b"viewstream-trace")
        self._trace.update(repr(options).encode())
        self.healed_at = 0
        self.liveness_waived = False

    # Running -----------------------------------------------------------------------------

    def run(self) -> Result:
        """Run to a verdict; never raises for a failure of the code under test."""
        verdict: Verdict = "ok"
        checker = ""
        message = ""
        try:
            self._run()
        except CheckFailed as failure:
            verdict = failure.kind
            checker = failure.checker
            message = failure.message
        except Exception as error:  # the code under test crashed: that is a verdict too
            verdict = "crash"
            checker = type(error).__name__
            frames = traceback.extract_tb(error.__traceback__)
            where = frames[-1] if frames else None
            location = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
            message = f"{error!s}{location}".strip()
        self._trace.update(f"{verdict}:{checker}".encode())
        return Result(
            seed=self.options.seed,
            options=self.options,
            verdict=verdict,
            checker=checker,
            message=message,
            trace_hash=self._trace.hexdigest(),
            ticks=self.tick_now,
            stats=self._stats(),
            fault_events=list(self.faults.log.events),
        )

    def _run(self) -> None:
        options = self.options
        tick_last = options.ticks_fault + options.ticks_heal_max
        for tick in range(1, tick_last + 1):
            self.tick_now = tick
            if tick <= options.ticks_fault:
                for what, index in self.faults.step(tick):
                    self._trace.update(f"{tick}:{what}:{index}".encode())
                    self._apply_fault(tick, what, index)
            elif tick == options.ticks_fault + 1:
                self._heal(tick)
            self._step(tick)
            healed = tick > options.ticks_fault
            if healed and tick % CONVERGENCE_CHECK_TICKS == 0 and self._finished():
                self._trace.update(f"finished:{tick}".encode())
                hosted = [{g: h.replica for g, h in n.groups.items()} for n in self.nodes]
                self.checkers.check_final(hosted)
                return
        if self.faults.over_budget:
            # More replicas lost what they acknowledged than VSR tolerates: the group may
            # rightly refuse to make progress. Safety held throughout; say so and stop.
            self.liveness_waived = True
            self._trace.update(b"liveness-waived")
            return
        pending = [
            f"client {c.index} {c.pending.kind.value} request {c.pending.request.request}"
            for c in self.clients
            if c.pending is not None
        ]
        raise CheckFailed(
            "liveness",
            "liveness",
            f"not finished {options.ticks_heal_max} ticks after healing: "
            f"{'; '.join(pending) or 'no pending request'}; {self._convergence_report()}",
        )

    def _step(self, tick: int) -> None:
        for packet in self.network.deliver_due(tick):
            self._deliver(tick, packet)
        for node in self.nodes:
            if node.alive:
                node.complete_io(tick)
                self._flush_node(tick, node)
        for node in self.nodes:
            if node.alive:
                node.tick(tick)
                self._flush_node(tick, node)
        for client in self.clients:
            client.tick(tick)
            for target, request in client.outbox:
                self.network.send(tick, client.endpoint, target, request)
            client.outbox.clear()
            for target in client.closes:
                # A closed connection is noticed at once (its socket's end, not a packet).
                self._trace.update(f"{tick}:close:{client.index}:{target}".encode())
                node = self.nodes[target]
                if node.alive:
                    node.connection_closed(tick, client.client_id)
                    self._flush_node(tick, node)
            client.closes.clear()

    def _deliver(self, tick: int, packet: Packet) -> None:
        payload = packet.payload
        self._trace.update(_PACKET.pack(tick, packet.source, packet.target))
        if isinstance(payload, ReplicaFrame):
            self._trace.update(payload.frame)
        elif isinstance(payload, ClientRequest):
            self._trace.update(
                struct.pack("<QqI", payload.session, payload.request, payload.code)
                + payload.payload
            )
        elif isinstance(payload, ClientReply):
            self._trace.update(
                struct.pack("<qQI", payload.request, payload.op, payload.status) + payload.body
            )
        elif isinstance(payload, ForwardedRequest):
            self._trace.update(
                struct.pack(
                    "<QQqI", payload.token, payload.group, payload.request, payload.operation
                )
                + payload.body
            )
        elif isinstance(payload, ReadIndexAsk):
            self._trace.update(struct.pack("<QQQ", payload.token, payload.group, payload.view))
        elif isinstance(payload, ReadIndexReply):
            commit = -1 if payload.commit is None else payload.commit
            self._trace.update(struct.pack("<QBq", payload.token, payload.in_view, commit))
        else:
            self._trace.update(struct.pack("<Q", payload.token) + repr(payload.outcome).encode())
        if packet.target >= CLIENT_BASE:
            assert isinstance(payload, ClientReply)
            self.clients[packet.target - CLIENT_BASE].on_reply(tick, packet.source, payload)
            return
        node = self.nodes[packet.target]
        if not node.alive:
            return
        if isinstance(payload, ReplicaFrame):
            try:
                message = decode_message(payload.frame)
            except MessageError:
                return  # a bad frame costs its sender the message, never the node
            host = node.groups.get(payload.group)
            if host is None:
                return  # a group not created here yet, or removed: its sender retransmits
            node.step(tick, host, MessageReceived(message))
        elif isinstance(payload, ClientRequest):
            node.on_client_request(tick, packet.source, payload)
        elif isinstance(payload, ForwardedRequest):
            node.on_forwarded(tick, packet.source, payload)
        elif isinstance(payload, ReadIndexAsk):
            node.on_read_index_ask(packet.source, payload)
        elif isinstance(payload, ReadIndexReply):
            node.on_read_index_reply(tick, packet.source, payload)
        else:
            assert isinstance(payload, ForwardedOutcome)
            node.on_forwarded_outcome(packet.source, payload)
        self._flush_node(tick, node)

    def _flush_node(self, tick: int, node: Node) -> None:
        for target, payload in node.outbox:
            self.network.send(tick, node.index, target, payload)
        node.outbox.clear()

    # Faults and healing ------------------------------------------------------------------

    def _apply_fault(self, tick: int, what: str, index: int) -> None:
        node = self.nodes[index]
        if what == "restart":
            self._restart(tick, node)
        else:
            node.crash(power_loss=what == "power_loss")

    def _restart(self, tick: int, node: Node) -> None:
        self.checkers.on_restart(node.index)
        node.restart(tick)
        damaged = any(
            disk.journal.recovery.faulty_regions or disk.head_faulty()
            for disk in node.disks.values()
        )
        self.faults.note_restart(tick, node.index, journal_damaged=damaged)
        self._flush_node(tick, node)

    def _heal(self, tick: int) -> None:
        self.healed_at = tick
        self._trace.update(f"heal:{tick}".encode())
        self.network.heal()
        for node in self.nodes:
            node.disk_slow_until = 0
            if not node.alive:
                self._restart(tick, node)
        for client in self.clients:
            client.finishing = True

    # Scenarios ---------------------------------------------------------------------------

    def advance(self) -> int:
        """Run one more tick, outside ``run``'s fault schedule (a scenario drives the world
        itself and makes its own faults with the methods below); the tick run."""
        self.tick_now += 1
        self._step(self.tick_now)
        return self.tick_now

    def add_probe(self) -> Client:
        """A client that runs no script (``Role.PROBE``): a scenario sends its requests and
        reads its replies. Its client id comes from its own stream, as every client's."""
        index = len(self.clients)
        client_id = stream(self.options.seed, f"probe.{index}").getrandbits(128) | 1
        probe = Client(
            index=index,
            endpoint=CLIENT_BASE + index,
            client_id=client_id,
            role=Role.PROBE,
            options=self.options,
            prng=stream(self.options.seed, f"client.{index}"),
            reporter=self.checkers,
        )
        self.clients.append(probe)
        self.client_endpoints[client_id] = probe.endpoint  # the nodes share this table
        return probe

    def crash(self, index: int, *, power_loss: bool = False) -> None:
        """Crash node ``index`` now, as the fault phase does (a power loss also drops its
        unsynced writes)."""
        what = "power_loss" if power_loss else "crash"
        self._trace.update(f"{self.tick_now}:{what}:{index}".encode())
        self._apply_fault(self.tick_now, what, index)

    def restart(self, index: int) -> None:
        """Restart the down node ``index`` now, over what its disks hold."""
        self._trace.update(f"{self.tick_now}:restart:{index}".encode())
        self._apply_fault(self.tick_now, "restart", index)

    def cut(self, a: int, b: int) -> None:
        """Block the replica link between nodes ``a`` and ``b``, both ways, until ``mend``:
        replica frames and forwarded requests on it are dropped, also those in flight."""
        self.network.blocked[(a, b)] = True
        self.network.blocked[(b, a)] = True

    def mend(self, a: int, b: int) -> None:
        """Unblock the replica link between ``a`` and ``b`` (what it dropped stays lost)."""
        self.network.blocked.pop((a, b), None)
        self.network.blocked.pop((b, a), None)

    # Convergence -------------------------------------------------------------------------

    def _finished(self) -> bool:
        if any(client.pending is not None for client in self.clients):
            return False
        return self._convergence_report() == ""

    def _convergence_report(self) -> str:
        """Empty when every group has converged, else what is still off."""
        hosted = sorted({group for node in self.nodes for group in node.groups})
        for group in hosted:
            missing = [node.index for node in self.nodes if group not in node.groups]
            if missing:
                return f"group {group} not hosted on nodes {missing}"
            replicas = [node.groups[group].replica for node in self.nodes]
            views = [r.view for r in replicas]
            primaries = [r for r in replicas if r.status is Status.NORMAL and r.is_primary]
            if len(set(views)) != 1 or any(r.status is not Status.NORMAL for r in replicas):
                statuses = ", ".join(f"{r.status.value}@{r.view}" for r in replicas)
                return f"group {group} not in one normal view ({statuses})"
            if len(primaries) != 1:
                return f"group {group} has no primary"
            primary = primaries[0]
            commits = [r.commit_min for r in replicas]
            if primary.op != primary.commit_max or any(c != primary.commit_max for c in commits):
                return (
                    f"group {group} not caught up (op {primary.op}, commit "
                    f"{primary.commit_max}, replicas at {commits})"
                )
        return ""

    def _group_rebalances(self) -> int:
        """How many new generations the workload's consumer group went through (a member
        joined or left, or a member's session ended), from a live node's metadata: after
        healing every replica holds the same."""
        for node in self.nodes:
            if not node.alive:
                continue
            try:
                groups = node.metadata_state().consumer_groups(STREAM_ID, TOPIC_ID)
            except StateError:
                return 0  # the topic was never created
            return sum(group.generation - GENERATION_FIRST for group in groups)
        return 0

    def _stats(self) -> dict[str, int]:
        checkers = self.checkers
        log = self.faults.log
        views = [h.replica.view for n in self.nodes for h in n.groups.values()]
        return {
            "committed_ops": checkers.committed_ops(),
            "acked_sends": len(checkers.acks),
            "acked_messages": sum(len(a.message_ids) for a in checkers.acks),
            "polls": checkers.polls_checked,
            "messages_polled": checkers.messages_polled,
            "read_backs": checkers.read_backs_checked,
            "deleted_polls": checkers.deleted_polls_checked,
            "group_rebalances": self._group_rebalances(),
            "member_resyncs": checkers.resyncs,
            "group_handoffs": checkers.handoffs,
            "topics_created": checkers.metadata_model.topics_created,
            "topics_deleted": checkers.metadata_model.topics_deleted,
            "poll_gaps": checkers.poll_gaps,
            "retentions": sum(m.retentions for m in checkers.partition_models.values()),
            "purges": checkers.metadata_model.purges,
            "segments_deleted": sum(n.segments_deleted for n in self.nodes),
            "deletions_crashed": sum(n.deletions_crashed for n in self.nodes),
            "polls_past_retained": checkers.polls_past_retained,
            "retained_starts_checked": checkers.retained_starts_checked,
            "requests_completed": sum(c.completed for c in self.clients),
            "requests_abandoned": sum(c.abandoned for c in self.clients),
            "logins": checkers.metadata_model.logins,
            "logouts": checkers.metadata_model.logouts,
            "sessions_closed": checkers.metadata_model.sessions_closed,
            "connections_closed": sum(n.connections_closed for n in self.nodes),
            "stale_evictions": sum(n.stale_evictions for n in self.nodes),
            "forwarded_writes": sum(n.forwarded_writes for n in self.nodes),
            "backup_polls": sum(n.backup_polls for n in self.nodes),
            "long_polls": sum(c.long_polls for c in self.clients),
            "long_polls_woken": sum(n.long_polls_woken for n in self.nodes),
            "fresh_reads": sum(n.fresh_reads for n in self.nodes),
            "fresh_reads_checked": self.checkers.fresh_reads_checked,
            "view_max": max(views, default=0),
            "packets_sent": self.network.sent,
            "packets_lost": self.network.lost,
            "packets_duplicated": self.network.duplicated,
            "crashes": log.crashes,
            "outages": log.outages,
            "power_losses": log.power_losses,
            "restarts": log.restarts,
            "partitions": log.partitions,
            "corruptions": log.corruptions,
            "slow_disks": log.slow_disks,
            "healed_at": self.healed_at,
            "liveness_waived": int(self.liveness_waived),
        }


GENERATION_FIRST: Final = 1
"""A consumer group's generation when it is created (``broker.state.metadata``)."""


def run_seed(
    seed: int,
    *,
    faults: bool = True,
    replica_class: type[Replica] = Replica,
    node_class: type[Node] = Node,
    strict_polls: bool = True,
    lazy_ticks: bool = False,
) -> Result:
    """Run the simulation of ``seed`` (the one entry point the CLI and the tests use)."""
    options = dataclasses.replace(Options.from_seed(seed, faults=faults), lazy_ticks=lazy_ticks)
    world = World(options, replica_class, strict_polls=strict_polls, node_class=node_class)
    return world.run()
