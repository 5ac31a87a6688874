"""Client-side admin commands of the ``viewstream`` CLI, in the style of the ``iggy`` CLI.

Purpose: ``stream``, ``topic``, ``partition``, ``segment``, ``user``, ``pat``,
``consumer-group``, ``consumer-offset``, ``client``, ``me``, ``ping``, ``send``, ``poll``,
``cluster status`` and ``stats``, each a login and a few requests through the SDK's
blocking client (:class:`sdk.Client`). Functions return the text to print, so the CLI
stays thin and tests can call them directly; the parsers of Iggy's argument forms
(permissions, token expiries) live in :mod:`broker.cli.forms`.

Invariants:

1. A command talks to the node it was pointed at and to no other: the client is pinned
   to that address (``cluster_discovery`` off), so it reports what that node says. The
   node itself forwards what its group's primary must decide.
2. Every call is bounded by ``TIMEOUT_S`` (a probe of ``cluster status`` by
   ``PROBE_TIMEOUT_S``), retries included.
3. A failure is an :class:`sdk.errors.IggyError`; :func:`failure_text` words it as the
   CLI prints it, telling the server's refusals from failures to reach it. No command
   prints success for a request the node refused.
4. A login uses the password or the personal access token of the :class:`Target`, never
   both; a secret is never part of what a command prints, except the raw token that
   ``pat create`` exists to show once.
5. ``ping`` sends the pings it is asked for (the CLI bounds their count by
   ``broker.cli.options.PINGS_MAX``), each bounded by ``TIMEOUT_S``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from sdk import wire
from sdk.blocking import Client
from sdk.connection_string import ClientConfig
from sdk.errors import (
    ClientClosed,
    ConnectionFailed,
    Disconnected,
    IggyError,
    InvalidConnectionString,
    RequestTimeout,
)
from sdk.types import ConsumerRef, Message
from sdk.wire import CLIENT_NO_USER, ClientInfoDetails, Permissions, UserStatus

ADDRESS_DEFAULT: Final = "127.0.0.1:8090"
TIMEOUT_S: Final = 10.0
"""Bound on one command's call, retries included."""
PROBE_TIMEOUT_S: Final = 2.0
"""Bound on the ping of one node by ``cluster status``."""
PING_INTERVAL_S: Final = 0.2
"""Pause between two pings of one ``ping``, so a count does not flood the node."""

_TRANSPORTS: Final = {1: "tcp", 2: "quic", 3: "http", 4: "websocket"}
"""Iggy's transport codes in GET_ME and GET_CLIENTS."""

_NOT_ANSWERED: Final = (
    ClientClosed,
    ConnectionFailed,
    Disconnected,
    InvalidConnectionString,
    RequestTimeout,
)
"""Failures to reach a node or to hear its answer, as opposed to its refusals."""


@dataclass(frozen=True, slots=True)
class Tls:
    """TLS to the node: the name its certificate must carry (``None``: the host dialed)
    and the PEM file of the CA to trust (``None``: the system's roots)."""

    domain: str | None = None
    ca_file: str | None = None


@dataclass(frozen=True, slots=True)
class Target:
    """Where and as whom the admin commands connect: with ``token`` set, a personal
    access token login (the username and password are then not used); with ``tls``, over
    TLS."""

    address: str
    username: str
    password: str = field(repr=False)
    token: str | None = field(default=None, repr=False)
    tls: Tls | None = None


def client_config(address: str, tls: Tls | None, timeout_s: float) -> ClientConfig:
    """Settings pinned to the node at ``address`` (invariant 1), over TLS if asked."""
    config = ClientConfig.one_node(address, timeout_s=timeout_s)
    if tls is None:
        return config
    return config.replace(tls=True, tls_domain=tls.domain, tls_ca_file=tls.ca_file)


@contextmanager
def _connect(target: Target) -> Iterator[Client]:
    client = Client(client_config(target.address, target.tls, TIMEOUT_S))
    try:
        if target.token is not None:
            client.login_with_personal_access_token(target.token)
        else:
            client.login_user(target.username, target.password)
        yield client
    finally:
        client.close()


def failure_text(error: IggyError) -> str:
    """How the CLI words a failed command (after ``"<command>: "``).

    A node's refusal reads ``the server refused: server rejected the request: NAME=code``;
    an eviction and a failure to reach the node or hear it read as the error itself.
    """
    if error.eviction is not None or isinstance(error, _NOT_ANSWERED):
        return str(error)
    return f"the server refused: {wire.ServerRejected(error.code)}"


def _refused(error: IggyError) -> bool:
    return error.eviction is None and not isinstance(error, _NOT_ANSWERED)


def stream_create(target: Target, name: str) -> str:
    with _connect(target) as client:
        details = client.create_stream(name)
    return f"created stream {details.stream.name!r} (id {details.stream.id})"


def stream_list(target: Target) -> str:
    with _connect(target) as client:
        streams = client.get_streams()
    lines = [f"{'id':>6}  {'topics':>6}  {'messages':>10}  {'bytes':>12}  name"]
    lines += [
        f"{s.id:>6}  {s.topics_count:>6}  {s.messages_count:>10}  {s.size_bytes:>12}  {s.name}"
        for s in streams
    ]
    return "\n".join(lines)


def stream_delete(target: Target, stream: str) -> str:
    with _connect(target) as client:
        client.delete_stream(stream)
    return f"deleted stream {stream!r}"


def topic_create(target: Target, stream: str, name: str, partitions: int, durability: str) -> str:
    with _connect(target) as client:
        details = client.create_topic(stream, name, partitions, durability=durability)
    return (
        f"created topic {details.topic.name!r} (id {details.topic.id}) with "
        f"{details.topic.partitions_count} partition(s), durability {durability}"
    )


def topic_list(target: Target, stream: str) -> str:
    with _connect(target) as client:
        details = client.get_stream(stream)
    if details is None:
        return f"no stream {stream!r}"
    lines = [f"{'id':>6}  {'partitions':>10}  {'messages':>10}  {'bytes':>12}  name"]
    lines += [
        f"{t.id:>6}  {t.partitions_count:>10}  {t.messages_count:>10}  {t.size_bytes:>12}  {t.name}"
        for t in details.topics
    ]
    return "\n".join(lines)


def topic_delete(target: Target, stream: str, topic: str) -> str:
    with _connect(target) as client:
        client.delete_topic(stream, topic)
    return f"deleted topic {topic!r} of stream {stream!r}"


def send(
    target: Target,
    stream: str,
    topic: str,
    messages: list[str],
    *,
    partition: int | None = None,
    key: str | None = None,
) -> str:
    partitioning: wire.Partitioning
    if partition is not None:
        partitioning = wire.PartitionId(partition)
    elif key is not None:
        partitioning = wire.MessagesKey(key.encode("utf-8"))
    else:
        partitioning = wire.Balanced()
    outgoing = [Message(text.encode("utf-8")) for text in messages]
    with _connect(target) as client:
        confirmations = client.send_messages(stream, topic, outgoing, partitioning)
    if not confirmations:  # applied by an earlier attempt whose reply aged out
        return f"sent {len(messages)} message(s)"
    where = ", ".join(
        f"partition {c.partition_id} from offset {c.base_offset}" for c in confirmations
    )
    return f"sent {len(messages)} message(s): {where}"


def poll(
    target: Target,
    stream: str,
    topic: str,
    *,
    partition: int,
    strategy: wire.PollingStrategy,
    count: int,
    consumer: str,
    auto_commit: bool,
) -> str:
    with _connect(target) as client:
        polled = client.poll_messages(
            stream,
            topic,
            consumer=ConsumerRef.single(consumer),
            polling_strategy=strategy,
            count=count,
            auto_commit=auto_commit,
            partition_id=partition,
        )
    lines = []
    for message in polled.messages:
        payload = bytes(message.payload).decode("utf-8", errors="backslashreplace")
        lines.append(f"{message.offset:>10}  {message.timestamp}  {payload}")
    lines.append(
        f"({len(polled.messages)} message(s) from partition {polled.partition_id}; "
        f"newest offset {polled.current_offset})"
    )
    return "\n".join(lines)


def _reachable(address: str, tls: Tls | None) -> bool:
    probe = Client(client_config(address, tls, PROBE_TIMEOUT_S))
    try:
        probe.ping()
    except IggyError as error:
        return _refused(error)  # a node that refuses a ping still answers
    finally:
        probe.close()
    return True


def cluster_status(target: Target) -> str:
    with _connect(target) as client:
        metadata = client.get_cluster_metadata()
    lines = [f"cluster {metadata.name!r}, {len(metadata.nodes)} node(s):"]
    for node in metadata.nodes:
        address = f"{node.ip}:{node.tcp_port}"
        reachable = "reachable" if _reachable(address, target.tls) else "UNREACHABLE"
        lines.append(f"  {node.name:<8} {address:<22} {node.role.name.lower():<9} {reachable}")
    return "\n".join(lines)


def stats(target: Target, *, as_json: bool) -> str:
    with _connect(target) as client:
        reply = client.get_stats()
        try:
            runtime: dict[str, Any] = client.get_runtime_stats()
        except IggyError as error:
            if not _refused(error):
                raise
            runtime = {}  # a server without viewstream's counters
    if as_json:
        server = {
            name: getattr(reply, name)
            for name in reply.__dataclass_fields__
            if name != "cache_metrics"
        }
        return json.dumps({"server": server, "runtime": runtime}, indent=2)
    lines = [
        f"server {reply.iggy_server_version} pid {reply.process_id} on {reply.hostname}, "
        f"up {reply.run_time / 1e6:.1f} s",
        f"streams {reply.streams_count}  topics {reply.topics_count}  "
        f"partitions {reply.partitions_count}  segments {reply.segments_count}",
        f"messages {reply.messages_count}  bytes {reply.messages_size_bytes}  "
        f"clients {reply.clients_count}  consumer groups {reply.consumer_groups_count}",
    ]
    node = runtime.get("node", {})
    if "disk_used_bytes" in node:
        budget = node.get("disk_budget_bytes")
        lines.append(
            f"disk: data directory {node['disk_used_bytes']} bytes, "
            f"{node['disk_free_bytes']} bytes free, budget "
            + (f"{budget} bytes" if budget is not None else "none")
            + ("  FULL: new messages refused (4010)" if node["disk_full"] else "")
        )
    if "bytes_retained" in node:
        lines.append(
            f"retention: {node['bytes_retained']} bytes retained in partition journals, "
            f"{node['bytes_deleted']} bytes deleted in {node['segments_deleted']} segments "
            "since start"
        )
    if "sync_scope" in node:
        flushes = node["flushes"]
        per_flush = node["groups_flushed"] / flushes if flushes else 0.0
        lines.append(
            f"syncs: scope {node['sync_scope']}, {flushes} shared flushes covering "
            f"{node['groups_flushed']} partition syncs ({per_flush:.1f} per flush)"
        )
    for name, group in runtime.get("groups", {}).items():
        lines.append(
            f"{name}: prepares {group['prepares']}  commits {group['commits']}  "
            f"commit rounds/s {group['commit_rounds_per_s']:.1f}  "
            f"msgs/prepare {group['messages_per_prepare']:.1f}  "
            f"bytes/prepare {group['bytes_per_prepare']:.0f}  syncs {group['syncs']}  "
            f"msgs/sync {group['messages_per_sync']:.1f}  "
            f"bytes to replicas {group['bytes_to_replicas']}  "
            f"view changes {group.get('view_changes', 0)}  "
            f"segments deleted {group.get('segments_deleted', 0)}"
        )
    return "\n".join(lines)


# --- rendering ---------------------------------------------------------------------------


def _plain(value: object) -> object:
    """``value`` as JSON-ready data: dataclasses as objects, enums by name, tuples as
    lists (the ``--json`` form of every command)."""
    if isinstance(value, enum.Enum):
        return value.name.lower()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _json(value: object) -> str:
    return json.dumps(_plain(value), indent=2)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns as wide as their widest cell; the last column unpadded."""
    cells = [[str(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])
        for row in cells
    )


def _when_us(timestamp_us: int) -> str:
    """A microsecond timestamp as UTC, to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timestamp_us / 1e6))


def _transport(code: int) -> str:
    return _TRANSPORTS.get(code, f"transport {code}")


def _user_of(user_id: int) -> str:
    return "-" if user_id == CLIENT_NO_USER else str(user_id)


# --- users -------------------------------------------------------------------------------


def user_create(
    target: Target,
    username: str,
    password: str,
    status: UserStatus,
    permissions: Permissions | None,
) -> str:
    with _connect(target) as client:
        details = client.create_user(username, password, status=status, permissions=permissions)
    user = details.user
    return f"created user {user.username!r} (id {user.id}), {user.status.name.lower()}"


def user_get(target: Target, user: str, *, as_json: bool) -> str:
    from broker.cli.forms import describe_permissions

    with _connect(target) as client:
        details = client.get_user(user)
    if details is None:
        return f"no user {user!r}"
    if as_json:
        return _json(details)
    info = details.user
    lines = [
        f"user {info.username!r} (id {info.id}), {info.status.name.lower()}, "
        f"created {_when_us(info.created_at)}",
        *describe_permissions(details.permissions),
    ]
    return "\n".join(lines)


def user_list(target: Target, *, as_json: bool) -> str:
    with _connect(target) as client:
        users = client.get_users()
    if as_json:
        return _json(users)
    rows = [(u.id, u.status.name.lower(), _when_us(u.created_at), u.username) for u in users]
    return _table(("id", "status", "created", "username"), rows)


def user_name(target: Target, user: str, username: str) -> str:
    with _connect(target) as client:
        client.update_user(user, username=username)
    return f"renamed user {user!r} to {username!r}"


def user_status(target: Target, user: str, status: UserStatus) -> str:
    with _connect(target) as client:
        client.update_user(user, status=status)
    return f"user {user!r} is {status.name.lower()}"


def user_password(target: Target, user: str, current_password: str, new_password: str) -> str:
    with _connect(target) as client:
        client.change_password(user, current_password, new_password)
    return f"changed the password of user {user!r}"


def user_permissions(target: Target, user: str, permissions: Permissions | None) -> str:
    from broker.cli.forms import describe_permissions

    with _connect(target) as client:
        client.update_permissions(user, permissions)
    return "\n".join([f"set the permissions of user {user!r}:", *describe_permissions(permissions)])


def user_delete(target: Target, user: str) -> str:
    with _connect(target) as client:
        client.delete_user(user)
    return f"deleted user {user!r} (its sessions and personal access tokens end with it)"


# --- personal access tokens --------------------------------------------------------------


def pat_create(target: Target, name: str, expiry_s: float | None, *, quiet: bool) -> str:
    with _connect(target) as client:
        token = client.create_personal_access_token(name, expiry_s=expiry_s)
    if quiet:
        return token
    if expiry_s is None:
        expires = "never expires"
    else:
        expires = f"expires in {expiry_s:g} s, at {_when_us(round((time.time() + expiry_s) * 1e6))}"
    return (
        f"created personal access token {name!r} ({expires}); it is shown only this once:\n{token}"
    )


def pat_list(target: Target, *, as_json: bool) -> str:
    with _connect(target) as client:
        tokens = client.get_personal_access_tokens()
    if as_json:
        return _json(tokens)
    rows = [(t.name, "never" if t.expiry_at == 0 else _when_us(t.expiry_at)) for t in tokens]
    return _table(("name", "expires"), rows)


def pat_delete(target: Target, name: str) -> str:
    with _connect(target) as client:
        client.delete_personal_access_token(name)
    return f"deleted personal access token {name!r}"


# --- partitions and segments -------------------------------------------------------------


def _partitions_now(client: Client, stream: str, topic: str) -> str:
    details = client.get_topic(stream, topic)
    return "" if details is None else f"; it has {details.topic.partitions_count} now"


def partition_create(target: Target, stream: str, topic: str, count: int) -> str:
    with _connect(target) as client:
        client.create_partitions(stream, topic, count)
        now = _partitions_now(client, stream, topic)
    return f"added {count} partition(s) to topic {topic!r} of stream {stream!r}{now}"


def partition_delete(target: Target, stream: str, topic: str, count: int) -> str:
    with _connect(target) as client:
        client.delete_partitions(stream, topic, count)
        now = _partitions_now(client, stream, topic)
    return f"deleted the last {count} partition(s) of topic {topic!r} of stream {stream!r}{now}"


def partition_list(target: Target, stream: str, topic: str, *, as_json: bool) -> str:
    with _connect(target) as client:
        partitions = client.get_partitions(stream, topic)
    if as_json:
        return _json(partitions)
    rows = [
        (p.id, p.segments_count, p.current_offset, p.messages_count, p.size_bytes)
        for p in partitions
    ]
    return _table(("id", "segments", "current offset", "messages", "bytes"), rows)


def segment_delete(target: Target, stream: str, topic: str, partition: int, count: int) -> str:
    with _connect(target) as client:
        client.delete_segments(stream, topic, partition, count)
    # The node retires at most what is sealed, and answers the same when there is less.
    return (
        f"deleted the oldest {count} sealed segment(s) of partition {partition} of topic "
        f"{topic!r} of stream {stream!r}, or all it had if fewer (the open segment stays)"
    )


# --- consumer groups and offsets ---------------------------------------------------------


def group_create(
    target: Target, stream: str, topic: str, name: str, *, group_id: int | None = None
) -> str:
    """Create a consumer group. ``group_id`` is the iggy CLI's ``-g``: Iggy 0.9's
    CREATE_CONSUMER_GROUP carries no id, so the server assigns one; when it is not the
    one asked for, the answer says so rather than pass it over."""
    with _connect(target) as client:
        details = client.create_consumer_group(stream, topic, name)
    text = (
        f"created consumer group {details.group.name!r} (id {details.group.id}) on topic "
        f"{topic!r} of stream {stream!r}"
    )
    if group_id is not None and group_id != details.group.id:
        text += (
            f"\nnote: id {group_id} was asked for; the server assigns consumer group ids "
            "(Iggy 0.9's request carries none)"
        )
    return text


def group_get(target: Target, stream: str, topic: str, group: str, *, as_json: bool) -> str:
    with _connect(target) as client:
        details = client.get_consumer_group(stream, topic, group)
    if details is None:
        return f"no consumer group {group!r} on topic {topic!r} of stream {stream!r}"
    if as_json:
        return _json(details)
    info = details.group
    lines = [
        f"consumer group {info.name!r} (id {info.id}): {info.partitions_count} partition(s), "
        f"{info.members_count} member(s)"
    ]
    lines += [
        f"  member {m.id}: partitions {', '.join(map(str, m.partitions)) or 'none'}"
        for m in details.members
    ]
    return "\n".join(lines)


def group_list(target: Target, stream: str, topic: str, *, as_json: bool) -> str:
    with _connect(target) as client:
        groups = client.get_consumer_groups(stream, topic)
    if as_json:
        return _json(groups)
    rows = [(g.id, g.partitions_count, g.members_count, g.name) for g in groups]
    return _table(("id", "partitions", "members", "name"), rows)


def group_delete(target: Target, stream: str, topic: str, group: str) -> str:
    with _connect(target) as client:
        client.delete_consumer_group(stream, topic, group)
    return f"deleted consumer group {group!r} of topic {topic!r} of stream {stream!r}"


def _consumer(consumer: str, kind: str) -> ConsumerRef:
    if kind == "consumer-group":
        return ConsumerRef.group(consumer)
    return ConsumerRef.single(consumer)


def offset_get(
    target: Target,
    consumer: str,
    stream: str,
    topic: str,
    partition: int,
    *,
    kind: str,
    as_json: bool,
) -> str:
    with _connect(target) as client:
        stored = client.get_consumer_offset(
            stream, topic, consumer=_consumer(consumer, kind), partition_id=partition
        )
    if stored is None:
        return f"no offset stored for {kind} {consumer!r} on partition {partition}"
    if as_json:
        return _json(stored)
    return (
        f"{kind} {consumer!r}, partition {stored.partition_id}: stored offset "
        f"{stored.stored_offset}, newest offset {stored.current_offset}"
    )


def offset_set(
    target: Target,
    consumer: str,
    stream: str,
    topic: str,
    partition: int,
    offset: int,
    *,
    kind: str,
) -> str:
    with _connect(target) as client:
        client.store_consumer_offset(
            stream, topic, offset, consumer=_consumer(consumer, kind), partition_id=partition
        )
    return f"stored offset {offset} for {kind} {consumer!r} on partition {partition}"


def offset_delete(
    target: Target, consumer: str, stream: str, topic: str, partition: int, *, kind: str
) -> str:
    with _connect(target) as client:
        client.delete_consumer_offset(
            stream, topic, consumer=_consumer(consumer, kind), partition_id=partition
        )
    return f"deleted the stored offset of {kind} {consumer!r} on partition {partition}"


# --- clients, me, ping -------------------------------------------------------------------


def _client_lines(details: ClientInfoDetails) -> list[str]:
    lines = [
        f"client {details.client_id}: user {_user_of(details.user_id)}, "
        f"{_transport(details.transport)} from {details.address}",
    ]
    lines += [
        f"  consumer group {g.group_id} of topic {g.topic_id} of stream {g.stream_id}"
        for g in details.consumer_groups
    ]
    return lines


def client_get(target: Target, client_id: int, *, as_json: bool) -> str:
    with _connect(target) as client:
        details = client.get_client(client_id)
    if details is None:
        return f"no client {client_id} on {target.address}"
    return _json(details) if as_json else "\n".join(_client_lines(details))


def client_list(target: Target, *, as_json: bool) -> str:
    with _connect(target) as client:
        clients = client.get_clients()
    if as_json:
        return _json(clients)
    rows = [
        (
            c.client_id,
            _user_of(c.user_id),
            _transport(c.transport),
            c.consumer_groups_count,
            c.address,
        )
        for c in clients
    ]
    return _table(("client", "user", "transport", "groups", "address"), rows)


def me(target: Target, *, as_json: bool) -> str:
    with _connect(target) as client:
        details = client.get_me()
    return _json(details) if as_json else "\n".join(_client_lines(details))


def ping(address: str, count: int, tls: Tls | None = None) -> str:
    """``count`` pings (no login: PING is served before one), each timed."""
    assert count > 0
    client = Client(client_config(address, tls, TIMEOUT_S))
    times_ms: list[float] = []
    try:
        for index in range(count):
            if index:
                time.sleep(PING_INTERVAL_S)
            started = time.perf_counter()
            client.ping()
            times_ms.append((time.perf_counter() - started) * 1000)
    finally:
        client.close()
    lines = [f"ping {address}: {ms:.3f} ms" for ms in times_ms]
    mean = sum(times_ms) / len(times_ms)
    lines.append(
        f"{len(times_ms)} ping(s): min {min(times_ms):.3f} ms, avg {mean:.3f} ms, "
        f"max {max(times_ms):.3f} ms"
    )
    return "\n".join(lines)
