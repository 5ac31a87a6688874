"""Admission: a client's metadata-plane request turned into the domain command to propose.

Purpose: before anything is replicated, the node a client is connected to decodes its Iggy
request payload into a :mod:`broker.state.metadata` command (:func:`metadata_command`,
:func:`create_user_command`, :func:`change_password_command`,
:func:`create_token_command`) or, for a login, checks the credentials against committed
state (:func:`authenticate`, :func:`authenticate_token`). What Iggy checks at that point
(usernames, passwords, options) is checked here. Failures raise :class:`StateError`; the
runtime answers with its code in the reply header's status. Requested
permissions keep the wire's type, their entries sorted as the state keeps them
(:func:`domain_permissions`).

Invariants:

1. Metadata prepare bodies are :mod:`broker.state.codec` commands, never wire bodies, so
   a clear password never enters the log: the command carries the hash the primary made
   with a salt it drew. Nor does a raw access token: the command carries its hash.
2. Credentials are checked on the replica the client is connected to and never cross a
   replica link; apply re-checks that the user still exists and is active.
3. Rules that differ from the state machine's own (usernames in UTF-8 bytes) are checked
   here, before proposing, so that replaying ops committed earlier gives the same state.
4. Nothing here reads a clock, draws randomness or touches IO: the time a token login is
   judged at is an argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from broker.state.credentials import PasswordHash, token_hash, verify_password
from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import (
    USERNAME_LENGTH_MAX,
    USERNAME_LENGTH_MIN,
    ChangePassword,
    CreateConsumerGroup,
    CreatePartitions,
    CreatePersonalAccessToken,
    CreateStream,
    CreateTopic,
    CreateUser,
    DeleteConsumerGroup,
    DeletePartitions,
    DeletePersonalAccessToken,
    DeleteStream,
    DeleteTopic,
    DeleteUser,
    JoinConsumerGroup,
    LeaveConsumerGroup,
    Logout,
    MetadataCommand,
    MetadataState,
    PurgeStream,
    PurgeTopic,
    Register,
    UpdatePermissions,
    UpdateStream,
    UpdateTopic,
    UpdateUser,
    UserStatus,
)
from broker.state.options import topic_options
from broker.state.permissions import canonical
from sdk import wire
from sdk.wire.codes import CommandCode


def metadata_command(code: CommandCode, payload: wire.RequestPayload) -> MetadataCommand:
    """The domain command for a metadata-plane request (everything but logins and users).

    Raises:
        StateError: the request carries an option this server does not support, or a
            value it cannot hold; or ``code`` is not a metadata command handled here.
    """
    match code, payload:
        case CommandCode.CREATE_STREAM, wire.CreateStream(name, options):
            _no_stream_options(options)
            return CreateStream(name)
        case CommandCode.UPDATE_STREAM, wire.UpdateStream(stream_id, name, options):
            _no_stream_options(options)
            return UpdateStream(stream_id.value, name)
        case CommandCode.DELETE_STREAM, wire.StreamRef(stream_id):
            return DeleteStream(stream_id.value)
        case CommandCode.PURGE_STREAM, wire.StreamRef(stream_id):
            return PurgeStream(stream_id.value)
        case CommandCode.CREATE_TOPIC, wire.CreateTopic(stream_id, partitions_count, name, opts):
            return CreateTopic(stream_id.value, name, partitions_count, topic_options(opts))
        case CommandCode.UPDATE_TOPIC, wire.UpdateTopic(stream_id, topic_id, name, options):
            return UpdateTopic(stream_id.value, topic_id.value, name, topic_options(options))
        case CommandCode.DELETE_TOPIC, wire.TopicRef(stream_id, topic_id):
            return DeleteTopic(stream_id.value, topic_id.value)
        case CommandCode.PURGE_TOPIC, wire.TopicRef(stream_id, topic_id):
            return PurgeTopic(stream_id.value, topic_id.value)
        case CommandCode.CREATE_PARTITIONS, wire.PartitionsChange(stream_id, topic_id, count):
            return CreatePartitions(stream_id.value, topic_id.value, count)
        case CommandCode.DELETE_PARTITIONS, wire.PartitionsChange(stream_id, topic_id, count):
            return DeletePartitions(stream_id.value, topic_id.value, count)
        case CommandCode.CREATE_CONSUMER_GROUP, wire.CreateConsumerGroup(stream_id, topic_id, n):
            return CreateConsumerGroup(stream_id.value, topic_id.value, n)
        case CommandCode.DELETE_CONSUMER_GROUP, wire.GroupRef(stream_id, topic_id, group_id):
            return DeleteConsumerGroup(stream_id.value, topic_id.value, group_id.value)
        case CommandCode.JOIN_CONSUMER_GROUP, wire.GroupRef(stream_id, topic_id, group_id):
            return JoinConsumerGroup(stream_id.value, topic_id.value, group_id.value)
        case CommandCode.LEAVE_CONSUMER_GROUP, wire.GroupRef(stream_id, topic_id, group_id):
            return LeaveConsumerGroup(stream_id.value, topic_id.value, group_id.value)
        case CommandCode.LOGOUT_USER, _:
            return Logout()
        case CommandCode.DELETE_USER, wire.UserRef(user_id):
            return DeleteUser(user_id.value)
        case CommandCode.UPDATE_USER, wire.UpdateUser(user_id, username, status, options):
            _no_user_options(options)
            if username is not None:
                check_username(username)
            return UpdateUser(
                user_id.value, username, None if status is None else UserStatus(int(status))
            )
        case CommandCode.UPDATE_PERMISSIONS, wire.UpdatePermissions(user_id, permissions):
            return UpdatePermissions(user_id.value, domain_permissions(permissions))
        case CommandCode.DELETE_PERSONAL_ACCESS_TOKEN, wire.PersonalAccessTokenRef(name):
            return DeletePersonalAccessToken(name)
    raise StateError(ErrorCode.INVALID_COMMAND, f"{code!r} is not a metadata command here")


# Iggy's bounds on a clear password (``MIN_PASSWORD_LENGTH``/``MAX_PASSWORD_LENGTH``).
PASSWORD_LENGTH_MIN: Final = 3
PASSWORD_LENGTH_MAX: Final = 100


def check_password(password: str) -> None:
    """Refuse a new password outside Iggy's length bounds, in UTF-8 bytes as Iggy counts
    them, before anything is hashed.

    Raises:
        StateError: ``INVALID_PASSWORD``.
    """
    if not PASSWORD_LENGTH_MIN <= len(password.encode("utf-8")) <= PASSWORD_LENGTH_MAX:
        raise StateError(ErrorCode.INVALID_PASSWORD)


def check_username(username: str) -> None:
    """Refuse a new username outside Iggy's bounds (3..50), in UTF-8 bytes as Iggy counts
    them: 17 three-byte characters are 51 bytes, too long for Iggy's clients and server.

    Checked where a request becomes a command, before it is proposed, and not in the
    state machine: the state machine's own rule (in characters) must stay what it was
    when older ops were committed, or replaying them would give another state.

    Raises:
        StateError: ``INVALID_USERNAME``.
    """
    if not USERNAME_LENGTH_MIN <= len(username.encode("utf-8")) <= USERNAME_LENGTH_MAX:
        raise StateError(ErrorCode.INVALID_USERNAME, "a username is 3 to 50 bytes of UTF-8")


def create_user_command(request: wire.CreateUser, password: PasswordHash) -> CreateUser:
    """The ``CreateUser`` to propose once the primary hashed the request's password with a
    salt it drew: the clear password stays out of the command and so out of the log."""
    _no_user_options(request.options)
    check_username(request.username)
    return CreateUser(
        request.username,
        password,
        UserStatus(int(request.status)),
        domain_permissions(request.permissions),
    )


def change_password_command(request: wire.ChangePassword, password: PasswordHash) -> ChangePassword:
    """The ``ChangePassword`` to propose once the current password was verified and the new
    one hashed with a fresh salt."""
    return ChangePassword(request.user_id.value, password)


def _no_user_options(options: Sequence[wire.OptionEntry]) -> None:
    # No user option exists in Iggy 0.9's catalog; a key is refused, as Iggy does.
    if options:
        raise StateError(ErrorCode.UNSUPPORTED_OPTION_KEY, options[0].key)


def domain_permissions(permissions: wire.Permissions | None) -> wire.Permissions | None:
    """Requested permissions as the state machine keeps them: the same type, its entries
    sorted by id (``broker.state.permissions.canonical``)."""
    return None if permissions is None else canonical(permissions)


def authenticate(state: MetadataState, client_id: int, username: str, password: str) -> Register:
    """Check a login against committed state; the ``Register`` command to propose.

    This runs on the replica the client is connected to, so credentials never cross a
    replica link; apply re-checks that the user still exists and is active.

    Raises:
        StateError: ``INVALID_CREDENTIALS`` or ``USER_INACTIVE``.
    """
    try:
        user = state.user(username)
    except StateError:
        raise StateError(ErrorCode.INVALID_CREDENTIALS) from None
    if not verify_password(user.password, password):
        raise StateError(ErrorCode.INVALID_CREDENTIALS)
    if user.status != UserStatus.ACTIVE:
        raise StateError(ErrorCode.USER_INACTIVE)
    return Register(client_id, user.id)


def create_token_command(
    request: wire.CreatePersonalAccessToken, hashed: bytes
) -> CreatePersonalAccessToken:
    """The ``CreatePersonalAccessToken`` to propose once the admitting node drew a raw token
    and hashed it (``credentials.token_hash``): the raw token stays out of the log."""
    return CreatePersonalAccessToken(request.name, request.expiry, hashed)


def authenticate_token(state: MetadataState, client_id: int, token: str, now_us: int) -> Register:
    """Check a token login against committed state at ``now_us``; the ``Register`` to
    propose, the same as a password login's for that user.

    A token that is unknown, or expired at ``now_us`` though not yet removed, is refused
    alike, as Iggy refuses both (eviction ``InvalidToken``).

    Raises:
        StateError: ``INVALID_PERSONAL_ACCESS_TOKEN`` or ``USER_INACTIVE``.
    """
    user_id = state.token_user(token_hash(token), now_us)
    if user_id is None:
        raise StateError(ErrorCode.INVALID_PERSONAL_ACCESS_TOKEN)
    if state.user(user_id).status != UserStatus.ACTIVE:
        raise StateError(ErrorCode.USER_INACTIVE)
    return Register(client_id, user_id)


def _no_stream_options(options: Sequence[wire.OptionEntry]) -> None:
    # Iggy refuses option keys it does not know, and no stream option is supported here.
    if options:
        raise StateError(ErrorCode.UNSUPPORTED_OPTION_KEY, options[0].key)
