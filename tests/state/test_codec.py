"""Metadata prepare bodies: round trips, canonical bytes, strict decoding."""

from __future__ import annotations

import cbor2
import pytest
from hypothesis import given, settings

from broker.state.codec import (
    COMMAND_BY_OPERATION,
    SYSTEM_OPERATIONS,
    BodyError,
    decode_command,
    encode_command,
)
from broker.state.metadata import (
    CreateRootUser,
    CreateStream,
    CreateUser,
    EndSession,
    MetadataCommand,
    Register,
    UpdatePermissions,
)
from broker.state.permissions import GlobalPermissions, Permissions, StreamPermissions
from sdk.wire.codes import Operation
from tests.state.helpers import PASSWORD
from tests.state.strategies import commands


@settings(max_examples=300, deadline=None)
@given(commands)
def test_every_command_round_trips_with_canonical_bytes(command: MetadataCommand) -> None:
    operation, body = encode_command(command)
    assert decode_command(operation, body) == command
    assert cbor2.dumps(cbor2.loads(body), canonical=True) == body
    assert encode_command(decode_command(operation, body)) == (operation, body)


def test_system_commands_travel_as_internal_operations() -> None:
    for command in (CreateRootUser("iggy", PASSWORD), EndSession(3)):
        operation, _ = encode_command(command)
        assert 64 <= operation < 128 and operation in SYSTEM_OPERATIONS
    assert encode_command(Register(1, 0))[0] == Operation.REGISTER
    assert encode_command(CreateStream("s"))[0] == Operation.CREATE_STREAM
    assert all(op not in SYSTEM_OPERATIONS for op in COMMAND_BY_OPERATION if op >= 128)


def test_permissions_and_hashes_survive_the_body() -> None:
    permissions = Permissions(
        GlobalPermissions(read_streams=True), (StreamPermissions(3, send_messages=True),)
    )
    command = CreateUser("alice", PASSWORD, permissions=permissions)
    assert decode_command(*encode_command(command)) == command
    assert decode_command(*encode_command(UpdatePermissions(1, None))) == UpdatePermissions(1, None)


@pytest.mark.parametrize(
    ("operation", "body"),
    [
        (2, cbor2.dumps(["x"])),  # NON_REPLICATED carries no command
        (160, cbor2.dumps([])),  # a partition operation
        (Operation.CREATE_STREAM, b"\xff"),
        (Operation.CREATE_STREAM, cbor2.dumps(["a", "b"])),
        (Operation.CREATE_STREAM, cbor2.dumps([7])),
        (Operation.CREATE_STREAM, cbor2.dumps({"name": "a"})),
        (Operation.DELETE_STREAM, cbor2.dumps([-1])),
        (Operation.DELETE_STREAM, cbor2.dumps([True])),
        (Operation.CREATE_TOPIC, cbor2.dumps([0, "t", 1, {"nope": 1}])),
        (Operation.CREATE_TOPIC, cbor2.dumps([0, "t", 1, {"durability": "sometimes"}])),
        (Operation.CREATE_USER, cbor2.dumps(["abc", [b"s", b"h", 2, 1], 1, None])),
        (Operation.UPDATE_PERMISSIONS, cbor2.dumps([1, [[True], []]])),
    ],
)
def test_malformed_bodies_are_refused(operation: int, body: bytes) -> None:
    with pytest.raises(BodyError):
        decode_command(operation, body)
