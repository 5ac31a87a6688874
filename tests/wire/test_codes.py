"""Command codes, operations and protocol versions against the captured protocol table."""

from __future__ import annotations

import pytest

from sdk.wire import (
    COMMANDS,
    PROTOCOL_VERSION,
    PROTOCOL_VERSION_MIN,
    CommandCode,
    Operation,
    code_for_operation,
    format_protocol_version,
    is_protocol_compatible,
    operation_for_code,
    pack_protocol_version,
    unpack_protocol_version,
)

# docs/protocol.md section 2: code, operation byte, reply result-framed.
PROTOCOL_TABLE = [
    (1, 2, False),
    (10, 2, False),
    (11, 2, False),
    (12, 2, False),
    (13, 2, False),
    (14, 2, False),
    (20, 2, False),
    (21, 2, False),
    (22, 2, False),
    (31, 2, False),
    (32, 2, False),
    (33, 141, True),
    (34, 143, True),
    (35, 142, True),
    (36, 145, True),
    (37, 144, True),
    (39, 3, False),
    (40, 1, True),
    (41, 2, False),
    (42, 146, True),
    (43, 147, True),
    (45, 1, True),
    (100, 2, False),
    (101, 160, False),
    (103, 2, False),
    (104, 2, False),
    (120, 2, False),
    (121, 161, True),
    (122, 162, True),
    (123, 2, False),
    (200, 2, False),
    (201, 2, False),
    (202, 128, True),
    (204, 129, True),
    (203, 130, True),
    (205, 131, True),
    (300, 2, False),
    (301, 2, False),
    (302, 132, True),
    (304, 133, True),
    (303, 134, True),
    (305, 135, True),
    (402, 136, True),
    (403, 137, True),
    (503, 138, False),
    (600, 2, False),
    (601, 2, False),
    (602, 139, True),
    (603, 140, True),
    (604, 148, True),
    (605, 149, True),
    (606, 2, False),
]


def test_the_supported_commands_are_exactly_the_protocol_table() -> None:
    assert sorted(COMMANDS) == sorted(code for code, _, _ in PROTOCOL_TABLE)


@pytest.mark.parametrize(("code", "operation", "framed"), PROTOCOL_TABLE)
def test_command_travels_as_the_documented_operation(
    code: int, operation: int, framed: bool
) -> None:
    assert operation_for_code(code) == operation
    # Register is framed only when its reply is non-empty, which the operation
    # alone cannot tell; every other row is decided by the operation.
    if operation != Operation.REGISTER:
        assert Operation(operation).is_result_framed is framed


def test_code_for_operation_inverts_every_replicated_command() -> None:
    for code in CommandCode:
        operation = operation_for_code(code)
        if operation in (Operation.NON_REPLICATED, Operation.REGISTER):
            assert code_for_operation(operation) is None
        else:
            assert code_for_operation(operation) == code


def test_unknown_codes_travel_as_non_replicated() -> None:
    assert operation_for_code(9999) is Operation.NON_REPLICATED
    assert operation_for_code(13) is Operation.NON_REPLICATED  # describe options


def test_operation_planes() -> None:
    assert Operation.CREATE_STREAM.is_metadata and not Operation.CREATE_STREAM.is_partition
    assert Operation.SEND_MESSAGES.is_partition and not Operation.SEND_MESSAGES.is_metadata
    assert not Operation.DELETE_SEGMENTS.is_metadata and not Operation.DELETE_SEGMENTS.is_partition
    assert (
        Operation.TRUNCATE_PARTITION.is_internal
        and not Operation.TRUNCATE_PARTITION.is_client_allowed
    )
    assert Operation.REGISTER.is_metadata_plane and Operation.LOGOUT.is_metadata_plane
    assert not Operation.RESERVED.is_client_allowed


def test_protocol_version_packs_as_the_sdk_sends_it() -> None:
    # The official SDK's login starts with 00 2c 00 00: 0.11.0 packed.
    assert PROTOCOL_VERSION == pack_protocol_version(0, 11, 0) == 0x2C00
    assert PROTOCOL_VERSION.to_bytes(4, "little") == bytes.fromhex("002c0000")
    assert unpack_protocol_version(pack_protocol_version(1, 1023, 7)) == (1, 1023, 7)
    assert format_protocol_version(PROTOCOL_VERSION) == "0.11.0"
    assert PROTOCOL_VERSION_MIN == PROTOCOL_VERSION
    with pytest.raises(ValueError):
        pack_protocol_version(0, 1024, 0)


@pytest.mark.parametrize(
    ("client", "accepted"),
    [
        ((0, 11, 0), True),
        ((0, 11, 9), True),  # any patch of the server's minor
        ((0, 10, 5), False),  # below the minimum
        ((0, 12, 0), False),  # a newer minor is a flag day
        ((1, 0, 0), False),
    ],
)
def test_protocol_compatibility_window(client: tuple[int, int, int], accepted: bool) -> None:
    assert is_protocol_compatible(pack_protocol_version(*client)) is accepted
