"""A synchronous harness for the sans-IO core: run a step, answer its exchanges from a
script, record every action, and move a fake clock.

No sockets, no threads: ``drive(core, step, server)`` sends each ``Exchange`` to
``server(sent)``, which returns reply bytes or a ``TransportError`` to throw in.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from sdk._protocol import (
    Action,
    ClientCore,
    Disconnect,
    Exchange,
    ExchangeTimedOut,
    Sleep,
    Step,
    TransportError,
)
from sdk.connection_string import ClientConfig, NodeAddress
from sdk.wire import (
    PROTOCOL_VERSION,
    ClusterMetadata,
    ClusterNode,
    ClusterNodeRole,
    ClusterNodeStatus,
    Command,
    CommandCode,
    Empty,
    LoginRegisterReply,
    PartitionId,
    PollMessages,
    ReplyPayload,
    RequestHeader,
    RequestPayload,
    SendMessages,
    build_eviction_frame,
    build_reply_frame,
    decode_frame,
    encode_reply_body,
    read_request,
)

_T = TypeVar("_T")

NODE_A = NodeAddress("10.0.0.1", 8090)
NODE_B = NodeAddress("10.0.0.2", 8090)
NODE_C = NodeAddress("10.0.0.3", 8090)
SESSION = 42


class FakeClock:
    """Monotonic seconds that only move when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Sent:
    """One exchange the core asked for."""

    address: NodeAddress
    header: RequestHeader
    code: CommandCode
    payload: RequestPayload
    frame: bytes


@dataclass
class Trace:
    """Everything a step did, in order."""

    actions: list[Action] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)

    @property
    def sleeps(self) -> list[float]:
        return [a.seconds for a in self.actions if isinstance(a, Sleep)]

    @property
    def disconnects(self) -> list[NodeAddress]:
        return [a.address for a in self.actions if isinstance(a, Disconnect)]

    def codes(self) -> list[CommandCode]:
        return [s.code for s in self.sent]


Server = Callable[[Sent], bytes | bytearray | TransportError]


def make_core(
    *,
    seeds: tuple[NodeAddress, ...] = (NODE_A,),
    credentials: bool = True,
    seed: int = 1,
    clock: FakeClock | None = None,
    **settings: object,
) -> tuple[ClientCore, FakeClock]:
    clock = clock or FakeClock()
    config = ClientConfig(
        seeds=seeds,
        username="iggy" if credentials else None,
        password="iggy" if credentials else None,
        request_timeout_s=1.0,
        retry_deadline_s=10.0,
        backoff_min_s=0.05,
        backoff_max_s=0.4,
    )
    if settings:
        config = config.replace(**settings)
    core = ClientCore(
        config,
        rng=random.Random(seed),
        clock=clock,
        wall_clock_us=lambda: 1_700_000_000_000_000,
    )
    return core, clock


def drive(
    core: ClientCore,
    step: Step[_T],
    server: Server,
    *,
    clock: FakeClock | None = None,
    trace: Trace | None = None,
    exchange_cost_s: float = 0.001,
) -> _T:
    """Run ``step`` to completion against ``server``."""
    trace = trace if trace is not None else Trace()
    reply: object = None
    failure: Exception | None = None
    for _ in range(10_000):
        try:
            action = step.send(reply) if failure is None else step.throw(failure)  # type: ignore[arg-type]
        except StopIteration as stop:
            result: _T = stop.value
            return result
        reply, failure = None, None
        trace.actions.append(action)
        if isinstance(action, Sleep):
            assert action.seconds > 0
            if clock is not None:
                clock.now += action.seconds
        elif isinstance(action, Exchange):
            header, code, payload = read_request(decode_frame(action.frame))
            sent = Sent(action.address, header, code, payload, bytes(action.frame))
            trace.sent.append(sent)
            if clock is not None:
                clock.now += exchange_cost_s
            answer = server(sent)
            if isinstance(answer, TransportError):
                if clock is not None and isinstance(answer, ExchangeTimedOut):
                    clock.now += action.timeout_s
                failure = answer
            else:
                reply = decode_frame(bytes(answer))
    raise AssertionError("step did not finish within 10,000 actions")


def send_partition(sent: Sent) -> int:
    """The partition id of a SEND_MESSAGES request."""
    assert isinstance(sent.payload, SendMessages)
    assert isinstance(sent.payload.partitioning, PartitionId)
    return sent.payload.partitioning.partition_id


def poll_partition(sent: Sent) -> int | None:
    """The partition id of a POLL_MESSAGES request."""
    assert isinstance(sent.payload, PollMessages)
    return sent.payload.partition_id


# --- reply builders ---------------------------------------------------------------------


def ok(
    sent: Sent, payload: ReplyPayload | None = None, *, view: int = 0, replica: int = 0
) -> bytes:
    body = b"" if payload is None else encode_reply_body(sent.header.operation, payload)
    if payload is None and sent.header.operation.is_result_framed:
        body = encode_reply_body(sent.header.operation, Empty())
    return bytes(build_reply_frame(sent.header, body, view=view, replica=replica))


def raw(sent: Sent, body: bytes) -> bytes:
    return bytes(build_reply_frame(sent.header, body))


def status(sent: Sent, code: int, *, view: int = 0, replica: int = 0) -> bytes:
    return bytes(build_reply_frame(sent.header, status=code, view=view, replica=replica))


def evict(sent: Sent, reason: object) -> bytes:
    from sdk.wire import EvictionReason

    assert isinstance(reason, EvictionReason)
    return build_eviction_frame(sent.header.client, reason)


def login_reply(sent: Sent, session: int = SESSION) -> bytes:
    return ok(sent, LoginRegisterReply(1, session, PROTOCOL_VERSION, "0.9.0"))


def metadata(nodes: list[NodeAddress], leader: int) -> ClusterMetadata:
    return ClusterMetadata(
        "test",
        tuple(
            ClusterNode(
                f"n{i}",
                node.host,
                node.port,
                0,
                0,
                0,
                ClusterNodeRole.LEADER if i == leader else ClusterNodeRole.FOLLOWER,
                ClusterNodeStatus.HEALTHY,
            )
            for i, node in enumerate(nodes)
        ),
    )


class Scripted:
    """A server built from per-command handlers, with login and metadata answered by
    default (one node, the first seed, leading)."""

    def __init__(
        self,
        handlers: dict[CommandCode, Callable[[Sent], bytes | bytearray | TransportError]]
        | None = None,
        *,
        roster: list[NodeAddress] | None = None,
        leader: int = 0,
    ) -> None:
        self.handlers = dict(handlers or {})
        self.roster = roster or [NODE_A]
        self.leader = leader
        self.sessions = iter(range(SESSION, SESSION + 1000))

    def __call__(self, sent: Sent) -> bytes | bytearray | TransportError:
        answer = self._answer(sent)
        if isinstance(answer, TransportError):
            return answer
        return self._stamp_replica(sent.address, answer)

    def _answer(self, sent: Sent) -> bytes | bytearray | TransportError:
        handler = self.handlers.get(sent.code)
        if handler is not None:
            return handler(sent)
        if sent.code is CommandCode.LOGIN_REGISTER:
            return login_reply(sent, next(self.sessions))
        if sent.code is CommandCode.GET_CLUSTER_METADATA:
            return ok(sent, metadata(self.roster, self.leader))
        return ok(sent)

    def _stamp_replica(self, address: NodeAddress, answer: bytes | bytearray) -> bytes:
        """A node answers with its own replica index (its place in the roster), unless a
        handler chose another one (a backup answering with its primary's reply)."""
        frame = decode_frame(bytes(answer))
        if frame.command is not Command.REPLY or address not in self.roster:
            return bytes(answer)
        header = frame.reply_header()
        if header.replica != 0:
            return bytes(answer)
        stamped = bytearray(answer)
        replace(header, replica=self.roster.index(address)).pack_into(stamped)
        return bytes(stamped)
