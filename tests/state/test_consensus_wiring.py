"""The metadata machine under the real consensus replica: requests in, Iggy replies out.

A minimal host executes the replica's actions synchronously over a loss-free in-memory
network; the point is the contract between ``consensus`` and ``broker.state``, not
consensus faults (``tests/consensus`` covers those).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from broker.state.admission import authenticate
from broker.state.codec import encode_command
from broker.state.credentials import hash_password
from broker.state.metadata import (
    CreateRootUser,
    CreateStream,
    CreateTopic,
    MetadataCommand,
    Register,
)
from broker.state.metadata_machine import MetadataMachine
from consensus.events import (
    Action,
    AppendToJournal,
    Event,
    MessageReceived,
    PrepareSynced,
    PrepareWritten,
    ReplyToClient,
    SendToReplica,
    SyncJournal,
    Ticked,
    TruncateJournal,
    WriteCheckpoint,
    WriteSuperblock,
)
from consensus.messages import decode_message, encode_message
from consensus.replica import Replica
from consensus.testing import MemoryLog, client_request
from sdk import wire
from sdk.wire.codes import Operation


@dataclass
class Host:
    replica_count: int
    logs: list[MemoryLog] = field(default_factory=list)
    machines: list[MetadataMachine] = field(default_factory=list)
    replicas: list[Replica] = field(default_factory=list)
    replies: list[ReplyToClient] = field(default_factory=list)
    queue: list[tuple[int, Event]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for index in range(self.replica_count):
            self.logs.append(MemoryLog())
            self.machines.append(MetadataMachine())
            self.replicas.append(
                Replica(
                    0,
                    index,
                    self.replica_count,
                    self.logs[index],
                    self.machines[index],
                    random.Random(index),
                    register_operation=Operation.REGISTER,
                )
            )

    def _execute(self, index: int, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, SendToReplica):
                frame = encode_message(action.message, sender=index)
                self.queue.append((action.replica, MessageReceived(decode_message(frame))))
            elif isinstance(action, AppendToJournal):
                self.logs[index].append(action.prepare)
                prepare = action.prepare
                self.queue.append((index, PrepareWritten(prepare.op, prepare.checksum)))
            elif isinstance(action, SyncJournal):
                self.queue.append((index, PrepareSynced(action.op, action.checksum)))
            elif isinstance(action, TruncateJournal):
                self.logs[index].truncate(action.after_op)
            elif isinstance(action, WriteCheckpoint):
                self.logs[index].checkpoint(action.op)
            elif isinstance(action, ReplyToClient):
                self.replies.append(action)
            else:
                assert isinstance(action, WriteSuperblock)

    def settle(self) -> None:
        while self.queue:
            index, event = self.queue.pop(0)
            self._execute(index, self.replicas[index].step(event))

    def request(
        self, client_id: int, session: int, request: int, command: MetadataCommand
    ) -> ReplyToClient:
        operation, body = encode_command(command)
        # The primary of view 0 in group 0 is replica 0.
        event = client_request(client_id, session, request, operation, body, 1_000_000 * request)
        self._execute(0, self.replicas[0].step(event))
        self.settle()
        found = [r for r in self.replies if r.client_id == client_id and r.request == request]
        assert len(found) == 1, found
        return found[0]


@pytest.mark.parametrize("replica_count", [1, 3])
def test_metadata_group_answers_iggy_replies_through_consensus(replica_count: int) -> None:
    host = Host(replica_count)
    # Consensus opens a client-table entry for any committed register, so a bootstrap
    # client can carry the root user's creation; the state machine runs it as the system.
    bootstrap = host.request(0xB007, 0, 0, Register(0xB007, 0))
    assert bootstrap.reply == wire.result_rejected(42)  # no users yet: invalid credentials
    root_hash = hash_password("secret", b"salt", n=16, r=1, p=1)
    created = host.request(0xB007, bootstrap.op, 1, CreateRootUser("iggy", root_hash))
    root = wire.UserDetails.decode(wire.split_result(Operation.CREATE_USER, created.reply))
    assert root.user.username == "iggy"
    assert root.permissions is not None and root.permissions.global_.manage_users

    register = authenticate(host.machines[0].state, 0xC11E, "iggy", "secret")
    login = host.request(0xC11E, 0, 0, register)
    reply = wire.LoginRegisterReply.decode(wire.split_result(Operation.REGISTER, login.reply))
    assert reply.session == login.op
    session = reply.session

    stream = host.request(0xC11E, session, 1, CreateStream("orders"))
    details = wire.StreamDetails.decode(wire.split_result(Operation.CREATE_STREAM, stream.reply))
    assert (details.stream.id, details.stream.name) == (0, "orders")
    topic = host.request(0xC11E, session, 2, CreateTopic("orders", "events", 3))
    assert (
        wire.TopicDetails.decode(
            wire.split_result(Operation.CREATE_TOPIC, topic.reply)
        ).topic.partitions_count
        == 3
    )

    # A retry of the latest request gets the cached reply and is not applied twice.
    operation, body = encode_command(CreateTopic("orders", "events", 3))
    retry = client_request(0xC11E, session, 2, operation, body, 5)
    host._execute(0, host.replicas[0].step(retry))
    host.settle()
    retried = [r for r in host.replies if r.client_id == 0xC11E and r.request == 2]
    assert [r.reply for r in retried] == [topic.reply, topic.reply]
    assert len(host.machines[0].state.topics("orders")) == 1

    # Every replica applies the same ops into the same state (commit heartbeats carry the
    # commit point to the backups once the primary is idle).
    for _ in range(500):
        if len({m.snapshot() for m in host.machines}) == 1:
            break
        for index in range(replica_count):
            host._execute(index, host.replicas[index].step(Ticked()))
        host.settle()
    assert len({m.snapshot() for m in host.machines}) == 1
    assert [s.name for s in host.machines[-1].state.streams()] == ["orders"]
