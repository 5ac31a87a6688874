"""The ``iggy`` CLI's resource commands in the ``viewstream`` CLI: ``user``, ``pat``,
``partition``, ``segment``, ``consumer-group``, ``consumer-offset``, ``client``, ``me``
and ``ping``.

Purpose: the typer side of these commands, with the ``iggy`` CLI's names, arguments and
aliases (``user create NAME PASSWORD``, ``pat create NAME [EXPIRY]``, ``consumer-offset
get CONSUMER STREAM TOPIC PARTITION --kind``, ...); each parses its arguments and runs
one function of :mod:`broker.cli.admin` through :func:`broker.cli.options.run_admin`.

Invariants:

1. Every command but ``ping`` takes the shared connection and credential options
   (:mod:`broker.cli.options`); ``ping`` needs no login and takes ``--address`` only.
2. A malformed argument (a permission name, an expiry, a count out of range) exits 2
   before anything is sent; what the node refuses exits 1 with its refusal.
3. Listing and showing commands take ``--json``, as ``stats`` does.

Theory of operation: :func:`register` adds the sub-apps and top-level commands to the
``viewstream`` app; nothing runs at import but the typer declarations.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Annotated, Final

import typer

from broker.cli.options import (
    DEFAULT_SERVER,
    PINGS_MAX,
    AddressOption,
    JsonOption,
    PasswordOption,
    TokenOption,
    UsernameOption,
    endpoint,
    run_admin,
    target,
)

if TYPE_CHECKING:
    from sdk.wire import Permissions, UserStatus

COUNT_MAX: Final = 100_000
"""Largest partition or segment count one command adds or deletes (Iggy's CLI bound)."""


class StatusChoice(enum.StrEnum):
    """A user's status, as the ``iggy`` CLI spells it."""

    ACTIVE = "active"
    INACTIVE = "inactive"


class KindChoice(enum.StrEnum):
    """Who owns a consumer offset, as the ``iggy`` CLI spells it."""

    CONSUMER = "consumer"
    CONSUMER_GROUP = "consumer-group"


Count = Annotated[int, typer.Argument(min=1, max=COUNT_MAX, help="How many.")]
Partition = Annotated[int, typer.Argument(min=0, help="Partition id.")]
GlobalPermissionsOption = Annotated[
    str | None,
    typer.Option(
        "--global-permissions",
        "-g",
        help="Comma-separated: manage_servers/m_srv, read_servers/r_srv, manage_users/m_usr, "
        "read_users/r_usr, manage_streams/m_str, read_streams/r_str, manage_topics/m_top, "
        "read_topics/r_top, poll_messages/p_msg, send_messages/s_msg.",
    ),
]
StreamPermissionsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--stream-permissions",
        "-s",
        help="STREAM_ID[:FLAGS][#TOPIC_ID[:FLAGS]]..., repeatable. Stream flags: "
        "manage_stream/m_str, read_stream/r_str, manage_topics/m_top, read_topics/r_top, "
        "poll_messages/p_msg, send_messages/s_msg; topic flags: manage_topic/m_top, "
        "read_topic/r_top, poll_messages/p_msg, send_messages/s_msg.",
    ),
]
KindOption = Annotated[
    KindChoice, typer.Option("--kind", "-k", help="A single consumer or a consumer group.")
]

user_app = typer.Typer(help="Create, list, change and delete users.", no_args_is_help=True)
pat_app = typer.Typer(
    help="Personal access tokens: log in with a token instead of a password.",
    no_args_is_help=True,
)
partition_app = typer.Typer(help="Add, list and delete a topic's partitions.", no_args_is_help=True)
segment_app = typer.Typer(help="Delete a partition's oldest segments.", no_args_is_help=True)
group_app = typer.Typer(help="Create, list and delete consumer groups.", no_args_is_help=True)
offset_app = typer.Typer(help="Read, store and delete consumer offsets.", no_args_is_help=True)
client_app = typer.Typer(help="The connections of the node.", no_args_is_help=True)


def _permissions(global_text: str | None, stream_texts: list[str] | None) -> Permissions | None:
    from broker.cli.forms import parse_permissions

    try:
        return parse_permissions(global_text, stream_texts or [])
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None


def _status(choice: StatusChoice) -> UserStatus:
    from sdk.wire import UserStatus

    return UserStatus.ACTIVE if choice is StatusChoice.ACTIVE else UserStatus.INACTIVE


# --- user ----------------------------------------------------------------------------------


@user_app.command("create")
def user_create(
    new_username: Annotated[str, typer.Argument(help="3 to 50 bytes.")],
    new_password: Annotated[str, typer.Argument(help="3 to 100 bytes.")],
    user_status: Annotated[
        StatusChoice, typer.Option("--user-status", "-u", help="The new user's status.")
    ] = StatusChoice.ACTIVE,
    global_permissions: GlobalPermissionsOption = None,
    stream_permissions: StreamPermissionsOption = None,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Create user NEW_USERNAME with NEW_PASSWORD (no permissions unless given)."""
    from broker.cli import admin

    permissions = _permissions(global_permissions, stream_permissions)
    run_admin(
        "user create",
        admin.user_create,
        target(address, username, password, token),
        new_username,
        new_password,
        _status(user_status),
        permissions,
    )


@user_app.command("get")
def user_get(
    user: Annotated[str, typer.Argument(help="User id or username.")],
    as_json: JsonOption = False,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Show USER with its permissions."""
    from broker.cli import admin

    run_admin(
        "user get",
        admin.user_get,
        target(address, username, password, token),
        user,
        as_json=as_json,
    )


@user_app.command("list")
def user_list(
    as_json: JsonOption = False,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """List the users."""
    from broker.cli import admin

    run_admin(
        "user list", admin.user_list, target(address, username, password, token), as_json=as_json
    )


@user_app.command("name")
def user_name(
    user: Annotated[str, typer.Argument(help="User id or username.")],
    new_username: Annotated[str, typer.Argument(help="The new username.")],
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Rename USER to NEW_USERNAME."""
    from broker.cli import admin

    run_admin(
        "user name",
        admin.user_name,
        target(address, username, password, token),
        user,
        new_username,
    )


@user_app.command("status")
def user_status(
    user: Annotated[str, typer.Argument(help="User id or username.")],
    status: Annotated[StatusChoice, typer.Argument(help="active or inactive.")],
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Make USER active or inactive (an inactive user cannot log in)."""
    from broker.cli import admin

    run_admin(
        "user status",
        admin.user_status,
        target(address, username, password, token),
        user,
        _status(status),
    )


@user_app.command("password")
def user_password(
    user: Annotated[str, typer.Argument(help="User id or username.")],
    current_password: Annotated[
        str | None, typer.Argument(help="Prompted for when not given.")
    ] = None,
    new_password: Annotated[str | None, typer.Argument(help="Prompted for when not given.")] = None,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Change the password of USER."""
    from broker.cli import admin

    connect_as = target(address, username, password, token)
    if current_password is None:
        current_password = typer.prompt(f"current password of {user}", hide_input=True)
    if new_password is None:
        new_password = typer.prompt(
            f"new password of {user}", hide_input=True, confirmation_prompt=True
        )
    run_admin(
        "user password", admin.user_password, connect_as, user, current_password, new_password
    )


@user_app.command("permissions")
def user_permissions(
    user: Annotated[str, typer.Argument(help="User id or username.")],
    global_permissions: GlobalPermissionsOption = None,
    stream_permissions: StreamPermissionsOption = None,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Replace the permissions of USER; with no option given, remove them all."""
    from broker.cli import admin

    permissions = _permissions(global_permissions, stream_permissions)
    run_admin(
        "user permissions",
        admin.user_permissions,
        target(address, username, password, token),
        user,
        permissions,
    )


@user_app.command("delete")
def user_delete(
    user: Annotated[str, typer.Argument(help="User id or username.")],
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Delete USER; its sessions and personal access tokens end with it."""
    from broker.cli import admin

    run_admin("user delete", admin.user_delete, target(address, username, password, token), user)


# --- pat -----------------------------------------------------------------------------------


@pat_app.command("create")
def pat_create(
    name: Annotated[str, typer.Argument(help="The token's name, unique per user.")],
    expiry: Annotated[
        list[str] | None,
        typer.Argument(help="Lifetime like 15days 2min 2s; none or nothing: never expires."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print the raw token only.")] = False,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Create a personal access token of the logged-in user; the token is printed once."""
    from broker.cli import admin
    from broker.cli.forms import parse_expiry

    try:
        expiry_s = parse_expiry(" ".join(expiry) if expiry else None)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="EXPIRY") from None
    run_admin(
        "pat create",
        admin.pat_create,
        target(address, username, password, token),
        name,
        expiry_s,
        quiet=quiet,
    )


@pat_app.command("list")
def pat_list(
    as_json: JsonOption = False,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """List the logged-in user's tokens (names and expiries; tokens are never shown)."""
    from broker.cli import admin

    run_admin(
        "pat list", admin.pat_list, target(address, username, password, token), as_json=as_json
    )


@pat_app.command("delete")
def pat_delete(
    name: Annotated[str, typer.Argument(help="The token's name.")],
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Delete one of the logged-in user's tokens; it logs in no more."""
    from broker.cli import admin

    run_admin("pat delete", admin.pat_delete, target(address, username, password, token), name)


# --- partition and segment -----------------------------------------------------------------


@partition_app.command("create")
def partition_create(
    stream: str,
    topic: str,
    count: Count,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Add COUNT partitions to TOPIC of STREAM."""
    from broker.cli import admin

    run_admin(
        "partition create",
        admin.partition_create,
        target(address, username, password, token),
        stream,
        topic,
        count,
    )


@partition_app.command("delete")
def partition_delete(
    stream: str,
    topic: str,
    count: Count,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Delete the last COUNT partitions of TOPIC of STREAM, with their messages."""
    from broker.cli import admin

    run_admin(
        "partition delete",
        admin.partition_delete,
        target(address, username, password, token),
        stream,
        topic,
        count,
    )


@partition_app.command("list")
def partition_list(
    stream: str,
    topic: str,
    as_json: JsonOption = False,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """List the partitions of TOPIC of STREAM."""
    from broker.cli import admin

    run_admin(
        "partition list",
        admin.partition_list,
        target(address, username, password, token),
        stream,
        topic,
        as_json=as_json,
    )


@segment_app.command("delete")
def segment_delete(
    stream: str,
    topic: str,
    partition: Partition,
    count: Count,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Delete the oldest COUNT sealed segments of PARTITION (DELETE_SEGMENTS)."""
    from broker.cli import admin

    run_admin(
        "segment delete",
        admin.segment_delete,
        target(address, username, password, token),
        stream,
        topic,
        partition,
        count,
    )


# --- consumer-group ------------------------------------------------------------------------


@group_app.command("create")
def group_create(
    stream: str,
    topic: str,
    name: str,
    group_id: Annotated[
        int | None,
        typer.Option(
            "--group-id",
            "-g",
            min=0,
            max=(1 << 32) - 1,
            help="The id wished for, as the iggy CLI takes it; the server assigns ids "
            "(Iggy 0.9's request carries none), and a different one is reported.",
        ),
    ] = None,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Create consumer group NAME on TOPIC of STREAM."""
    from broker.cli import admin

    run_admin(
        "consumer-group create",
        admin.group_create,
        target(address, username, password, token),
        stream,
        topic,
        name,
        group_id=group_id,
    )


@group_app.command("get")
def group_get(
    stream: str,
    topic: str,
    group: str,
    as_json: JsonOption = False,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Show GROUP of TOPIC of STREAM with its members and their partitions."""
    from broker.cli import admin

    run_admin(
        "consumer-group get",
        admin.group_get,
        target(address, username, password, token),
        stream,
        topic,
        group,
        as_json=as_json,
    )


@group_app.command("list")
def group_list(
    stream: str,
    topic: str,
    as_json: JsonOption = False,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """List the consumer groups of TOPIC of STREAM."""
    from broker.cli import admin

    run_admin(
        "consumer-group list",
        admin.group_list,
        target(address, username, password, token),
        stream,
        topic,
        as_json=as_json,
    )


@group_app.command("delete")
def group_delete(
    stream: str,
    topic: str,
    group: str,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Delete GROUP of TOPIC of STREAM."""
    from broker.cli import admin

    run_admin(
        "consumer-group delete",
        admin.group_delete,
        target(address, username, password, token),
        stream,
        topic,
        group,
    )


# --- consumer-offset -----------------------------------------------------------------------


@offset_app.command("get")
def offset_get(
    consumer: Annotated[str, typer.Argument(help="Consumer (or group) id or name.")],
    stream: str,
    topic: str,
    partition: Partition,
    kind: KindOption = KindChoice.CONSUMER,
    as_json: JsonOption = False,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Show the offset CONSUMER stored on PARTITION of TOPIC of STREAM."""
    from broker.cli import admin

    run_admin(
        "consumer-offset get",
        admin.offset_get,
        target(address, username, password, token),
        consumer,
        stream,
        topic,
        partition,
        kind=kind.value,
        as_json=as_json,
    )


@offset_app.command("set")
def offset_set(
    consumer: Annotated[str, typer.Argument(help="Consumer (or group) id or name.")],
    stream: str,
    topic: str,
    partition: Partition,
    offset: Annotated[int, typer.Argument(min=0, help="The last offset consumed.")],
    kind: KindOption = KindChoice.CONSUMER,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Store OFFSET for CONSUMER on PARTITION of TOPIC of STREAM."""
    from broker.cli import admin

    run_admin(
        "consumer-offset set",
        admin.offset_set,
        target(address, username, password, token),
        consumer,
        stream,
        topic,
        partition,
        offset,
        kind=kind.value,
    )


@offset_app.command("delete")
def offset_delete(
    consumer: Annotated[str, typer.Argument(help="Consumer (or group) id or name.")],
    stream: str,
    topic: str,
    partition: Partition,
    kind: KindOption = KindChoice.CONSUMER,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Delete the offset CONSUMER stored on PARTITION of TOPIC of STREAM."""
    from broker.cli import admin

    run_admin(
        "consumer-offset delete",
        admin.offset_delete,
        target(address, username, password, token),
        consumer,
        stream,
        topic,
        partition,
        kind=kind.value,
    )


# --- client, me, ping ----------------------------------------------------------------------


@client_app.command("get")
def client_get(
    client_id: Annotated[int, typer.Argument(min=0, help="A client id (`client list`, `me`).")],
    as_json: JsonOption = False,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Show one connection of the node, with its consumer groups."""
    from broker.cli import admin

    run_admin(
        "client get",
        admin.client_get,
        target(address, username, password, token),
        client_id,
        as_json=as_json,
    )


@client_app.command("list")
def client_list(
    as_json: JsonOption = False,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """List the connections of the node (of this node only, as in Iggy)."""
    from broker.cli import admin

    run_admin(
        "client list",
        admin.client_list,
        target(address, username, password, token),
        as_json=as_json,
    )


def me(
    as_json: JsonOption = False,
    address: AddressOption = DEFAULT_SERVER,
    username: UsernameOption = "iggy",
    password: PasswordOption = None,
    token: TokenOption = None,
) -> None:
    """Show this command's own connection as the node sees it: client id, user, address."""
    from broker.cli import admin

    run_admin("me", admin.me, target(address, username, password, token), as_json=as_json)


def ping(
    count: Annotated[
        int, typer.Option("--count", "-c", min=1, max=PINGS_MAX, help="Pings to send.")
    ] = 1,
    address: AddressOption = DEFAULT_SERVER,
) -> None:
    """Check that a node answers, and how fast (PING needs no login)."""
    from broker.cli import admin

    node, tls, _ = endpoint(address)
    run_admin("ping", admin.ping, node, count, tls)


def register(app: typer.Typer) -> None:
    """Add these commands to the ``viewstream`` app."""
    app.add_typer(user_app, name="user")
    app.add_typer(pat_app, name="pat")
    app.add_typer(partition_app, name="partition")
    app.add_typer(segment_app, name="segment")
    app.add_typer(group_app, name="consumer-group")
    app.add_typer(offset_app, name="consumer-offset")
    app.add_typer(client_app, name="client")
    app.command("me")(me)
    app.command("ping")(ping)
