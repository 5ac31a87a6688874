"""Record the official apache-iggy 0.9.0 SDK on the wire and save golden vectors.

Run `python -m tests.golden.record` (optionally `--out DIR`, default this package's
directory). It starts a recording TCP server on 127.0.0.1 (ephemeral ports), drives the SDK
through every call of docs/protocol.md section 5, answers each request with a reply built
by our encoder (`sdk.wire`) that must equal the frame hand-built from the docs by
`tests.golden.replies` (deliberately malformed probes are hand-built alone), and writes:

- `frames/NNN-<step>.request.bin`: the frame exactly as the SDK sent it;
- `frames/NNN-<step>.reply.bin`: the frame the recorder answered with;
- `manifest.json`: for every frame the SDK call, command code and name, operation, the
  request fields as `tests.golden.layouts` reads them, the reply's kind and typed fields,
  whether the SDK accepted the reply, and which fields differ between runs.

Theory of operation: each step names the SDK call, the command codes it must produce (in
order) and the reply for each. The server answers strictly from that plan and records
every frame, so an unexpected frame fails the recording instead of being guessed at.
After each call the step checks the Python objects the SDK returned against the values
put into the replies: a reply the SDK decodes to our values confirms its layout.

Invariants:
1. Only 127.0.0.1 is bound; every wait is bounded by a timeout.
2. Everything started here is stopped here: the listeners close, every connection is
   aborted from the server side (which ends the SDK clients' sockets) and its task awaited.
3. A recording either completes every step or writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import shutil
import struct
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash
from apache_iggy import (
    AutoCommit,
    Consumer,
    Durability,
    GlobalPermissions,
    IggyClient,
    IggyExpiry,
    MaxTopicSize,
    Partitioning,
    Permissions,
    PollingStrategy,
    ReceiveMessage,
    SendMessage,
    StreamPermissions,
    TcpConfig,
    TcpReconnectionConfig,
    TopicPermissions,
    UserStatus,
)

from sdk.wire import (
    EvictionReason,
    RequestHeader,
    build_eviction_frame,
    build_reply_frame,
    encode_reply_body,
    result_rejected,
)
from tests.golden import replies as R
from tests.golden.layouts import (
    BATCH_HEADER_SIZE,
    CODE_BY_OPERATION,
    COMMAND_NAMES,
    FRAME_HEADER_SIZE,
    HEADER_SIZE,
    OPERATION_NON_REPLICATED,
    OPERATION_REGISTER,
    RESULT_FRAMED_OPERATIONS,
    describe_request_body,
    describe_request_header,
)
from tests.golden.typed import reply_payload

HOST = "127.0.0.1"
FRAME_SIZE_MAX = 1 << 20
CALL_TIMEOUT_SECONDS = 10.0
IO_TIMEOUT_SECONDS = 5.0
# Heartbeat pings would interleave with the calls under test; push them out of the run.
HEARTBEAT_INTERVAL = datetime.timedelta(hours=1)

PROTOCOL_VERSION = (0 << 20) | (11 << 10) | 0  # 0.11.0, the wheel's own version
# Iggy fills the version window of an eviction only for reason 14 (IncompatibleProtocol).
DEFAULT_WINDOW = (0, 0)
SERVER_VERSION = "0.9.0"
USER_ID = 1
FIRST_OP = 41  # the register commits at op 42, which becomes the session


# The world the replies describe. Values are chosen to be distinct from each other so a
# field read from the wrong offset shows up as a wrong value.

CREATED_AT = 1_700_000_000_000_001
STREAM_ID = 3
TOPIC_ID = 0
GROUP_ID = 7
MEMBER_ID = 11

PARTITIONS = [
    R.Partition(0, CREATED_AT + 10, 1, 99, 4096, 100),
    R.Partition(1, CREATED_AT + 11, 2, 199, 8192, 200),
    R.Partition(2, CREATED_AT + 12, 3, 299, 12288, 300),
]
EVENTS = R.Topic(
    id=TOPIC_ID,
    created_at=CREATED_AT + 1,
    message_expiry=3_600_000_000,
    compression_algorithm=2,
    max_topic_size=1_000_000_000,
    size_bytes=24_576,
    messages_count=600,
    name="events",
    options=R.string_options({"durability": "persisted"}),
    derived_options=R.string_options({"segment_size": "1073741824"}),
    partitions=PARTITIONS,
)
AUDIT = R.Topic(
    id=1,
    created_at=CREATED_AT + 2,
    message_expiry=0,
    compression_algorithm=1,
    max_topic_size=(1 << 64) - 1,
    size_bytes=0,
    messages_count=0,
    name="audit",
    options=b"",
    derived_options=b"",
    partitions=[R.Partition(0, CREATED_AT + 20, 1, 0, 0, 0)],
)
ORDERS = R.Stream(
    id=STREAM_ID,
    created_at=CREATED_AT,
    size_bytes=24_576,
    messages_count=600,
    name="orders",
    options=b"",
    topics=[EVENTS, AUDIT],
)
NEW_STREAM = R.Stream(
    id=STREAM_ID, created_at=CREATED_AT, size_bytes=0, messages_count=0, name="orders", options=b""
)
BILLING = R.Stream(
    id=4,
    created_at=CREATED_AT + 5,
    size_bytes=77,
    messages_count=1,
    name="billing",
    options=R.string_options({"owner": "finance"}),
)
WORKERS = R.Group(
    id=GROUP_ID,
    partitions_count=3,
    name="workers",
    members=[R.Member(MEMBER_ID, [0, 2]), R.Member(12, [1])],
)
NEW_WORKERS = R.Group(id=GROUP_ID, partitions_count=3, name="workers", members=[])
AUDITORS = R.Group(id=8, partitions_count=3, name="auditors", members=[])
STATS = R.Stats(
    process_id=4242,
    cpu_usage=12.5,
    total_cpu_usage=50.25,
    memory_usage=1_000_001,
    total_memory=16_000_002,
    available_memory=8_000_003,
    run_time=3_600_000_000,
    start_time=1_700_000_000_000_000,
    read_bytes=5_000_004,
    written_bytes=6_000_005,
    messages_size_bytes=7_000_006,
    streams_count=2,
    topics_count=3,
    partitions_count=4,
    segments_count=5,
    messages_count=601,
    clients_count=6,
    consumer_groups_count=7,
    hostname="node-0",
    os_name="Linux",
    os_version="6.1",
    kernel_version="6.1.0-test",
    iggy_server_version=SERVER_VERSION,
    iggy_server_semver=9000,
    cache_metrics=[R.CacheMetric(STREAM_ID, TOPIC_ID, 1, 10, 30, 0.25)],
    threads_count=8,
    free_disk_space=9_000_007,
    total_disk_space=10_000_008,
)
POLLED = R.Batch(
    partition_id=1,
    base_offset=40,
    base_timestamp=1_700_000_100_000_000,
    origin_timestamp=1_700_000_099_000_000,
    messages=[
        R.Message(id=501, payload=b"first", user_headers=b"", timestamp_delta=0),
        R.Message(
            id=502,
            payload=b"second",
            user_headers=R.key_values([(2, b"trace", 2, b"abc"), (2, b"n", 11, R.u32(7))]),
            timestamp_delta=250,
        ),
    ],
)


# Replies.


@dataclass
class Reply:
    """The planned answer to one request: its command code and how to build the frame."""

    code: int
    kind: str
    # The typed values of the payload (JSON-able after `jsonable`), or a function of the
    # recorder for values known only when the request arrives (the session).
    fields: Any = None
    payload: bytes | Callable[[Recorder], bytes] = b""
    status: int = 0
    rejection: int = 0
    eviction: int = 0
    # A probe: send the hand-built payload as the whole body, bypassing our encoder and
    # any result section (used for deliberately malformed replies).
    raw_body: bool = False
    # Eviction window: (server_protocol_version, server_protocol_version_min).
    versions: tuple[int, int] = DEFAULT_WINDOW
    # Overwrite every echoed reply header field with junk (a probe of what the SDK reads).
    junk_echo: bool = False


def jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


@dataclass
class Exchange:
    index: int
    connection: int
    port: int
    step: str
    call: str
    request: bytes
    reply: bytes
    plan: Reply
    op: int
    commit: int
    fields: Any
    built_by: str


@dataclass
class Step:
    name: str
    call: str
    replies: list[Reply]
    accepted: bool = True
    checks: list[str] = field(default_factory=list)
    error: str = ""


class RecordingError(RuntimeError):
    """The SDK did not behave as the plan says; nothing is written."""


class Recorder:
    """A TCP server that answers SDK requests from a plan and keeps every frame."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []
        self.steps: list[Step] = []
        self.ports: list[int] = []
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._planned_done = asyncio.Event()
        self._plan: list[Reply] = []
        self._step: Step | None = None
        self._connections = 0
        self._op = FIRST_OP
        self.session = FIRST_OP + 1
        self.request = b""
        """The request being answered (a reply may echo its client id or session)."""
        self.failure: RecordingError | None = None

    async def start(self, listeners: int) -> None:
        for _ in range(listeners):
            server = await asyncio.start_server(self._serve, HOST, 0)
            self._servers.append(server)
            self.ports.append(server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        # Aborting the transports ends every pending read with IncompleteReadError.
        for writer in list(self._writers):
            writer.transport.abort()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=IO_TIMEOUT_SECONDS)
        for server in self._servers:
            await asyncio.wait_for(server.wait_closed(), IO_TIMEOUT_SECONDS)
        self._servers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self._connections += 1
        connection = self._connections
        port = writer.get_extra_info("sockname")[1]
        try:
            while True:
                # Idle between calls is legitimate; stop() cancels this read.
                header = await reader.readexactly(HEADER_SIZE)
                size = struct.unpack_from("<I", header, 48)[0]
                if not HEADER_SIZE <= size <= FRAME_SIZE_MAX:
                    raise RecordingError(f"frame size {size} out of range")
                body = await asyncio.wait_for(
                    reader.readexactly(size - HEADER_SIZE), IO_TIMEOUT_SECONDS
                )
                reply = self._answer(connection, port, header + body)
                if reply is None:
                    break
                writer.write(reply)
                await asyncio.wait_for(writer.drain(), IO_TIMEOUT_SECONDS)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except RecordingError as error:
            self.failure = error
        finally:
            writer.close()
            self._writers.discard(writer)
            self._tasks.discard(task)

    def _answer(self, connection: int, port: int, request: bytes) -> bytes | None:
        step = self._step
        operation = request[176]
        if operation == OPERATION_NON_REPLICATED:
            code = struct.unpack_from("<I", request, 196)[0]
        else:
            code = CODE_BY_OPERATION.get(operation, -1)
        if step is None or not self._plan:
            where = step.name if step else "between steps"
            raise RecordingError(f"unplanned request code {code} ({where})")
        plan = self._plan.pop(0)
        if not self._plan:
            self._planned_done.set()
        if plan.code != code:
            raise RecordingError(f"{step.name}: expected code {plan.code}, SDK sent {code}")
        op = commit = 0
        if operation != OPERATION_NON_REPLICATED and not plan.status and not plan.eviction:
            self._op += 1
            op = commit = self._op
            if operation == OPERATION_REGISTER:
                self.session = op
        self.request = request
        fields = jsonable(plan.fields(self) if callable(plan.fields) else plan.fields)
        frame, built_by = self.build_reply(request, plan, fields, op, commit)
        self.exchanges.append(
            Exchange(
                len(self.exchanges),
                connection,
                port,
                step.name,
                step.call,
                request,
                frame,
                plan,
                op,
                commit,
                fields,
                built_by,
            )
        )
        return frame

    def build_reply(
        self, request: bytes, plan: Reply, fields: Any, op: int, commit: int
    ) -> tuple[bytes, str]:
        """The reply frame and who built it.

        Frames come from our encoder (`sdk.wire`) and must equal the frames hand-built
        from docs/protocol.md (`tests.golden.replies`); a mismatch stops the recording.
        Only the deliberately malformed probes are hand-built alone.
        """
        header = RequestHeader.unpack_from(request)
        if plan.eviction:
            version, version_min = plan.versions
            hand = R.eviction_frame(request[128:144], plan.eviction, version, version_min)
            ours = build_eviction_frame(
                header.client,
                EvictionReason(plan.eviction),
                server_protocol_version=version,
                server_protocol_version_min=version_min,
            )
            return cross_checked(hand, bytes(ours), plan), "sdk.wire"
        if plan.junk_echo:
            junk = bytearray(R.reply_frame(request, b""))
            junk[128:208] = b"\xab" * 80  # request_checksum, context, client .. request
            struct.pack_into("<I", junk, 52, 77)  # view
            junk[61] = 9  # replica
            return bytes(junk), "hand (probe)"
        if plan.status:
            hand = R.reply_frame(request, b"", status=plan.status)
            denied = bytes(build_reply_frame(header, status=plan.status))
            return cross_checked(hand, denied, plan), "sdk.wire"
        payload = plan.payload(self) if callable(plan.payload) else plan.payload
        if plan.rejection:
            hand_body = R.result_error(plan.rejection)
            ours_body = result_rejected(plan.rejection)
        elif plan.raw_body:
            hand_body = ours_body = payload
        else:
            framed = request[176] in RESULT_FRAMED_OPERATIONS or request[176] == OPERATION_REGISTER
            hand_body = R.result_ok(payload) if framed else payload
            typed = reply_payload(plan.kind, fields)
            if typed is None:
                raise RecordingError(f"no typed payload for reply kind {plan.kind}")
            ours_body = encode_reply_body(header.operation, typed)
        hand = R.reply_frame(request, hand_body, op=op, commit=commit)
        ours = bytes(build_reply_frame(header, ours_body, op=op, commit=commit))
        built_by = "hand (probe)" if plan.raw_body else "sdk.wire"
        return cross_checked(hand, ours, plan), built_by

    async def run(
        self,
        name: str,
        call: str,
        action: Callable[[], Awaitable[Any]],
        replies: Sequence[Reply],
        check: Callable[[Any], list[str]] | None = None,
        *,
        expect_error: str | None = None,
    ) -> Any:
        """Run one SDK call against its planned replies and check what it returned."""
        step = Step(name, call, list(replies))
        self._step = step
        self._plan = list(replies)
        self._planned_done.clear()
        result: Any = None
        try:
            result = await asyncio.wait_for(action(), CALL_TIMEOUT_SECONDS)
        except RecordingError:
            raise
        except Exception as error:  # the SDK raises RuntimeError and friends
            if self.failure is not None:
                raise self.failure from error
            if expect_error is None:
                raise RecordingError(f"{name}: SDK raised {error!r}") from error
            if expect_error not in str(error):
                raise RecordingError(f"{name}: expected {expect_error!r}, got {error!r}") from error
            step.accepted = False
            step.error = str(error)
        else:
            if expect_error is not None:
                raise RecordingError(f"{name}: expected an error {expect_error!r}")
        if self._plan:
            # Some frames (the first heartbeat ping) are sent after the call returns.
            try:
                await asyncio.wait_for(self._planned_done.wait(), IO_TIMEOUT_SECONDS)
            except TimeoutError:
                missing = [r.code for r in self._plan]
                raise RecordingError(f"{name}: SDK never sent codes {missing}") from None
        if self.failure is not None:
            raise self.failure
        if check is not None and expect_error is None:
            step.checks = check(result)
        self.steps.append(step)
        self._step = None
        return result


def cross_checked(hand: bytes, ours: bytes, plan: Reply) -> bytes:
    """Our encoder's frame, refused unless it equals the frame built from the docs."""
    if hand != ours:
        raise RecordingError(f"sdk.wire and the hand-built {plan.kind} reply differ")
    return ours


# Checks of decoded values.


def expect(label: str, actual: Any, wanted: Any) -> str:
    if actual != wanted:
        raise RecordingError(f"{label}: SDK decoded {actual!r}, reply carried {wanted!r}")
    return f"{label} == {wanted!r}"


def check_stream(prefix: str, sdk: Any, s: R.Stream) -> list[str]:
    return [
        expect(f"{prefix}.id", sdk.id, s.id),
        expect(f"{prefix}.created_at", sdk.created_at, s.created_at),
        expect(f"{prefix}.name", sdk.name, s.name),
        expect(f"{prefix}.size", sdk.size, s.size_bytes),
        expect(f"{prefix}.messages_count", sdk.messages_count, s.messages_count),
        expect(f"{prefix}.topics_count", sdk.topics_count, len(s.topics)),
    ]


def check_topic(prefix: str, sdk: Any, t: R.Topic) -> list[str]:
    checks = [
        expect(f"{prefix}.id", sdk.id, t.id),
        expect(f"{prefix}.created_at", sdk.created_at, t.created_at),
        expect(f"{prefix}.name", sdk.name, t.name),
        expect(f"{prefix}.size", sdk.size, t.size_bytes),
        expect(f"{prefix}.messages_count", sdk.messages_count, t.messages_count),
        expect(f"{prefix}.partitions_count", sdk.partitions_count, len(t.partitions)),
        expect(
            f"{prefix}.compression_algorithm",
            sdk.compression_algorithm.lower(),
            {1: "none", 2: "gzip"}[t.compression_algorithm],
        ),
    ]
    expiry = sdk.message_expiry
    if t.message_expiry in (0, (1 << 64) - 1):
        checks.append(expect(f"{prefix}.message_expiry", type(expiry).__name__, "NeverExpire"))
    else:
        checks.append(
            expect(
                f"{prefix}.message_expiry",
                expiry.duration,
                datetime.timedelta(microseconds=t.message_expiry),
            )
        )
    size = sdk.max_topic_size
    if t.max_topic_size == (1 << 64) - 1:
        checks.append(expect(f"{prefix}.max_topic_size", type(size).__name__, "Unlimited"))
    else:
        checks.append(expect(f"{prefix}.max_topic_size", size.bytes, t.max_topic_size))
    options = {str(k.value): str(v.value) for k, v in sdk.options.items()}
    derived = {str(k.value): str(v.value) for k, v in sdk.derived_options.items()}
    checks.append(expect(f"{prefix}.options", options, decode_string_options(t.options)))
    checks.append(
        expect(f"{prefix}.derived_options", derived, decode_string_options(t.derived_options))
    )
    return checks


def decode_string_options(block: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    position = 0
    while position < len(block):
        key_len = struct.unpack_from("<I", block, position + 1)[0]
        key = block[position + 5 : position + 5 + key_len].decode()
        position += 5 + key_len
        value_len = struct.unpack_from("<I", block, position + 1)[0]
        out[key] = block[position + 5 : position + 5 + value_len].decode()
        position += 5 + value_len
    return out


def check_partitions(prefix: str, sdk: Any, partitions: list[R.Partition]) -> list[str]:
    checks = [expect(f"{prefix}.len", len(sdk), len(partitions))]
    for i, (got, p) in enumerate(zip(sdk, partitions, strict=True)):
        checks += [
            expect(f"{prefix}[{i}].id", got.id, p.id),
            expect(f"{prefix}[{i}].created_at", got.created_at, p.created_at),
            expect(f"{prefix}[{i}].segments_count", got.segments_count, p.segments_count),
            expect(f"{prefix}[{i}].current_offset", got.current_offset, p.current_offset),
            expect(f"{prefix}[{i}].size", got.size, p.size_bytes),
            expect(f"{prefix}[{i}].messages_count", got.messages_count, p.messages_count),
        ]
    return checks


def check_group(prefix: str, sdk: Any, g: R.Group, *, details: bool) -> list[str]:
    checks = [
        expect(f"{prefix}.id", sdk.id, g.id),
        expect(f"{prefix}.name", sdk.name, g.name),
        expect(f"{prefix}.partitions_count", sdk.partitions_count, g.partitions_count),
        expect(f"{prefix}.members_count", sdk.members_count, len(g.members)),
    ]
    if details:
        members = [(m.id, m.partitions_count, list(m.partitions)) for m in sdk.members]
        wanted = [(m.id, len(m.partitions), m.partitions) for m in g.members]
        checks.append(expect(f"{prefix}.members", members, wanted))
    return checks


def check_polled(sdk: list[ReceiveMessage], batch: R.Batch) -> list[str]:
    checks = [expect("len(messages)", len(sdk), len(batch.messages))]
    for i, (got, m) in enumerate(zip(sdk, batch.messages, strict=True)):
        p = f"messages[{i}]"
        checks += [
            expect(f"{p}.payload", got.payload(), m.payload),
            expect(f"{p}.id", got.id(), m.id),
            expect(f"{p}.offset", got.offset(), batch.base_offset + batch.first_offset_delta + i),
            expect(f"{p}.timestamp", got.timestamp(), batch.base_timestamp),
            expect(
                f"{p}.origin_timestamp",
                got.origin_timestamp(),
                batch.origin_timestamp + m.timestamp_delta,
            ),
            expect(f"{p}.partition_id", got.partition_id(), batch.partition_id),
        ]
        frame = R.batch_bytes(batch)
        checks.append(expect(f"{p}.checksum", got.checksum(), frame_checksums(frame)[i]))
        headers = got.user_headers()
        if m.user_headers:
            assert headers is not None
            plain = {str(k.value): v.value for k, v in headers.items()}
            checks.append(expect(f"{p}.user_headers", plain, {"trace": "abc", "n": 7}))
        else:
            checks.append(expect(f"{p}.user_headers", headers, None))
    return checks


def frame_checksums(batch: bytes) -> list[int]:
    out: list[int] = []
    position = BATCH_HEADER_SIZE
    while position < len(batch):
        out.append(struct.unpack_from("<Q", batch, position)[0])
        headers_len, payload_len = struct.unpack_from("<II", batch, position + 32)
        position += FRAME_HEADER_SIZE + headers_len + payload_len
    return out


def single_node_list(recorder: Recorder) -> list[R.Node]:
    return [R.Node("node-0", HOST, recorder.ports[0], 8080, 3000, 8092, 0, 0)]


def two_node_list(recorder: Recorder) -> list[R.Node]:
    return [
        R.Node("node-a", HOST, recorder.ports[0], 8080, 3000, 8092, 1, 0),
        R.Node("node-b", HOST, recorder.ports[1], 8081, 3001, 8093, 0, 0),
    ]


def single_node(recorder: Recorder) -> bytes:
    return R.cluster_metadata("viewstream", single_node_list(recorder))


def two_nodes(recorder: Recorder) -> bytes:
    return R.cluster_metadata("viewstream", two_node_list(recorder))


def cluster_reply(recorder: Recorder, nodes: list[R.Node]) -> Reply:
    payload = R.cluster_metadata("viewstream", nodes)
    return Reply(12, "cluster_metadata", {"name": "viewstream", "nodes": nodes}, payload)


def login_fields(recorder: Recorder) -> dict[str, Any]:
    return {
        "user_id": USER_ID,
        "session": recorder.session,
        "server_protocol_version": PROTOCOL_VERSION,
        "server_version": SERVER_VERSION,
    }


def login_reply(recorder: Recorder) -> bytes:
    return R.login_reply(USER_ID, recorder.session, PROTOCOL_VERSION, SERVER_VERSION)


LOGIN = Reply(40, "login", login_fields, login_reply)


def login_replies(recorder: Recorder) -> list[Reply]:
    meta = cluster_reply(recorder, single_node_list(recorder))
    return [LOGIN, meta, meta]


def new_client(port: int) -> IggyClient:
    config = TcpConfig(
        server_address=f"{HOST}:{port}",
        heartbeat_interval=HEARTBEAT_INTERVAL,
        reconnection=TcpReconnectionConfig(enabled=False),
    )
    return IggyClient(config)


# The scenario.


async def scenario(rec: Recorder) -> None:
    client = new_client(rec.ports[0])
    empty = Reply(1, "empty")

    await rec.run("connect", "client.connect()", client.connect, [empty])
    await rec.run(
        "login_user",
        'client.login_user("iggy", "secret")',
        lambda: client.login_user("iggy", "secret"),
        login_replies(rec),
    )
    await rec.run("ping", "client.ping()", client.ping, [empty])
    await rec.run(
        "ping_junk_echo",
        "client.ping()  # probe: every echoed reply header field replaced with junk",
        client.ping,
        [Reply(1, "empty", junk_echo=True)],
    )

    def check_stats(s: Any) -> list[str]:
        return [
            expect("process_id", s.process_id, STATS.process_id),
            expect("cpu_usage", s.cpu_usage, STATS.cpu_usage),
            expect("total_cpu_usage", s.total_cpu_usage, STATS.total_cpu_usage),
            expect("memory_usage", s.memory_usage, STATS.memory_usage),
            expect("total_memory", s.total_memory, STATS.total_memory),
            expect("available_memory", s.available_memory, STATS.available_memory),
            expect("run_time", s.run_time, datetime.timedelta(microseconds=STATS.run_time)),
            expect("start_time", s.start_time, STATS.start_time),
            expect("read_bytes", s.read_bytes, STATS.read_bytes),
            expect("written_bytes", s.written_bytes, STATS.written_bytes),
            expect("messages_size_bytes", s.messages_size_bytes, STATS.messages_size_bytes),
            expect("streams_count", s.streams_count, STATS.streams_count),
            expect("topics_count", s.topics_count, STATS.topics_count),
            expect("partitions_count", s.partitions_count, STATS.partitions_count),
            expect("segments_count", s.segments_count, STATS.segments_count),
            expect("messages_count", s.messages_count, STATS.messages_count),
            expect("clients_count", s.clients_count, STATS.clients_count),
            expect("consumer_groups_count", s.consumer_groups_count, STATS.consumer_groups_count),
            expect("hostname", s.hostname, STATS.hostname),
            expect("os_name", s.os_name, STATS.os_name),
            expect("os_version", s.os_version, STATS.os_version),
            expect("kernel_version", s.kernel_version, STATS.kernel_version),
            expect("iggy_server_version", s.iggy_server_version, STATS.iggy_server_version),
            expect("iggy_server_semver", s.iggy_server_semver, STATS.iggy_server_semver),
            expect(
                "cache_metrics",
                {
                    (k.stream_id, k.topic_id, k.partition_id): (v.hits, v.misses, v.hit_ratio)
                    for k, v in s.cache_metrics.items()
                },
                {
                    (m.stream_id, m.topic_id, m.partition_id): (m.hits, m.misses, m.hit_ratio)
                    for m in STATS.cache_metrics
                },
            ),
            expect("threads_count", s.threads_count, STATS.threads_count),
            expect("free_disk_space", s.free_disk_space, STATS.free_disk_space),
            expect("total_disk_space", s.total_disk_space, STATS.total_disk_space),
        ]

    await rec.run(
        "get_stats",
        "client.get_stats()",
        client.get_stats,
        [Reply(10, "stats", STATS, R.stats(STATS))],
        check_stats,
    )

    me = R.client_details(5, USER_ID, 1, "127.0.0.1:50000", [(STREAM_ID, TOPIC_ID, GROUP_ID)])
    me_fields = {
        "client_id": 5,
        "user_id": USER_ID,
        "transport": 1,
        "address": "127.0.0.1:50000",
        "consumer_groups": [[STREAM_ID, TOPIC_ID, GROUP_ID]],
    }
    await rec.run(
        "get_me",
        "client.send_binary_request(20, b'')",
        lambda: client.send_binary_request(20, b""),
        [Reply(20, "client_details", me_fields, me)],
        lambda raw: [expect("raw reply body", bytes(raw), me)],
    )
    await rec.run(
        "get_cluster_metadata",
        "client.send_binary_request(12, b'')",
        lambda: client.send_binary_request(12, b""),
        [cluster_reply(rec, single_node_list(rec))],
        lambda raw: [expect("raw reply body", bytes(raw), single_node(rec))],
    )

    # Streams.
    await rec.run(
        "create_stream",
        'client.create_stream("orders")',
        lambda: client.create_stream("orders"),
        [Reply(202, "stream_details", NEW_STREAM, R.stream_details(NEW_STREAM))],
    )
    await rec.run(
        "create_stream_rejected",
        'client.create_stream("orders")  # committed rejection 1012',
        lambda: client.create_stream("orders"),
        [Reply(202, "stream_details", None, rejection=1012)],
        expect_error="",
    )
    await rec.run(
        "get_stream_by_name",
        'client.get_stream("orders")',
        lambda: client.get_stream("orders"),
        [Reply(200, "stream_details", ORDERS, R.stream_details(ORDERS))],
        lambda s: (
            check_stream("stream", s, ORDERS)
            + check_topic("stream.topics[0]", s.topics[0], EVENTS)
            + check_topic("stream.topics[1]", s.topics[1], AUDIT)
        ),
    )
    await rec.run(
        "get_stream_by_id",
        f"client.get_stream({STREAM_ID})",
        lambda: client.get_stream(STREAM_ID),
        [Reply(200, "stream_details", ORDERS, R.stream_details(ORDERS))],
        lambda s: check_stream("stream", s, ORDERS),
    )
    await rec.run(
        "get_stream_missing",
        'client.get_stream("missing")  # empty body = not found',
        lambda: client.get_stream("missing"),
        [Reply(200, "empty")],
        lambda s: [expect("result", s, None)],
    )
    await rec.run(
        "get_streams",
        "client.get_streams()",
        client.get_streams,
        [Reply(201, "streams", [ORDERS, BILLING], R.streams_list([ORDERS, BILLING]))],
        lambda ss: (
            check_stream("streams[0]", ss[0], ORDERS) + check_stream("streams[1]", ss[1], BILLING)
        ),
    )
    await rec.run(
        "get_streams_unauthorized",
        "client.get_streams()  # header status 41",
        client.get_streams,
        [Reply(201, "empty", status=41)],
        expect_error="",
    )
    await rec.run(
        "update_stream",
        f'client.update_stream({STREAM_ID}, "orders-v2")',
        lambda: client.update_stream(STREAM_ID, "orders-v2"),
        [Reply(204, "empty")],
    )
    await rec.run(
        "update_stream_with_options",
        'client.update_stream("orders-v2", "orders", options={"retention": "7d"})',
        lambda: client.update_stream("orders-v2", "orders", options={"retention": "7d"}),
        [Reply(204, "empty")],
    )
    await rec.run(
        "purge_stream",
        'client.purge_stream("orders")',
        lambda: client.purge_stream("orders"),
        [Reply(205, "empty")],
    )

    # Topics.
    created = R.Topic(
        id=TOPIC_ID,
        created_at=CREATED_AT + 1,
        message_expiry=0,
        compression_algorithm=1,
        max_topic_size=0,
        size_bytes=0,
        messages_count=0,
        name="events",
        options=b"",
        derived_options=b"",
        partitions=[R.Partition(i, CREATED_AT + 10 + i, 1, 0, 0, 0) for i in range(3)],
    )
    await rec.run(
        "create_topic",
        f'client.create_topic({STREAM_ID}, "events", 3)',
        lambda: client.create_topic(STREAM_ID, "events", 3),
        [Reply(302, "topic_details", created, R.topic_details(created))],
    )
    await rec.run(
        "create_topic_with_options",
        'client.create_topic("orders", "audit", 1, compression_algorithm="gzip", '
        "message_expiry=IggyExpiry.ExpireDuration(timedelta(hours=1)), "
        "max_topic_size=MaxTopicSize.Custom(1_000_000_000), segment_size=16_777_216, "
        "durability=Durability.PERSISTED, consumer_offset_durability=Durability.REPLICATED, "
        "messages_required_to_save=1000, size_of_messages_required_to_save=65536, "
        'preallocate_segments=True, options={"x-custom": "1"})',
        lambda: client.create_topic(
            "orders",
            "audit",
            1,
            compression_algorithm="gzip",
            message_expiry=IggyExpiry.ExpireDuration(datetime.timedelta(hours=1)),
            max_topic_size=MaxTopicSize.Custom(1_000_000_000),
            segment_size=16_777_216,
            durability=Durability.PERSISTED,
            consumer_offset_durability=Durability.REPLICATED,
            messages_required_to_save=1000,
            size_of_messages_required_to_save=65536,
            preallocate_segments=True,
            options={"x-custom": "1"},
        ),
        [Reply(302, "topic_details", AUDIT, R.topic_details(AUDIT))],
    )
    await rec.run(
        "create_topic_never_expire_unlimited",
        f'client.create_topic({STREAM_ID}, "metrics", 2, '
        "message_expiry=IggyExpiry.NeverExpire(), max_topic_size=MaxTopicSize.Unlimited())",
        lambda: client.create_topic(
            STREAM_ID,
            "metrics",
            2,
            message_expiry=IggyExpiry.NeverExpire(),
            max_topic_size=MaxTopicSize.Unlimited(),
        ),
        [Reply(302, "topic_details", AUDIT, R.topic_details(AUDIT))],
    )
    await rec.run(
        "get_topic_by_id",
        f"client.get_topic({STREAM_ID}, {TOPIC_ID})",
        lambda: client.get_topic(STREAM_ID, TOPIC_ID),
        [Reply(300, "topic_details", EVENTS, R.topic_details(EVENTS))],
        lambda t: (
            check_topic("topic", t, EVENTS)
            + check_partitions("topic.partitions", t.partitions, PARTITIONS)
        ),
    )
    await rec.run(
        "get_topic_by_name",
        'client.get_topic("orders", "audit")',
        lambda: client.get_topic("orders", "audit"),
        [Reply(300, "topic_details", AUDIT, R.topic_details(AUDIT))],
        lambda t: check_topic("topic", t, AUDIT),
    )
    await rec.run(
        "get_topic_missing",
        'client.get_topic("orders", "missing")  # empty body = not found',
        lambda: client.get_topic("orders", "missing"),
        [Reply(300, "empty")],
        lambda t: [expect("result", t, None)],
    )
    await rec.run(
        "get_topics",
        f"client.get_topics({STREAM_ID})",
        lambda: client.get_topics(STREAM_ID),
        [Reply(301, "topics", [EVENTS, AUDIT], R.topics_list([EVENTS, AUDIT]))],
        lambda ts: check_topic("topics[0]", ts[0], EVENTS) + check_topic("topics[1]", ts[1], AUDIT),
    )
    await rec.run(
        "update_topic",
        f'client.update_topic({STREAM_ID}, {TOPIC_ID}, "events-v2", compression_algorithm="none", '
        "message_expiry=IggyExpiry.ExpireDuration(timedelta(minutes=5)), "
        "max_topic_size=MaxTopicSize.Custom(2_000_000_000))",
        lambda: client.update_topic(
            STREAM_ID,
            TOPIC_ID,
            "events-v2",
            compression_algorithm="none",
            message_expiry=IggyExpiry.ExpireDuration(datetime.timedelta(minutes=5)),
            max_topic_size=MaxTopicSize.Custom(2_000_000_000),
        ),
        [Reply(304, "empty")],
    )
    await rec.run(
        "update_topic_name_only",
        'client.update_topic("orders", "events-v2", "events")',
        lambda: client.update_topic("orders", "events-v2", "events"),
        [Reply(304, "empty")],
    )
    await rec.run(
        "purge_topic",
        f'client.purge_topic({STREAM_ID}, "events")',
        lambda: client.purge_topic(STREAM_ID, "events"),
        [Reply(305, "empty")],
    )

    # Partitions.
    await rec.run(
        "create_partitions",
        f"client.create_partitions({STREAM_ID}, {TOPIC_ID}, 2)",
        lambda: client.create_partitions(STREAM_ID, TOPIC_ID, 2),
        [Reply(402, "empty")],
    )
    await rec.run(
        "delete_partitions",
        'client.delete_partitions("orders", "events", 1)',
        lambda: client.delete_partitions("orders", "events", 1),
        [Reply(403, "empty")],
    )

    # Messages.
    await send_and_poll(rec, client)

    # Consumer groups.
    await groups(rec, client)

    # Teardown.
    await rec.run(
        "delete_topic",
        f'client.delete_topic({STREAM_ID}, "events")',
        lambda: client.delete_topic(STREAM_ID, "events"),
        [Reply(303, "empty")],
    )
    await rec.run(
        "delete_stream",
        'client.delete_stream("orders")',
        lambda: client.delete_stream("orders"),
        [Reply(203, "empty")],
    )
    await rec.run("logout_user", "client.logout_user()", client.logout_user, [Reply(39, "empty")])
    await rec.run(
        "ping_evicted",
        "client.ping()  # answered with an eviction, reason 1 NoSession",
        client.ping,
        [Reply(1, "eviction", {"reason": 1}, eviction=1)],
        expect_error="",
    )


def confirmations(partition_id: int, base_offset: int) -> Reply:
    entries = [(STREAM_ID, TOPIC_ID, partition_id, base_offset)]
    return Reply(101, "send_confirmations", {"entries": entries}, R.send_confirmations(entries))


def check_confirmations(
    partition_id: int, base_offset: int, rec: Recorder | None = None
) -> Callable[[Any], list[str]]:
    """Check the decoded confirmation and, given `rec`, the partition the SDK chose."""

    def check(response: Any) -> list[str]:
        got = [
            (c.stream_id, c.topic_id, c.partition_id, c.base_offset) for c in response.confirmations
        ]
        checks = [expect("confirmations", got, [(STREAM_ID, TOPIC_ID, partition_id, base_offset)])]
        if rec is not None:
            sent = describe_request_body(101, rec.exchanges[-1].request[HEADER_SIZE:])
            checks.append(
                expect("partitioning on the wire", sent["partitioning"]["value"], partition_id)
            )
        return checks

    return check


async def send_and_poll(rec: Recorder, client: IggyClient) -> None:
    headers = {"trace": "abc", "attempt": 3, "urgent": True, "raw": b"\x00\x01"}
    reply = confirmations(1, 40)
    await rec.run(
        "send_messages_partition_id",
        f"client.send_messages({STREAM_ID}, {TOPIC_ID}, Partitioning.partition_id(1), "
        '[SendMessage(b"hello", id=1001), SendMessage("world", user_headers={"trace": "abc", '
        '"attempt": 3, "urgent": True, "raw": b"\\x00\\x01"}, id=1002)])',
        lambda: client.send_messages(
            STREAM_ID,
            TOPIC_ID,
            Partitioning.partition_id(1),
            [
                SendMessage(b"hello", id=1001),
                SendMessage("world", user_headers=headers, id=1002),
            ],
        ),
        [reply],
        check_confirmations(1, 40),
    )
    # How the SDK picks a kind for each Python value: the narrowest integer kind
    # (unsigned when non-negative), Float32 when the float is exact in 32 bits.
    kinds: dict[str, Any] = {
        "u8": 3,
        "u16": 300,
        "u32": 70_000,
        "u64": 5_000_000_000,
        "u128": 2**70,
        "i8": -1,
        "i16": -300,
        "i64": -(2**40),
        "f32": 1.5,
        "f64": 0.1,
        "zero": 0,
    }
    reply = confirmations(1, 43)
    await rec.run(
        "send_messages_header_kinds",
        f'client.send_messages({STREAM_ID}, {TOPIC_ID}, 1, [SendMessage(b"kinds", '
        f"user_headers={kinds!r}, id=1003)])",
        lambda: client.send_messages(
            STREAM_ID, TOPIC_ID, 1, [SendMessage(b"kinds", user_headers=kinds, id=1003)]
        ),
        [reply],
        check_confirmations(1, 43),
    )
    reply = confirmations(2, 7)
    await rec.run(
        "send_messages_int_partition_sdk_id",
        'client.send_messages("orders", "events", 2, [SendMessage(b"no-id")])',
        lambda: client.send_messages("orders", "events", 2, [SendMessage(b"no-id")]),
        [reply],
        check_confirmations(2, 7),
    )
    # Balanced: the SDK looks the partition count up once (GET_TOPIC), then round-robins.
    reply_a = confirmations(0, 8)
    await rec.run(
        "send_messages_balanced_first",
        f"client.send_messages({STREAM_ID}, {TOPIC_ID}, Partitioning.balanced(), "
        '[SendMessage(b"b1", id=2001)])',
        lambda: client.send_messages(
            STREAM_ID, TOPIC_ID, Partitioning.balanced(), [SendMessage(b"b1", id=2001)]
        ),
        [Reply(300, "topic_details", EVENTS, R.topic_details(EVENTS)), reply_a],
        check_confirmations(0, 8, rec),
    )
    reply_b = confirmations(1, 42)
    await rec.run(
        "send_messages_balanced_second",
        f"client.send_messages({STREAM_ID}, {TOPIC_ID}, Partitioning.balanced(), "
        '[SendMessage(b"b2", id=2002)])',
        lambda: client.send_messages(
            STREAM_ID, TOPIC_ID, Partitioning.balanced(), [SendMessage(b"b2", id=2002)]
        ),
        [reply_b],
        check_confirmations(1, 42, rec),
    )
    key_partition = xxhash.xxh32_intdigest(b"user-42") % len(PARTITIONS)
    reply_k = confirmations(key_partition, 9)
    await rec.run(
        "send_messages_messages_key",
        f"client.send_messages({STREAM_ID}, {TOPIC_ID}, Partitioning.messages_key('user-42'), "
        '[SendMessage(b"k1", id=3001), SendMessage(b"k2", id=3002)])',
        lambda: client.send_messages(
            STREAM_ID,
            TOPIC_ID,
            Partitioning.messages_key("user-42"),
            [SendMessage(b"k1", id=3001), SendMessage(b"k2", id=3002)],
        ),
        [reply_k],
        check_confirmations(key_partition, 9, rec),
    )
    key_partition = xxhash.xxh32_intdigest(b"tenant-7") % len(PARTITIONS)
    reply_k = confirmations(key_partition, 10)
    await rec.run(
        "send_messages_messages_key_bytes",
        f"client.send_messages({STREAM_ID}, {TOPIC_ID}, Partitioning.messages_key(b'tenant-7'), "
        '[SendMessage(b"k3", id=3003)])',
        lambda: client.send_messages(
            STREAM_ID,
            TOPIC_ID,
            Partitioning.messages_key(b"tenant-7"),
            [SendMessage(b"k3", id=3003)],
        ),
        [reply_k],
        check_confirmations(key_partition, 10, rec),
    )
    trailing = R.send_confirmations([(STREAM_ID, TOPIC_ID, 0, 11)]) + b"\x00"
    await rec.run(
        "send_messages_trailing_byte",
        f'client.send_messages({STREAM_ID}, {TOPIC_ID}, 0, [SendMessage(b"t", id=4002)])'
        "  # probe: one confirmation plus a trailing byte",
        lambda: client.send_messages(STREAM_ID, TOPIC_ID, 0, [SendMessage(b"t", id=4002)]),
        [
            Reply(
                101,
                "send_confirmations_trailing_byte",
                {"hex": trailing.hex()},
                trailing,
                raw_body=True,
            )
        ],
        lambda response: [expect("confirmations", list(response.confirmations), [])],
    )
    await rec.run(
        "send_messages_no_confirmations",
        f'client.send_messages({STREAM_ID}, {TOPIC_ID}, 0, [SendMessage(b"e", id=4001)])'
        "  # empty reply body",
        lambda: client.send_messages(STREAM_ID, TOPIC_ID, 0, [SendMessage(b"e", id=4001)]),
        [Reply(101, "empty")],
        lambda response: [expect("confirmations", list(response.confirmations), [])],
    )

    poll_reply = R.poll_reply(1, 599, [POLLED])
    poll_fields = {"partition_id": 1, "current_offset": 599, "batches": [POLLED]}

    def poll(
        name: str,
        call: str,
        action: Callable[[], Awaitable[Any]],
        before: Sequence[Reply] = (),
    ) -> Awaitable[Any]:
        return rec.run(
            name,
            call,
            action,
            [*before, Reply(100, "poll", poll_fields, poll_reply)],
            lambda messages: check_polled(messages, POLLED),
        )

    await poll(
        "poll_offset",
        f"client.poll_messages({STREAM_ID}, {TOPIC_ID}, consumer=Consumer.Single(1), "
        "polling_strategy=PollingStrategy.Offset(40), count=10, auto_commit=False, partition_id=1)",
        lambda: client.poll_messages(
            STREAM_ID,
            TOPIC_ID,
            consumer=Consumer.Single(1),
            polling_strategy=PollingStrategy.Offset(40),
            count=10,
            auto_commit=False,
            partition_id=1,
        ),
    )
    await poll(
        "poll_timestamp",
        'client.poll_messages("orders", "events", consumer=Consumer.Single("alice"), '
        "polling_strategy=PollingStrategy.Timestamp(1_700_000_000_000_000), count=5, "
        "auto_commit=True, partition_id=1)",
        lambda: client.poll_messages(
            "orders",
            "events",
            consumer=Consumer.Single("alice"),
            polling_strategy=PollingStrategy.Timestamp(1_700_000_000_000_000),
            count=5,
            auto_commit=True,
            partition_id=1,
        ),
    )
    await poll(
        "poll_first_no_partition",
        f"client.poll_messages({STREAM_ID}, {TOPIC_ID}, consumer=Consumer.Single(1), "
        "polling_strategy=PollingStrategy.First(), count=1, auto_commit=False)",
        lambda: client.poll_messages(
            STREAM_ID,
            TOPIC_ID,
            consumer=Consumer.Single(1),
            polling_strategy=PollingStrategy.First(),
            count=1,
            auto_commit=False,
        ),
    )
    await poll(
        "poll_last",
        f"client.poll_messages({STREAM_ID}, {TOPIC_ID}, consumer=Consumer.Single(1), "
        "polling_strategy=PollingStrategy.Last(), count=2, auto_commit=False, partition_id=1)",
        lambda: client.poll_messages(
            STREAM_ID,
            TOPIC_ID,
            consumer=Consumer.Single(1),
            polling_strategy=PollingStrategy.Last(),
            count=2,
            auto_commit=False,
            partition_id=1,
        ),
    )
    await poll(
        "poll_next_group_explicit_partition",
        f'client.poll_messages({STREAM_ID}, {TOPIC_ID}, consumer=Consumer.Group("workers"), '
        "polling_strategy=PollingStrategy.Next(), count=100, auto_commit=True, partition_id=1)",
        lambda: client.poll_messages(
            STREAM_ID,
            TOPIC_ID,
            consumer=Consumer.Group("workers"),
            polling_strategy=PollingStrategy.Next(),
            count=100,
            auto_commit=True,
            partition_id=1,
        ),
    )
    sync = R.sync_group(5, [1])
    await poll(
        "poll_next_group_assigned",
        f"client.poll_messages({STREAM_ID}, {TOPIC_ID}, consumer=Consumer.Group({GROUP_ID}), "
        "polling_strategy=PollingStrategy.Next(), count=100, auto_commit=True)",
        lambda: client.poll_messages(
            STREAM_ID,
            TOPIC_ID,
            consumer=Consumer.Group(GROUP_ID),
            polling_strategy=PollingStrategy.Next(),
            count=100,
            auto_commit=True,
        ),
        before=[Reply(606, "sync_group", {"generation": 5, "partitions": [1]}, sync)],
    )
    sentinel = R.poll_reply(0xFFFF_FFFF, 599, [])
    resync = R.sync_group(6, [2])
    await poll(
        "poll_group_resync",
        f"client.poll_messages({STREAM_ID}, {TOPIC_ID}, consumer=Consumer.Group({GROUP_ID}), "
        "polling_strategy=PollingStrategy.Next(), count=100, auto_commit=True)"
        "  # first poll answered with the re-sync sentinel",
        lambda: client.poll_messages(
            STREAM_ID,
            TOPIC_ID,
            consumer=Consumer.Group(GROUP_ID),
            polling_strategy=PollingStrategy.Next(),
            count=100,
            auto_commit=True,
        ),
        before=[
            Reply(
                100,
                "poll",
                {"partition_id": 0xFFFF_FFFF, "current_offset": 599, "batches": []},
                sentinel,
            ),
            Reply(606, "sync_group", {"generation": 6, "partitions": [2]}, resync),
        ],
    )
    repoll = describe_request_body(100, rec.exchanges[-1].request[HEADER_SIZE:])
    if repoll["partition_id"] != 2:
        raise RecordingError("after the re-sync the SDK did not poll its new partition 2")
    rec.steps[-1].checks.append("re-poll partition_id == 2 (the new assignment)")
    await rec.run(
        "poll_group_not_member",
        f'client.poll_messages({STREAM_ID}, {TOPIC_ID}, consumer=Consumer.Group("auditors"), '
        "polling_strategy=PollingStrategy.Next(), count=1, auto_commit=False)"
        "  # empty SYNC_CONSUMER_GROUP reply = not a member",
        lambda: client.poll_messages(
            STREAM_ID,
            TOPIC_ID,
            consumer=Consumer.Group("auditors"),
            polling_strategy=PollingStrategy.Next(),
            count=1,
            auto_commit=False,
        ),
        [Reply(606, "empty")],
        expect_error="",
    )
    empty_poll = R.poll_reply(1, 599, [])
    await rec.run(
        "poll_empty",
        f"client.poll_messages({STREAM_ID}, {TOPIC_ID}, consumer=Consumer.Single(1), "
        "polling_strategy=PollingStrategy.Offset(600), count=10, auto_commit=False, "
        "partition_id=1)",
        lambda: client.poll_messages(
            STREAM_ID,
            TOPIC_ID,
            consumer=Consumer.Single(1),
            polling_strategy=PollingStrategy.Offset(600),
            count=10,
            auto_commit=False,
            partition_id=1,
        ),
        [
            Reply(
                100,
                "poll",
                {"partition_id": 1, "current_offset": 599, "batches": []},
                empty_poll,
            )
        ],
        lambda messages: [expect("len(messages)", len(messages), 0)],
    )
    offset_reply = R.consumer_offset(1, 599, 41)
    offset_request = b"".join(
        [
            b"\x01\x01\x04" + R.u32(1),  # consumer, numeric id 1
            b"\x01\x04" + R.u32(STREAM_ID),
            b"\x01\x04" + R.u32(TOPIC_ID),
            b"\x01" + R.u32(1),  # partition 1
        ]
    )
    await rec.run(
        "get_consumer_offset",
        f"client.send_binary_request(120, bytes.fromhex({offset_request.hex()!r}))",
        lambda: client.send_binary_request(120, offset_request),
        [
            Reply(
                120,
                "consumer_offset",
                {"partition_id": 1, "current_offset": 599, "stored_offset": 41},
                offset_reply,
            )
        ],
        lambda raw: [expect("raw reply body", bytes(raw), offset_reply)],
    )


async def groups(rec: Recorder, client: IggyClient) -> None:
    await rec.run(
        "create_consumer_group",
        f'client.create_consumer_group({STREAM_ID}, {TOPIC_ID}, "workers")',
        lambda: client.create_consumer_group(STREAM_ID, TOPIC_ID, "workers"),
        [Reply(602, "group_details", NEW_WORKERS, R.group_details(NEW_WORKERS))],
    )
    await rec.run(
        "get_consumer_group_by_name",
        'client.get_consumer_group("orders", "events", "workers")',
        lambda: client.get_consumer_group("orders", "events", "workers"),
        [Reply(600, "group_details", WORKERS, R.group_details(WORKERS))],
        lambda g: check_group("group", g, WORKERS, details=True),
    )
    await rec.run(
        "get_consumer_group_missing",
        f"client.get_consumer_group({STREAM_ID}, {TOPIC_ID}, 99)  # empty body = not found",
        lambda: client.get_consumer_group(STREAM_ID, TOPIC_ID, 99),
        [Reply(600, "empty")],
        lambda g: [expect("result", g, None)],
    )
    await rec.run(
        "get_consumer_groups",
        f"client.get_consumer_groups({STREAM_ID}, {TOPIC_ID})",
        lambda: client.get_consumer_groups(STREAM_ID, TOPIC_ID),
        [Reply(601, "groups", [WORKERS, AUDITORS], R.groups_list([WORKERS, AUDITORS]))],
        lambda gs: (
            check_group("groups[0]", gs[0], WORKERS, details=False)
            + check_group("groups[1]", gs[1], AUDITORS, details=False)
        ),
    )
    consumer = await rec.run(
        "consumer_group_init",
        'client.consumer_group("workers", "orders", "events", '
        "auto_commit=AutoCommit.Disabled(), poll_interval=timedelta(milliseconds=100))",
        lambda: client.consumer_group(
            "workers",
            "orders",
            "events",
            auto_commit=AutoCommit.Disabled(),
            poll_interval=datetime.timedelta(milliseconds=100),
        ),
        [
            Reply(200, "stream_details", ORDERS, R.stream_details(ORDERS)),
            Reply(300, "topic_details", EVENTS, R.topic_details(EVENTS)),
            Reply(600, "group_details", WORKERS, R.group_details(WORKERS)),
            Reply(604, "empty"),
        ],
    )
    await rec.run(
        "store_consumer_offset",
        "consumer.store_offset(41, 1)",
        lambda: consumer.store_offset(41, 1),
        [Reply(121, "empty")],
    )
    await rec.run(
        "store_consumer_offset_unframed",
        "consumer.store_offset(42, 1)  # probe: empty body without the result section",
        lambda: consumer.store_offset(42, 1),
        [Reply(121, "empty", raw_body=True)],
        expect_error="",
    )
    await rec.run(
        "delete_consumer_offset",
        "consumer.delete_offset(1)",
        lambda: consumer.delete_offset(1),
        [Reply(122, "empty")],
    )
    await rec.run(
        "join_consumer_group",
        f'client.join_consumer_group({STREAM_ID}, {TOPIC_ID}, "workers")',
        lambda: client.join_consumer_group(STREAM_ID, TOPIC_ID, "workers"),
        [Reply(604, "empty")],
    )
    await rec.run(
        "leave_consumer_group",
        f"client.leave_consumer_group({STREAM_ID}, {TOPIC_ID}, {GROUP_ID})",
        lambda: client.leave_consumer_group(STREAM_ID, TOPIC_ID, GROUP_ID),
        [Reply(605, "empty")],
    )
    await rec.run(
        "delete_consumer_group",
        'client.delete_consumer_group("orders", "events", "workers")',
        lambda: client.delete_consumer_group("orders", "events", "workers"),
        [Reply(603, "empty")],
    )


async def leader_redirect(rec: Recorder) -> None:
    """A second client dials a follower, learns the leader from cluster metadata, moves."""
    client = new_client(rec.ports[0])
    meta_a = cluster_reply(rec, two_node_list(rec))
    await rec.run("redirect_connect", "client.connect()", client.connect, [Reply(1, "empty")])
    login = LOGIN
    await rec.run(
        "redirect_login_user",
        'client.login_user("iggy", "secret")  # node-a answers: node-b leads; SDK moves',
        lambda: client.login_user("iggy", "secret"),
        [login, meta_a, meta_a, login, meta_a],
    )
    moved = {e.port for e in rec.exchanges if e.step == "redirect_login_user"}
    if moved != set(rec.ports[:2]):
        raise RecordingError(f"SDK did not move to the leader: ports {moved}")
    last = [e for e in rec.exchanges if e.step == "redirect_login_user"][-1]
    if last.port != rec.ports[1]:
        raise RecordingError("the last login frames did not reach node-b")
    await rec.run("redirect_ping", "client.ping()", client.ping, [Reply(1, "empty")])
    if rec.exchanges[-1].port != rec.ports[1]:
        raise RecordingError("after the redirect the SDK did not stay on node-b")


async def evicted_login(rec: Recorder) -> None:
    """A login answered with an eviction: the SDK must surface the reason byte."""
    client = new_client(rec.ports[0])
    await rec.run("evicted_connect", "client.connect()", client.connect, [Reply(1, "empty")])
    await rec.run(
        "evicted_login_user",
        'client.login_user("iggy", "wrong")  # eviction, reason 9 InvalidCredentials',
        lambda: client.login_user("iggy", "wrong"),
        [Reply(40, "eviction", {"reason": 9}, eviction=9)],
        expect_error="Invalid credentials",
    )
    client = new_client(rec.ports[0])
    newer = ((0 << 20) | (12 << 10) | 3, (0 << 20) | (12 << 10))
    await rec.run("incompatible_connect", "client.connect()", client.connect, [Reply(1, "empty")])
    await rec.run(
        "incompatible_login_user",
        'client.login_user("iggy", "secret")  # eviction 14, window [0.12.0, 0.12.3]',
        lambda: client.login_user("iggy", "secret"),
        [Reply(40, "eviction", {"reason": 14}, eviction=14, versions=newer)],
        expect_error="server accepts [0.12.0, 0.12.3]",
    )
    client = new_client(rec.ports[0])
    await rec.run("empty_login_connect", "client.connect()", client.connect, [Reply(1, "empty")])
    await rec.run(
        "empty_login_user",
        'client.login_user("iggy", "secret")  # probe: an empty Register reply',
        lambda: client.login_user("iggy", "secret"),
        [Reply(40, "empty", raw_body=True)],
        expect_error="",
    )


# Users.

ALICE_PERMS = R.Perms(
    (False, True, False, True, False, False, False, False, True, False),
    [
        R.StreamPerms(
            STREAM_ID,
            (False, True, False, False, True, False),
            [R.TopicPerms(TOPIC_ID, (False, True, True, False)), R.TopicPerms(1, (True,) * 4)],
        ),
        R.StreamPerms(4, (True, False, False, False, False, True)),
    ],
)
ALICE = R.User(5, CREATED_AT + 30, 1, "alice", ALICE_PERMS)
BOB = R.User(6, CREATED_AT + 31, 2, "bob")
ROOT = R.User(0, CREATED_AT - 1, 1, "iggy")


def sdk_permissions(p: R.Perms) -> Permissions:
    """The SDK's permission objects for a hand-built permission set."""
    names = (
        "manage_servers",
        "read_servers",
        "manage_users",
        "read_users",
        "manage_streams",
        "read_streams",
        "manage_topics",
        "read_topics",
        "poll_messages",
        "send_messages",
    )
    stream_flags = (
        "manage_stream",
        "read_stream",
        "manage_topics",
        "read_topics",
        "poll_messages",
        "send_messages",
    )
    streams = {
        s.stream_id: StreamPermissions(
            **dict(zip(stream_flags, s.flags, strict=True)),
            topics={
                t.topic_id: TopicPermissions(
                    **dict(
                        zip(
                            ("manage_topic", "read_topic", "poll_messages", "send_messages"),
                            t.flags,
                            strict=True,
                        )
                    )
                )
                for t in s.topics
            }
            or None,
        )
        for s in p.streams
    }
    return Permissions(
        global_permissions=GlobalPermissions(**dict(zip(names, p.global_flags, strict=True))),
        streams=streams or None,
    )


def decoded_permissions(sdk: Any) -> Any:
    """What the SDK decoded, as plain tuples comparable with a hand-built set."""
    if sdk is None:
        return None
    g = sdk.global_permissions
    global_flags = (
        g.manage_servers,
        g.read_servers,
        g.manage_users,
        g.read_users,
        g.manage_streams,
        g.read_streams,
        g.manage_topics,
        g.read_topics,
        g.poll_messages,
        g.send_messages,
    )
    streams = []
    for stream_id, s in sorted((sdk.streams or {}).items()):
        topics = [
            (topic_id, (t.manage_topic, t.read_topic, t.poll_messages, t.send_messages))
            for topic_id, t in sorted((s.topics or {}).items())
        ]
        flags = (
            s.manage_stream,
            s.read_stream,
            s.manage_topics,
            s.read_topics,
            s.poll_messages,
            s.send_messages,
        )
        streams.append((stream_id, flags, topics))
    return (global_flags, streams)


def plain_permissions(p: R.Perms | None) -> Any:
    if p is None:
        return None
    streams = [(s.stream_id, s.flags, [(t.topic_id, t.flags) for t in s.topics]) for s in p.streams]
    return (p.global_flags, streams)


def check_user(prefix: str, sdk: Any, u: R.User, *, details: bool) -> list[str]:
    status = {1: UserStatus.Active, 2: UserStatus.Inactive}[u.status]
    checks = [
        expect(f"{prefix}.id", sdk.id, u.id),
        expect(f"{prefix}.created_at", sdk.created_at, u.created_at),
        expect(f"{prefix}.status", sdk.status, status),
        expect(f"{prefix}.username", sdk.username, u.username),
    ]
    if details:
        checks.append(
            expect(
                f"{prefix}.permissions",
                decoded_permissions(sdk.permissions),
                plain_permissions(u.permissions),
            )
        )
    return checks


def user_reply(code: int, u: R.User) -> Reply:
    return Reply(code, "user_details", u, R.user_details(u))


async def user_management(rec: Recorder) -> None:
    """An administrator manages users (recorded after the first session, so the frame
    numbers of everything before stay as they were)."""
    client = new_client(rec.ports[0])
    await rec.run("users_connect", "client.connect()", client.connect, [Reply(1, "empty")])
    await rec.run(
        "users_login_user",
        'client.login_user("iggy", "secret")',
        lambda: client.login_user("iggy", "secret"),
        login_replies(rec),
    )
    perms = sdk_permissions(ALICE_PERMS)
    await rec.run(
        "create_user_with_permissions",
        'client.create_user("alice", "s3cret-A", UserStatus.Active, <ALICE_PERMS>)',
        lambda: client.create_user("alice", "s3cret-A", UserStatus.Active, perms),
        [user_reply(33, ALICE)],
        lambda u: check_user("user", u, ALICE, details=True),
    )
    await rec.run(
        "create_user_plain",
        'client.create_user("bob", "pw-bob", UserStatus.Inactive)',
        lambda: client.create_user("bob", "pw-bob", UserStatus.Inactive),
        [user_reply(33, BOB)],
        lambda u: check_user("user", u, BOB, details=True),
    )
    await rec.run(
        "create_user_rejected",
        'client.create_user("bob", "pw-bob")  # committed rejection 46 UserAlreadyExists',
        lambda: client.create_user("bob", "pw-bob"),
        [Reply(33, "user_details", None, rejection=46)],
        expect_error="",
    )
    await rec.run(
        "get_user_by_name",
        'client.get_user("alice")',
        lambda: client.get_user("alice"),
        [user_reply(31, ALICE)],
        lambda u: check_user("user", u, ALICE, details=True),
    )
    await rec.run(
        "get_user_by_id",
        "client.get_user(6)",
        lambda: client.get_user(6),
        [user_reply(31, BOB)],
        lambda u: check_user("user", u, BOB, details=True),
    )
    await rec.run(
        "get_user_missing",
        'client.get_user("nobody")  # empty body = not found',
        lambda: client.get_user("nobody"),
        [Reply(31, "empty")],
        lambda u: [expect("result", u, None)],
    )
    everyone = [ROOT, ALICE, BOB]
    await rec.run(
        "get_users",
        "client.get_users()",
        client.get_users,
        [Reply(32, "users", everyone, R.users_list(everyone))],
        lambda us: (
            [
                check
                for i, (got, u) in enumerate(zip(us, everyone, strict=True))
                for check in check_user(f"users[{i}]", got, u, details=False)
            ]
            + [expect("len(users)", len(us), len(everyone))]
        ),
    )
    await rec.run(
        "get_users_unauthorized",
        "client.get_users()  # header status 41",
        client.get_users,
        [Reply(32, "empty", status=41)],
        expect_error="",
    )
    await rec.run(
        "update_user",
        'client.update_user("alice", "alice2", UserStatus.Inactive)',
        lambda: client.update_user("alice", "alice2", UserStatus.Inactive),
        [Reply(35, "empty")],
    )
    await rec.run(
        "update_user_nothing",
        "client.update_user(5)",
        lambda: client.update_user(5),
        [Reply(35, "empty")],
    )
    await rec.run(
        "update_permissions",
        'client.update_permissions("alice2", <ALICE_PERMS>)',
        lambda: client.update_permissions("alice2", perms),
        [Reply(36, "empty")],
    )
    await rec.run(
        "update_permissions_none",
        "client.update_permissions(5, None)",
        lambda: client.update_permissions(5, None),
        [Reply(36, "empty")],
    )
    await rec.run(
        "change_password",
        'client.change_password("alice2", "s3cret-A", "n3w-secret")',
        lambda: client.change_password("alice2", "s3cret-A", "n3w-secret"),
        [Reply(37, "empty")],
    )
    await rec.run(
        "delete_user",
        "client.delete_user(6)",
        lambda: client.delete_user(6),
        [Reply(34, "empty")],
    )


# A cluster: auto-commit polls and offset writes go to the partition's primary.

ROUTE_METADATA_OP = 57


def three_node_list(recorder: Recorder) -> list[R.Node]:
    return [
        R.Node("node-0", HOST, recorder.ports[0], 8080, 3000, 8092, 0, 0),
        R.Node("node-1", HOST, recorder.ports[1], 8081, 3001, 8093, 1, 0),
        R.Node("node-2", HOST, recorder.ports[2], 8082, 3002, 8094, 1, 0),
    ]


def route_fields(recorder: Recorder) -> dict[str, Any]:
    """The route to node-2, naming the session of the client that asked (its client id
    and session are in the request being answered)."""
    request = RequestHeader.unpack_from(recorder.request)
    attachment = R.Attachment(f"{request.client:032x}", request.session, ROUTE_METADATA_OP)
    return {"attachment": attachment, "primary": three_node_list(recorder)[2]}


def route_reply(code: int) -> Reply:
    def payload(recorder: Recorder) -> bytes:
        fields = route_fields(recorder)
        return R.poll_route(fields["attachment"], fields["primary"])

    return Reply(code, "poll_route", route_fields, payload)


async def cluster_routing(rec: Recorder) -> None:
    """A client of a three-node cluster polls with auto-commit and stores offsets."""
    client = new_client(rec.ports[0])
    meta = cluster_reply(rec, three_node_list(rec))
    await rec.run("cluster_connect", "client.connect()", client.connect, [Reply(1, "empty")])
    await rec.run(
        "cluster_login_user",
        'client.login_user("iggy", "secret")  # node-0 leads a three-node cluster',
        lambda: client.login_user("iggy", "secret"),
        [LOGIN, meta, meta],
    )
    polled = R.poll_reply(1, 599, [POLLED])
    poll_fields = {"partition_id": 1, "current_offset": 599, "batches": [POLLED]}

    def poll_call() -> Any:
        return client.poll_messages(
            STREAM_ID,
            TOPIC_ID,
            consumer=Consumer.Single(1),
            polling_strategy=PollingStrategy.Next(),
            count=10,
            auto_commit=True,
            partition_id=1,
        )

    call = (
        f"client.poll_messages({STREAM_ID}, {TOPIC_ID}, consumer=Consumer.Single(1), "
        "polling_strategy=PollingStrategy.Next(), count=10, auto_commit=True, partition_id=1)"
    )
    await rec.run(
        "poll_auto_commit_routed",
        call + "  # 103 to node-0, then login, 14 and 104 on node-2",
        poll_call,
        [
            route_reply(103),
            LOGIN,
            Reply(14, "empty"),
            Reply(104, "poll", poll_fields, polled),
        ],
        lambda messages: check_polled(messages, POLLED),
    )
    check_ports(rec, "poll_auto_commit_routed", [0, 2, 2, 2])
    await rec.run(
        "poll_auto_commit_cached_route",
        call + "  # the route and the primary connection are reused",
        poll_call,
        [Reply(104, "poll", poll_fields, polled)],
        lambda messages: check_polled(messages, POLLED),
    )
    check_ports(rec, "poll_auto_commit_cached_route", [2])
    await rec.run(
        "poll_primary_refused_reroutes",
        call + "  # 104 answered with status 58: the SDK asks for the route again",
        poll_call,
        [
            Reply(104, "empty", status=58),
            route_reply(103),
            Reply(14, "empty"),
            Reply(104, "poll", poll_fields, polled),
        ],
        lambda messages: check_polled(messages, POLLED),
    )
    check_ports(rec, "poll_primary_refused_reroutes", [2, 0, 2, 2])
    consumer = await rec.run(
        "cluster_consumer_group_init",
        'client.consumer_group("workers", "orders", "events", '
        "auto_commit=AutoCommit.Disabled(), poll_interval=timedelta(milliseconds=100))",
        lambda: client.consumer_group(
            "workers",
            "orders",
            "events",
            auto_commit=AutoCommit.Disabled(),
            poll_interval=datetime.timedelta(milliseconds=100),
        ),
        [
            Reply(200, "stream_details", ORDERS, R.stream_details(ORDERS)),
            Reply(300, "topic_details", EVENTS, R.topic_details(EVENTS)),
            Reply(600, "group_details", WORKERS, R.group_details(WORKERS)),
            Reply(604, "empty"),
        ],
    )
    await rec.run(
        "store_offset_routed",
        "consumer.store_offset(41, 1)  # 123 to node-0, then 14 and 121 on node-2",
        lambda: consumer.store_offset(41, 1),
        [route_reply(123), Reply(14, "empty"), Reply(121, "empty")],
    )
    check_ports(rec, "store_offset_routed", [0, 2, 2])
    await rec.run(
        "delete_offset_routed",
        "consumer.delete_offset(1)  # the cached route",
        lambda: consumer.delete_offset(1),
        [Reply(122, "empty")],
    )
    check_ports(rec, "delete_offset_routed", [2])


def check_ports(rec: Recorder, step: str, listeners: list[int]) -> None:
    """Each frame of ``step`` arrived on the listener the plan expects."""
    got = [rec.ports.index(e.port) for e in rec.exchanges if e.step == step]
    if got != listeners:
        raise RecordingError(f"{step}: frames arrived on listeners {got}, expected {listeners}")
    rec.steps[-1].checks.append(f"frames on listeners {listeners}")


# Writing the vectors.


def random_fields(exchange: Exchange, body: dict[str, Any]) -> list[str]:
    """The request fields that change between runs; tests take them from the capture."""
    fields = ["header.client"]
    code = CODE_BY_OPERATION.get(exchange.request[176])
    if exchange.request[176] == OPERATION_NON_REPLICATED:
        code = struct.unpack_from("<I", exchange.request, 196)[0]
    if code == 14:
        fields.append("body.client_hex (the coordinator session's client id, echoed)")
    if code == 101:
        fields.append("batch.origin_timestamp")
        fields.append("batch.messages[*].timestamp_delta")
        for i, message in enumerate(body["batch"]["messages"]):
            if message["id"] not in KNOWN_MESSAGE_IDS:
                fields.append(f"batch.messages[{i}].id")
        fields.append("batch.messages[*].checksum (derived)")
        fields.append("batch.batch_checksum (derived)")
    return fields


KNOWN_MESSAGE_IDS = {1001, 1002, 1003, 2001, 2002, 3001, 3002, 3003, 4001, 4002}


def manifest_entry(
    exchange: Exchange, step: Step, ports: list[int], request_file: str, reply_file: str
) -> Any:
    header = describe_request_header(exchange.request)
    code = header["code"]
    body = describe_request_body(code, exchange.request[HEADER_SIZE:])
    plan = exchange.plan
    reply: dict[str, Any] = {
        "file": reply_file,
        "kind": plan.kind,
        "built_by": exchange.built_by,
        "fields": exchange.fields,
        "op": exchange.op,
        "commit": exchange.commit,
    }
    if plan.eviction:
        reply["framing"] = "eviction"
        reply["eviction_reason"] = plan.eviction
        version, version_min = plan.versions
        reply["server_protocol_version"] = version
        reply["server_protocol_version_min"] = version_min
    elif plan.junk_echo:
        reply["framing"] = "probe_junk_echo"
    elif plan.status:
        reply["framing"] = "status"
        reply["status"] = plan.status
    elif plan.rejection:
        reply["framing"] = "result_rejection"
        reply["result"] = plan.rejection
    elif plan.raw_body:
        reply["framing"] = "plain"
    elif exchange.request[176] in RESULT_FRAMED_OPERATIONS or (
        exchange.request[176] == OPERATION_REGISTER
    ):
        reply["framing"] = "result_ok"
    else:
        reply["framing"] = "plain"
    return {
        "index": exchange.index,
        "step": exchange.step,
        "call": exchange.call,
        "connection": exchange.connection,
        "listener": ports.index(exchange.port),
        "command": code,
        "command_name": COMMAND_NAMES.get(code, "?"),
        "operation": header["operation"],
        "request": {"file": request_file, "header": header, "body": body},
        "reply": reply,
        "sdk_accepted_reply": step.accepted,
        "sdk_error": step.error,
        "checks": step.checks,
        "random": random_fields(exchange, body),
    }


def write_vectors(rec: Recorder, out: Path) -> None:
    frames = out / "frames"
    staging = out / "frames.new"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    steps = {s.name: s for s in rec.steps}
    entries = []
    for exchange in rec.exchanges:
        stem = f"{exchange.index:03d}-{exchange.step}"
        request_file = f"frames/{stem}.request.bin"
        reply_file = f"frames/{stem}.reply.bin"
        (staging / f"{stem}.request.bin").write_bytes(exchange.request)
        (staging / f"{stem}.reply.bin").write_bytes(exchange.reply)
        entries.append(
            manifest_entry(exchange, steps[exchange.step], rec.ports, request_file, reply_file)
        )
    manifest = {
        "sdk": "apache-iggy 0.9.0 (PyPI wheel; Rust SDK 0.11.0)",
        "regenerate": "python -m tests.golden.record",
        "replies": (
            "every reply frame is built by sdk.wire (headers, result sections, evictions and "
            "typed payloads) and the recording stops unless it equals the frame hand-built "
            "from docs/protocol.md by tests.golden.replies; only probes marked 'hand (probe)' "
            "are deliberately malformed and hand-built alone"
        ),
        "ports": rec.ports,
        "frames": entries,
    }
    if frames.exists():
        shutil.rmtree(frames)
    staging.rename(frames)
    text = json.dumps(manifest, indent=1, sort_keys=False)
    (out / "manifest.json").write_text(text + "\n")


async def record() -> Recorder:
    rec = Recorder()
    await rec.start(listeners=3)
    try:
        await scenario(rec)
        await leader_redirect(rec)
        await evicted_login(rec)
        await user_management(rec)
        await cluster_routing(rec)
    finally:
        await rec.stop()
    return rec


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args(argv)
    try:
        rec = asyncio.run(record())
    except RecordingError as error:
        print(f"recording failed: {error}", file=sys.stderr)
        return 1
    write_vectors(rec, args.out)
    print(f"recorded {len(rec.exchanges)} frames in {len(rec.steps)} steps into {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
