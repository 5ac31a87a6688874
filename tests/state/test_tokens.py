"""Personal access tokens in the metadata state: create, list, delete, expire, log in."""

from __future__ import annotations

import cbor2
import pytest

from broker.state.admission import authenticate_token, create_token_command, metadata_command
from broker.state.codec import decode_command, encode_command
from broker.state.credentials import token_hash
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import (
    TOKENS_PER_USER_MAX,
    U64_MAX,
    CreatePersonalAccessToken,
    DeletePersonalAccessToken,
    DeleteUser,
    Done,
    ExpireTokens,
    Register,
    Rejected,
    TokenCreated,
    TokenInfo,
    UpdateUser,
    UserStatus,
)
from broker.state.metadata_machine import MetadataMachine, metadata_reply
from broker.state.snapshot import SnapshotError, restore_state, snapshot_state
from sdk import wire
from sdk.wire.codes import CommandCode, Operation
from tests.state.helpers import Driver, driver_with_root

HASH_A = token_hash("token-a")
HASH_B = token_hash("token-b")


def _expiry_min(d: Driver) -> int | None:
    """The earliest expiry, read afresh (a call, so no narrowing carries over)."""
    return d.state.token_expiry_min_us


def _alice(d: Driver) -> tuple[int, int]:
    """Alice (no permissions at all) and a session of hers."""
    alice = d.add_user("alice", None)
    return alice, d.login(0xA11CE, alice)


def test_create_token_given_an_expiry_stores_its_hash_and_expiry_from_the_op_timestamp() -> None:
    d = driver_with_root()
    alice, session = _alice(d)
    result = d.apply(CreatePersonalAccessToken("ci-token", 500, HASH_A), session)
    assert result == TokenCreated(HASH_A)
    timestamp = 1_000 + 10 * d.op
    assert d.state.personal_access_tokens(session) == (TokenInfo("ci-token", timestamp + 500),)
    assert d.state.token_user(HASH_A, timestamp + 499) == alice
    assert d.state.token_user(HASH_A, timestamp + 500) is None  # expired at its instant
    assert d.state.token_expiry_min_us == timestamp + 500


@pytest.mark.parametrize("expiry", [0, U64_MAX])
def test_create_token_given_default_or_never_never_expires(expiry: int) -> None:
    d = driver_with_root()
    alice, session = _alice(d)
    d.apply(CreatePersonalAccessToken("ci-token", expiry, HASH_A), session)
    assert d.state.personal_access_tokens(session) == (TokenInfo("ci-token", None),)
    assert d.state.token_user(HASH_A, U64_MAX) == alice
    assert d.state.token_expiry_min_us is None


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("ab", False),
        ("abc", True),
        ("a" * 30, True),
        ("a" * 31, False),
        ("é" * 15, True),
        ("é" * 16, False),  # 16 two-byte characters are 32 bytes: Iggy counts bytes
    ],
)
def test_create_token_given_a_name_checks_iggys_bounds_in_bytes(name: str, valid: bool) -> None:
    d = driver_with_root()
    _, session = _alice(d)
    result = d.apply(CreatePersonalAccessToken(name, 0, HASH_A), session)
    if valid:
        assert result == TokenCreated(HASH_A)
    else:
        assert result == Rejected(ErrorCode.INVALID_PERSONAL_ACCESS_TOKEN_NAME)


def test_create_token_given_a_taken_name_is_refused_for_that_user_only() -> None:
    d = driver_with_root()
    _, session = _alice(d)
    d.apply(CreatePersonalAccessToken("ci-token", 0, HASH_A), session)
    taken = d.apply(CreatePersonalAccessToken("ci-token", 0, HASH_B), session)
    assert taken == Rejected(ErrorCode.PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS)
    assert d.as_root(CreatePersonalAccessToken("ci-token", 0, HASH_B)) == TokenCreated(HASH_B)


def test_create_token_given_the_user_at_its_limit_is_refused_before_the_name() -> None:
    d = driver_with_root()
    _, session = _alice(d)
    for i in range(TOKENS_PER_USER_MAX):
        result = d.apply(CreatePersonalAccessToken(f"token-{i}", 0, token_hash(str(i))), session)
        assert isinstance(result, TokenCreated)
    beyond = d.apply(CreatePersonalAccessToken("one-more", 0, HASH_A), session)
    assert beyond == Rejected(ErrorCode.PERSONAL_ACCESS_TOKENS_LIMIT_REACHED)
    duplicate = d.apply(CreatePersonalAccessToken("token-0", 0, HASH_A), session)
    assert duplicate == Rejected(ErrorCode.PERSONAL_ACCESS_TOKENS_LIMIT_REACHED)
    assert d.as_root(CreatePersonalAccessToken("one-more", 0, HASH_A)) == TokenCreated(HASH_A)


def test_create_token_given_an_expiry_beyond_u64_is_refused_as_invalid_expiry() -> None:
    d = driver_with_root()
    _, session = _alice(d)
    result = d.apply(CreatePersonalAccessToken("ci-token", U64_MAX - 1, HASH_A), session)
    assert result == Rejected(ErrorCode.INVALID_PERSONAL_ACCESS_TOKEN_EXPIRY)
    assert d.state.personal_access_tokens(session) == ()


def test_token_commands_given_no_session_or_an_inactive_user_are_refused() -> None:
    d = driver_with_root()
    alice, session = _alice(d)
    create = CreatePersonalAccessToken("ci-token", 0, HASH_A)
    assert d.apply(create, None) == Rejected(ErrorCode.UNAUTHENTICATED)
    assert d.apply(create, 999) == Rejected(ErrorCode.UNAUTHENTICATED)
    assert d.as_root(UpdateUser(alice, status=UserStatus.INACTIVE)) == Done()
    assert d.state.authorize(create, session) == ErrorCode.USER_INACTIVE
    assert d.apply(create, session) == Rejected(ErrorCode.USER_INACTIVE)
    assert d.state.authorize(create, d.root_session) is None


def test_delete_token_deletes_only_the_callers_token_by_name() -> None:
    d = driver_with_root()
    _, session = _alice(d)
    d.apply(CreatePersonalAccessToken("ci-token", 0, HASH_A), session)
    d.as_root(CreatePersonalAccessToken("deploy", 0, HASH_B))
    # Root has no "ci-token" of its own: a user reaches only its own tokens.
    missing = d.as_root(DeletePersonalAccessToken("ci-token"))
    assert missing == Rejected(ErrorCode.RESOURCE_NOT_FOUND)
    assert d.apply(DeletePersonalAccessToken("ci-token"), session) == Done()
    assert d.state.personal_access_tokens(session) == ()
    assert d.state.token_user(HASH_A, 0) is None
    again = d.apply(DeletePersonalAccessToken("ci-token"), session)
    assert again == Rejected(ErrorCode.RESOURCE_NOT_FOUND)
    assert d.state.personal_access_tokens(d.root_session) == (TokenInfo("deploy", None),)


def test_delete_user_given_tokens_deletes_them_with_the_user() -> None:
    d = driver_with_root()
    alice, session = _alice(d)
    d.apply(CreatePersonalAccessToken("ci-token", 100, HASH_A), session)
    assert _expiry_min(d) == 1_000 + 10 * d.op + 100
    assert d.as_root(DeleteUser(alice)) == Done()
    assert d.state.token_user(HASH_A, 0) is None
    assert _expiry_min(d) is None
    # The hash is free again: a new token with it is not refused as a duplicate.
    assert d.as_root(CreatePersonalAccessToken("ci-token", 0, HASH_A)) == TokenCreated(HASH_A)


def test_expire_tokens_removes_the_tokens_expired_at_the_op_timestamp_only() -> None:
    d = driver_with_root()
    _, session = _alice(d)
    d.apply(CreatePersonalAccessToken("short", 15, HASH_A), session)  # expires at op + 15
    d.apply(CreatePersonalAccessToken("long", 1_000_000, HASH_B), session)
    d.apply(CreatePersonalAccessToken("never", 0, token_hash("c")), session)
    assert d.as_root(ExpireTokens()) == Rejected(ErrorCode.UNAUTHORIZED)  # system only
    assert d.apply(ExpireTokens()) == Done()  # 20 after "short" was created: it expired
    names = [t.name for t in d.state.personal_access_tokens(session)]
    assert names == ["long", "never"]
    assert d.state.token_user(HASH_A, 0) is None
    assert d.state.token_expiry_min_us is not None
    assert d.state.token_expiry_min_us > 1_000_000


def test_authenticate_token_registers_its_user_and_refuses_unknown_expired_inactive() -> None:
    d = driver_with_root()
    alice, session = _alice(d)
    d.apply(CreatePersonalAccessToken("ci-token", 100, token_hash("secret")), session)
    expiry = 1_000 + 10 * d.op + 100
    assert authenticate_token(d.state, 7, "secret", expiry - 1) == Register(7, alice)
    for token, now in (("other", 0), ("secret", expiry)):
        with pytest.raises(StateError) as refused:
            authenticate_token(d.state, 7, token, now)
        assert refused.value.code is ErrorCode.INVALID_PERSONAL_ACCESS_TOKEN
    d.as_root(UpdateUser(alice, status=UserStatus.INACTIVE))
    with pytest.raises(StateError) as inactive:
        authenticate_token(d.state, 7, "secret", 0)
    assert inactive.value.code is ErrorCode.USER_INACTIVE


def test_snapshot_given_tokens_restores_them_and_equal_states_give_equal_bytes() -> None:
    d = driver_with_root()
    alice, session = _alice(d)
    d.apply(CreatePersonalAccessToken("ci-token", 100, HASH_A), session)
    d.as_root(CreatePersonalAccessToken("deploy", 0, HASH_B))
    restored = restore_state(snapshot_state(d.state))
    assert snapshot_state(restored) == snapshot_state(d.state)
    assert restored.personal_access_tokens(session) == d.state.personal_access_tokens(session)
    assert restored.token_user(HASH_A, 0) == alice
    assert restored.token_expiry_min_us == d.state.token_expiry_min_us
    assert b"token-a" not in snapshot_state(d.state)  # the hash, never a raw token


def test_snapshot_of_version_1_without_tokens_is_still_read() -> None:
    d = driver_with_root()
    plain = cbor2.loads(snapshot_state(d.state))
    del plain["tokens"]
    plain["version"] = 1
    restored = restore_state(cbor2.dumps(plain, canonical=True))
    assert restored.personal_access_tokens(d.root_session) == ()
    assert restored.users() == d.state.users()


@pytest.mark.parametrize("damage", ["no tokens in version 2", "duplicated hash", "orphan"])
def test_snapshot_given_bad_tokens_is_refused(damage: str) -> None:
    d = driver_with_root()
    alice, session = _alice(d)
    d.apply(CreatePersonalAccessToken("ci-token", 0, HASH_A), session)
    plain = cbor2.loads(snapshot_state(d.state))
    if damage == "no tokens in version 2":
        del plain["tokens"]
    elif damage == "duplicated hash":
        plain["tokens"].append([0, "deploy", HASH_A, None])
    else:
        plain["tokens"].append([alice + 40, "deploy", HASH_B, None])
    with pytest.raises(SnapshotError):
        restore_state(cbor2.dumps(plain, canonical=True))


def test_token_commands_round_trip_through_the_codec_as_iggys_operations() -> None:
    create = CreatePersonalAccessToken("ci-token", 60_000_000, HASH_A)
    operation, body = encode_command(create)
    assert operation == Operation.CREATE_PERSONAL_ACCESS_TOKEN
    assert decode_command(operation, body) == create
    delete = DeletePersonalAccessToken("ci-token")
    assert encode_command(delete)[0] == Operation.DELETE_PERSONAL_ACCESS_TOKEN
    assert decode_command(*encode_command(delete)) == delete
    assert decode_command(*encode_command(ExpireTokens())) == ExpireTokens()


def test_admission_turns_wire_requests_into_token_commands() -> None:
    request = wire.CreatePersonalAccessToken("ci-token", 5)
    assert create_token_command(request, HASH_A) == CreatePersonalAccessToken("ci-token", 5, HASH_A)
    deleted = metadata_command(
        CommandCode.DELETE_PERSONAL_ACCESS_TOKEN, wire.PersonalAccessTokenRef("ci-token")
    )
    assert deleted == DeletePersonalAccessToken("ci-token")


def test_machine_lists_the_callers_tokens_as_iggys_reply_and_names_a_creation_by_hash() -> None:
    d = driver_with_root()
    _, session = _alice(d)
    d.apply(CreatePersonalAccessToken("deploy", 0, HASH_B), session)
    d.apply(CreatePersonalAccessToken("ci-token", 100, HASH_A), session)
    expiry = 1_000 + 10 * d.op + 100
    body = MetadataMachine(d.state).get_personal_access_tokens(session)
    assert wire.PersonalAccessTokens.decode(body) == wire.PersonalAccessTokens(
        (wire.PersonalAccessTokenInfo("ci-token", expiry), wire.PersonalAccessTokenInfo("deploy"))
    )
    assert MetadataMachine(d.state).get_personal_access_tokens(d.root_session) == b""
    reply = metadata_reply(Operation.CREATE_PERSONAL_ACCESS_TOKEN, TokenCreated(HASH_A))
    assert reply == wire.result_ok(HASH_A)
