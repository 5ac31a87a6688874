"""The simulated network: delay, loss, duplication, reordering and partitions.

Purpose: carry replica frames, forwarded requests and read-index asks between nodes, and
client requests and replies between clients and nodes, with the faults a real network
has, from one PRNG stream.

Invariants:

1. Every random draw happens at send time, in send order, from the network's own stream;
   delivery order is a pure function of those draws: ``(deliver_tick, sequence)``.
2. Reordering is not a separate fault: two packets on one link with independent delays
   arrive in either order.
3. Partitions block the links between nodes only (as in the VOPR): replica frames,
   forwarded requests and read-index asks; client links suffer delay, loss and
   duplication. A blocked link drops packets at delivery time, so a partition also
   catches packets already in flight.
4. A packet to a node that is down when it arrives is dropped.

Theory of operation: a min-heap of packets keyed by delivery tick and a send counter.
``deliver_due(tick)`` pops every packet due at or before ``tick``. Endpoints are ints:
nodes ``0..node_count-1``, client ``k`` is ``CLIENT_BASE + k``.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Final

from broker.core.groups import Outcome
from sdk.wire import HEADER_SIZE, RequestHeader
from sdk.wire.codes import Operation, operation_for_code
from sim.options import NetworkOptions

CLIENT_BASE: Final = 1_000
"""Endpoint number of client 0; nodes are below it."""
PACKETS_IN_FLIGHT_MAX: Final = 1_000_000
"""A run that piles up this many packets is broken; assert rather than eat the memory."""


@dataclass(frozen=True, slots=True)
class ReplicaFrame:
    """An encoded consensus message of ``group``."""

    group: int
    frame: bytes


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """A client request: the Iggy command and its wire payload, with the header fields
    that matter (client id, session, request number, command code) as data; the node
    reads it as the frame it stands for (:meth:`frame`)."""

    client_id: int
    session: int
    request: int
    code: int
    payload: bytes

    @property
    def operation(self) -> int:
        """The request's operation; a node-internal command (code 0, the operator's
        bootstrap) carries its own (a state machine's) in the payload's first four bytes."""
        if self.code == 0:
            return int.from_bytes(self.payload[:4], "little")
        return int(operation_for_code(self.code))

    @property
    def wire_request(self) -> int:
        """The request number the frame carries: 0 for a register, as on the wire."""
        return 0 if self.operation == Operation.REGISTER else self.request

    def frame(self) -> bytes:
        """The request as the client's connection carries it: an Iggy 0.9 request frame
        (its body checksum left unstamped, as the partition plane leaves it). A login's
        register carries session 0 and request 0 on the wire, whatever number the client
        keeps for it: the node's reply is matched to it by the connection, as here by
        ``request``."""
        operation = operation_for_code(self.code)
        register = operation is Operation.REGISTER
        size = HEADER_SIZE + len(self.payload)
        header = RequestHeader(
            size=size,
            client=self.client_id,
            request=self.wire_request,
            session=0 if register else self.session,
            operation=operation,
            code=self.code if operation is Operation.NON_REPLICATED else 0,
        )
        return header.pack() + self.payload


@dataclass(frozen=True, slots=True)
class ClientReply:
    """A node's answer to a client request.

    ``op`` is the committed op for replicated requests (0 for reads and admission
    errors), ``status`` a non-zero Iggy error code when the request failed, ``error`` a
    consensus session error name.
    """

    client_id: int
    request: int
    op: int
    status: int
    body: bytes
    error: str = ""
    #: The identity digest of the request answered (``broker.core.identity``), empty when
    #: the node answered before it computed one. A real reply goes back on the connection
    #: of its request; the simulated network reorders and duplicates, so a reply names its
    #: request by identity, not only by number.
    request_checksum: bytes = b""
    #: Polls only: the oldest offset the serving replica could still return (its retained
    #: start). Observed for the checkers; a real reply carries no such field.
    first_offset: int = 0
    #: The primary the client should send its next write for the group to, as the
    #: header's ``replica`` field of a real reply: for a committed write the primary of
    #: the view it committed in (not the node that answered, when a backup forwarded it),
    #: for a refusal the primary of the group's view at the node that refused; -1 when
    #: none.
    primary: int = -1
    #: The answering node's incarnation. A client's connection to a node lasts as long as
    #: the node's process: a reply with the incarnation of an earlier one came on the same
    #: connection, and what the node remembers of a connection (what it was told) is gone
    #: with a restart. Observed for the checkers; a real client sees its socket close.
    incarnation: int = 0
    #: The consensus group the reply is of: the group whose op ``op`` is, or the
    #: partition group that served a poll. Observed for the checkers.
    group: int = 0
    #: Reads only: the op the serving replica had applied when it read. Observed for the
    #: checkers; a real reply carries no such field.
    read_op: int = 0


@dataclass(frozen=True, slots=True)
class ForwardedRequest:
    """A client request a backup hands to its group's primary's node (the replica bus's
    forward frame): the request's identity, body and the backup's timestamp."""

    token: int
    group: int
    client_id: int
    session: int
    request: int
    operation: int
    body: bytes
    timestamp_us: int
    request_checksum: bytes


@dataclass(frozen=True, slots=True)
class ForwardedOutcome:
    """The primary's node's outcome of a :class:`ForwardedRequest`, under its token."""

    token: int
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class ReadIndexAsk:
    """A backup's read-index ask for ``group`` in ``view`` (the replica bus's frame)."""

    token: int
    group: int
    view: int


@dataclass(frozen=True, slots=True)
class ReadIndexReply:
    """The answer to a :class:`ReadIndexAsk` (``broker.core.reads.read_index_answer``)."""

    token: int
    in_view: bool
    commit: int | None


Payload = (
    ReplicaFrame
    | ClientRequest
    | ClientReply
    | ForwardedRequest
    | ForwardedOutcome
    | ReadIndexAsk
    | ReadIndexReply
)


@dataclass(order=True, slots=True)
class Packet:
    deliver_tick: int
    sequence: int
    source: int = field(compare=False)
    target: int = field(compare=False)
    payload: Payload = field(compare=False)


class Network:
    """Links between every pair of endpoints; see the module docstring."""

    def __init__(self, options: NetworkOptions, prng: random.Random) -> None:
        self.options = options
        self._prng = prng
        self._heap: list[Packet] = []
        self._sequence = 0
        #: Directed replica links that drop everything: blocked[(source, target)].
        self.blocked: dict[tuple[int, int], bool] = {}
        self.faults_enabled = True
        self.sent = 0
        self.lost = 0
        self.duplicated = 0

    def _delay(self) -> int:
        extra = self._prng.expovariate(1.0 / self.options.delay_mean_ticks)
        return self.options.delay_min_ticks + int(extra)

    def send(self, tick: int, source: int, target: int, payload: Payload) -> None:
        assert source != target
        self.sent += 1
        copies = 1
        if self.faults_enabled:
            if self._prng.random() < self.options.loss:
                self.lost += 1
                return
            if self._prng.random() < self.options.duplicate:
                self.duplicated += 1
                copies = 2
        for _ in range(copies):
            # At least one tick: a message is never handled in the step that sent it.
            deliver = tick + 1 + self._delay()
            self._sequence += 1
            heapq.heappush(self._heap, Packet(deliver, self._sequence, source, target, payload))
        assert len(self._heap) < PACKETS_IN_FLIGHT_MAX

    def deliver_due(self, tick: int) -> list[Packet]:
        """Every packet due by ``tick`` that no partition blocks, in delivery order."""
        due: list[Packet] = []
        while self._heap and self._heap[0].deliver_tick <= tick:
            packet = heapq.heappop(self._heap)
            if self.blocked.get((packet.source, packet.target), False):
                continue
            due.append(packet)
        return due

    def in_flight(self) -> int:
        return len(self._heap)

    def heal(self) -> None:
        """No partitions, no loss, no duplication from now on (delays stay)."""
        self.blocked = {}
        self.faults_enabled = False
