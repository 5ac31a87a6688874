"""File descriptors: running short of them never ends a node.

Real node processes with a low ``ulimit -n`` (set in the child before it starts), on
127.0.0.1, each killed in teardown. Each test pushes one way of spending descriptors past
what the node has (idle client sockets, a limit lowered under the running node, strangers
on the replica-bus port, partitions beyond the reserve), checks the node is alive and
bounded meanwhile, and that a fresh client logs in and pings once the pressure is gone.
The replica bus's own bounds are also checked in-process on a real loopback socket.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import os
import random
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final, cast

import pytest
import trio

from broker.core.groups import Outcome, Refused, Replied, Submission
from broker.core.identity import internal_checksum, register_checksum
from broker.runtime import bus as bus_module
from broker.runtime.bus import (
    _HELLO_DIAL,
    _MAGIC,
    BUS_HANDSHAKES_MAX,
    MAC_SIZE,
    NONCE_SIZE,
    ReplicaBus,
    _mac,
)
from broker.runtime.config import Config
from broker.runtime.group import (
    PARTITION_DESCRIPTORS_CHARGED,
    DescriptorReserve,
    GroupHost,
    GroupKind,
    PartitionIds,
    ReplyWaiter,
)
from broker.runtime.serve import DESCRIPTORS_MARGIN
from broker.runtime.stats import NodeCounters
from broker.state.codec import encode_command
from broker.state.errors import ErrorCode
from broker.state.metadata import Register
from broker.state.partition_machine import send_body
from consensus import Message, ReplicaConfig
from consensus.protocols import joined_body
from journal.storage import FileStorage
from sdk import wire
from sdk.wire import CommandCode, IggyErrorCode
from sdk.wire.codes import Operation
from tests.runtime.processes import (
    CLUSTER_SECRET,
    ROOT_PASSWORD,
    NodeProcess,
    free_port,
)
from tests.wire_client import WireClient

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="counts /proc/<pid>/fd"
)

_LAUNCH: Final = (
    "import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
    "from broker.cli import app; sys.argv[0] = 'viewstream'; app()"
)
"""The node's launch, its open-file limit set first, in the child itself (as a shell's
``ulimit -n`` would, and without a ``preexec_fn`` in a test process that has threads)."""
NOFILE: Final = 512
"""The nodes' open-file limit (soft and hard)."""
CONNECTIONS_MAX: Final = 32
PARTITIONS_OPEN_MAX: Final = 16
RESERVED: Final = PARTITIONS_OPEN_MAX * PARTITION_DESCRIPTORS_CHARGED
CLIENT_TIMEOUT_S: Final = 30.0
"""Above the node's request timeout (10 s): the node answers before the client gives up."""
RECOVER_TIMEOUT_S: Final = 20.0
"""Bound on waiting for a failed partition to open again (its backoff is at most 5 s)."""
SLACK: Final = 16
"""Descriptors a node may open for a moment beyond what a check counts."""


# -- processes ----------------------------------------------------------------------------


def start_limited_node(
    data_dir: Path,
    *,
    nofile: int | tuple[int, int] = NOFILE,
    env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
    address: str = "127.0.0.1:0",
    wait: bool = True,
) -> NodeProcess:
    """``tests.runtime.processes.start_node`` with ``RLIMIT_NOFILE`` set in the child
    before the node starts (``nofile`` is the soft and hard limit, or the pair)."""
    soft, hard = (nofile, nofile) if isinstance(nofile, int) else nofile
    environment = {k: v for k, v in os.environ.items() if not k.startswith("VIEWSTREAM_")}
    environment.update(
        VIEWSTREAM_ROOT_PASSWORD=ROOT_PASSWORD,
        VIEWSTREAM_LOG_LEVEL="info",
        VIEWSTREAM_HTTP_ADDRESS="",  # port 3000 is fixed: not ours to take in a test
        VIEWSTREAM_LIMITS__CONNECTIONS_MAX=str(CONNECTIONS_MAX),
        VIEWSTREAM_LIMITS__PARTITION_DESCRIPTORS_RESERVED=str(RESERVED),
    )
    environment.update(env or {})

    launch = _LAUNCH.format(soft=soft, hard=hard)
    command = [sys.executable, "-c", launch, "serve", "--address", address, "--ws-address", ""]
    process = subprocess.Popen(
        [*command, "--data-dir", str(data_dir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=environment,
        cwd=str(data_dir.parent),
    )
    node = NodeProcess(process, data_dir)

    def pump() -> None:
        assert process.stdout is not None
        try:
            for line in process.stdout:
                node.output.append(line)
                node.lines.put(line)
        except ValueError:
            pass  # the pipe was closed by kill()

    threading.Thread(target=pump, daemon=True).start()
    if wait:
        node.wait_ready()
    return node


def descriptors(node: NodeProcess) -> int:
    return len(os.listdir(f"/proc/{node.process.pid}/fd"))


def soft_limit(node: NodeProcess) -> int:
    return resource.prlimit(node.process.pid, resource.RLIMIT_NOFILE)[0]


@contextlib.contextmanager
def lowered_limit(node: NodeProcess, soft: int) -> Iterator[None]:
    """The node's soft limit lowered to ``soft`` (as if something else took the rest),
    and raised back afterwards."""
    before, hard = resource.prlimit(node.process.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(node.process.pid, resource.RLIMIT_NOFILE, (soft, hard))
    try:
        yield
    finally:
        resource.prlimit(node.process.pid, resource.RLIMIT_NOFILE, (before, hard))


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def assert_alive(node: NodeProcess) -> None:
    assert node.process.poll() is None, "the node died:\n" + "".join(node.output[-40:])


def fresh_client_works(node: NodeProcess, address: str | None = None) -> None:
    """A new connection logs in and pings (retried while the node drains the pressure)."""

    def works() -> bool:
        try:
            with WireClient(address or node.address, timeout_s=CLIENT_TIMEOUT_S) as client:
                client.ping()
                client.login("iggy", ROOT_PASSWORD)
                client.ping()
        except (OSError, ConnectionError, wire.ServerRejected):
            return False
        return True

    wait_until(works, RECOVER_TIMEOUT_S, "a fresh client to log in and ping")
    assert_alive(node)


def admin(node: NodeProcess, address: str | None = None) -> WireClient:
    client = WireClient(address or node.address, timeout_s=CLIENT_TIMEOUT_S)
    client.login("iggy", ROOT_PASSWORD)
    return client


def create_topic(client: WireClient, stream: str, topic: str, partitions: int) -> None:
    client.call(
        CommandCode.CREATE_TOPIC,
        wire.CreateTopic(wire.Identifier(stream), partitions, topic, ()),
    )


def delete_topic(client: WireClient, stream: str, topic: str) -> None:
    client.call(
        CommandCode.DELETE_TOPIC, wire.TopicRef(wire.Identifier(stream), wire.Identifier(topic))
    )


def send_status(client: WireClient, stream: str, topic: str, partition: int) -> int:
    """The status of one SEND_MESSAGES of one message to ``partition`` (0: appended)."""
    body = wire.build_send_messages(
        wire.Identifier(stream),
        wire.Identifier(topic),
        wire.PartitionId(partition),
        [wire.OutgoingMessage(1, b"descriptor test")],
    )
    frame = client.call_raw(int(CommandCode.SEND_MESSAGES), body)
    return frame.reply_header().status


def send_statuses(client: WireClient, stream: str, topic: str, partitions: int) -> list[int]:
    return [send_status(client, stream, topic, p) for p in range(partitions)]


def open_idle_sockets(port: int, count: int) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5.0)
        sockets.append(sock)
    return sockets


def close_all(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


def closed_by_peer(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    """Whether the other side closed ``sock`` (it reads end-of-file or a reset)."""
    sock.settimeout(timeout_s)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except TimeoutError:
        return False
    except OSError:
        return True


# -- a node with a low limit, shared ------------------------------------------------------


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    data_dir: Path = tmp_path_factory.mktemp("descriptors") / "data"
    process = start_limited_node(data_dir)
    try:
        with admin(process) as client:
            client.call(CommandCode.CREATE_STREAM, wire.CreateStream("fd"))
        yield process
    finally:
        process.kill()


def test_start_refused_when_the_limit_cannot_hold_the_settings(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    node = start_limited_node(
        data_dir, nofile=256, env={"VIEWSTREAM_LIMITS__CONNECTIONS_MAX": "1000"}, wait=False
    )
    try:
        status = node.process.wait(timeout=30)
    finally:
        node.kill()
    output = "".join(node.output)
    assert status != 0
    assert "limits.connections_max 1000" in output
    assert "limits.partition_descriptors_reserved" in output
    assert "256" in output
    assert "Traceback" not in output


def test_start_raises_the_soft_limit_to_the_hard_limit(tmp_path: Path) -> None:
    node = start_limited_node(tmp_path / "data", nofile=(256, 1024))
    try:
        assert soft_limit(node) == 1024
        assert any("open-file limit 1024 (raised from 256" in line for line in node.output)
        fresh_client_works(node)
    finally:
        node.kill()


def test_idle_client_sockets_beyond_connections_max_cost_the_node_nothing(
    node: NodeProcess,
) -> None:
    base = descriptors(node)
    sockets = open_idle_sockets(node.port, 3 * CONNECTIONS_MAX)
    try:
        # The node holds connections_max of them and closes every other one at accept.
        refused = [sock for sock in sockets[CONNECTIONS_MAX:] if closed_by_peer(sock, 2.0)]
        assert len(refused) >= CONNECTIONS_MAX
        assert descriptors(node) <= base + CONNECTIONS_MAX + SLACK
        assert_alive(node)
    finally:
        close_all(sockets)
    fresh_client_works(node)


def test_accept_at_the_descriptor_limit_backs_off_and_the_node_survives(
    node: NodeProcess,
) -> None:
    sockets: list[socket.socket] = []
    mark = len(node.output)
    with lowered_limit(node, descriptors(node) + 4):
        sockets = open_idle_sockets(node.port, 20)  # queued by the kernel, not accepted
        time.sleep(1.5)  # the listener meets EMFILE every 0.1 s meanwhile
        assert_alive(node)
        close_all(sockets)
    fresh_client_works(node)
    lines = [line for line in node.output[mark:] if "accept returned EMFILE" in line]
    assert 1 <= len(lines) <= 3  # rate-limited (trio writes one every 0.1 s)
    assert not any("Traceback" in line for line in node.output[mark:])


def creation_status(client: WireClient, stream: str, topic: str, partitions: int) -> int:
    body = wire.CreateTopic(wire.Identifier(stream), partitions, topic, ()).encode()
    return client.call_raw(int(CommandCode.CREATE_TOPIC), body).reply_header().status


def test_topic_creation_beyond_the_partition_reserve_is_refused_not_fatal(
    node: NodeProcess,
) -> None:
    with admin(node) as client:
        base = descriptors(node)
        # The reserve hosts PARTITIONS_OPEN_MAX partitions: one more is refused whole,
        # before it is proposed, and nothing of it is created.
        status = creation_status(client, "fd", "many", 3 * PARTITIONS_OPEN_MAX)
        assert status == ErrorCode.PARTITIONS_LIMIT_REACHED
        create_topic(client, "fd", "fits", PARTITIONS_OPEN_MAX - 1)
        assert creation_status(client, "fd", "two", 2) == ErrorCode.PARTITIONS_LIMIT_REACHED
        partitions = wire.PartitionsChange(wire.Identifier("fd"), wire.Identifier("fits"), 2)
        frame = client.call_raw(int(CommandCode.CREATE_PARTITIONS), partitions.encode())
        assert frame.reply_header().status == ErrorCode.PARTITIONS_LIMIT_REACHED
        wait_until(
            lambda: (
                send_statuses(client, "fd", "fits", PARTITIONS_OPEN_MAX - 1)
                == [0] * (PARTITIONS_OPEN_MAX - 1)
            ),
            RECOVER_TIMEOUT_S,
            "every partition that fits to take messages",
        )
        assert descriptors(node) <= base + RESERVED + SLACK
        assert_alive(node)
        client.ping()
        delete_topic(client, "fd", "fits")
    refusals = [line for line in node.output if "do not fit" in line]
    assert refusals and "limits.partition_descriptors_reserved" in refusals[0]
    fresh_client_works(node)


def test_a_partition_refused_for_want_of_descriptors_opens_once_they_are_free(
    node: NodeProcess,
) -> None:
    with admin(node) as client:
        create_topic(client, "fd", "hog", PARTITIONS_OPEN_MAX)
        # Once every partition of "hog" is open, the reserve is full.
        wait_until(
            lambda: (
                send_statuses(client, "fd", "hog", PARTITIONS_OPEN_MAX) == [0] * PARTITIONS_OPEN_MAX
            ),
            RECOVER_TIMEOUT_S,
            "every partition of the first topic to open",
        )
        assert creation_status(client, "fd", "late", 4) == ErrorCode.PARTITIONS_LIMIT_REACHED
        # Deleted, "hog" frees its place in the metadata at once and its descriptors once
        # its groups have closed: the partitions of a topic created in between open then.
        delete_topic(client, "fd", "hog")
        create_topic(client, "fd", "late", 4)
        wait_until(
            lambda: send_statuses(client, "fd", "late", 4) == [0] * 4,
            RECOVER_TIMEOUT_S,
            "the new partitions to open",
        )
        delete_topic(client, "fd", "late")
    assert_alive(node)


def test_partitions_that_meet_emfile_fail_alone_and_recover(node: NodeProcess) -> None:
    with admin(node) as client:
        with lowered_limit(node, descriptors(node) + 3):
            create_topic(client, "fd", "short", 8)
            statuses = send_statuses(client, "fd", "short", 8)
            assert_alive(node)
            client.ping()
            assert statuses.count(0) < 8
            assert all(
                status
                in (
                    0,
                    IggyErrorCode.TRANSIENT_NOT_ACCEPTED,
                    IggyErrorCode.TRANSIENT_NOT_COMMITTED,
                )
                for status in statuses
            )
        wait_until(
            lambda: send_statuses(client, "fd", "short", 8) == [0] * 8,
            RECOVER_TIMEOUT_S,
            "the partitions to open again once descriptors are free",
        )
        delete_topic(client, "fd", "short")
    fresh_client_works(node)


# -- the replica bus ----------------------------------------------------------------------


def test_strangers_on_the_bus_port_cannot_exhaust_a_clusters_node(tmp_path: Path) -> None:
    client_ports = [free_port() for _ in range(3)]
    bus_ports = [free_port() for _ in range(3)]
    replicas = ",".join(f"127.0.0.1:{port}" for port in bus_ports)
    clients = ",".join(f"127.0.0.1:{port}" for port in client_ports)
    nodes: list[NodeProcess] = []
    sockets: list[socket.socket] = []
    try:
        for index in range(3):
            data_dir = tmp_path / f"node-{index}"
            data_dir.mkdir()
            nodes.append(
                start_limited_node(
                    data_dir / "data",
                    address=f"127.0.0.1:{client_ports[index]}",
                    env={"VIEWSTREAM_CLUSTER_SECRET": CLUSTER_SECRET},
                    extra=[
                        "--replica",
                        str(index),
                        "--replicas",
                        replicas,
                        "--client-addresses",
                        clients,
                    ],
                    wait=False,
                )
            )
        for started in nodes:
            started.wait_ready()
        target = nodes[2]  # it accepts its peers' links: the side strangers can reach
        fresh_client_works(target)
        base = descriptors(target)
        peak = base
        for _ in range(10):
            sockets += open_idle_sockets(bus_ports[2], 100)
            peak = max(peak, descriptors(target))
        time.sleep(0.5)
        peak = max(peak, descriptors(target))
        assert peak <= base + BUS_HANDSHAKES_MAX + SLACK
        assert_alive(target)
        # The cluster still commits through the node (its links to its peers are up).
        with admin(target) as client:
            client.call(CommandCode.CREATE_STREAM, wire.CreateStream("bus-flood"))
        close_all(sockets)
        sockets = []
        fresh_client_works(target)
        refusals = [line for line in target.output if "bus connection refused" in line]
        assert 1 <= len(refusals) <= 12  # rate-limited: ten a minute and a count
    finally:
        close_all(sockets)
        for started in nodes:
            started.kill()


async def _dial_as(port: int, replica: int, accepter: int) -> trio.SocketStream:
    """Authenticate to a bus as ``replica`` (the dialer's half of the handshake)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    challenge = await _receive(stream, len(_MAGIC) + NONCE_SIZE)
    assert challenge[: len(_MAGIC)] == _MAGIC
    their_nonce = challenge[len(_MAGIC) :]
    nonce = os.urandom(NONCE_SIZE)
    secret = CLUSTER_SECRET.encode()
    mac = _mac(secret, b"dial", their_nonce, nonce, bytes([replica, accepter]))
    await stream.send_all(_HELLO_DIAL.pack(replica, nonce, mac))
    answer = await _receive(stream, MAC_SIZE)
    expected = _mac(secret, b"accept", nonce, their_nonce, bytes([accepter, replica]))
    assert hmac.compare_digest(answer, expected)
    return stream


async def _receive(stream: trio.SocketStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


async def _closed(stream: trio.SocketStream, timeout_s: float) -> bool:
    with trio.move_on_after(timeout_s):
        try:
            while await stream.receive_some(4096):
                pass
        except trio.BrokenResourceError:
            pass
        return True
    return False


def _run_bus(body: Callable[[ReplicaBus, int], Any]) -> None:
    """Run replica 2's bus of a 3-node roster on a loopback port, and ``body`` against it
    (replica 2 accepts links from 0 and 1 and dials no one)."""
    port = free_port()
    roster = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}", f"127.0.0.1:{port}"]
    config = Config(replicas=roster, replica=2, cluster_secret=CLUSTER_SECRET)
    fake_node = SimpleNamespace(config=config, groups={}, counters=NodeCounters())
    bus = ReplicaBus(cast(Any, fake_node))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bus.run)
            with trio.fail_after(30):
                await body(bus, port)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_bus_closes_a_connection_that_does_not_authenticate_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bus_module, "HANDSHAKE_TIMEOUT_S", 0.3)

    async def body(bus: ReplicaBus, port: int) -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await _receive(stream, len(_MAGIC) + NONCE_SIZE)
        assert await _closed(stream, 5.0)  # said nothing: closed after the timeout
        linked = await _dial_as(port, 0, 2)  # a peer still gets in
        await bus.peers[0].connected.wait()
        for opened in (stream, linked):
            await opened.aclose()

    _run_bus(body)


def test_bus_handshakes_beyond_the_cap_close_the_oldest() -> None:
    async def body(bus: ReplicaBus, port: int) -> None:
        idle = []
        for _ in range(BUS_HANDSHAKES_MAX):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await _receive(stream, len(_MAGIC) + NONCE_SIZE)  # accepted, in its handshake
            idle.append(stream)
        linked = await _dial_as(port, 1, 2)  # one more: the oldest stranger gives way
        assert await _closed(idle[0], 5.0)
        for stream in idle[1:]:
            assert not await _closed(stream, 0.05)
        await bus.peers[1].connected.wait()
        assert len(bus._handshakes) == BUS_HANDSHAKES_MAX - 1
        for stream in [*idle, linked]:
            await stream.aclose()

    _run_bus(body)


def test_bus_closes_an_authenticated_connection_beyond_the_per_peer_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bus_module, "BUS_CONNECTIONS_PER_PEER_MAX", 1)

    async def body(bus: ReplicaBus, port: int) -> None:
        first = await _dial_as(port, 0, 2)
        await bus.peers[0].connected.wait()
        second = await _dial_as(port, 0, 2)
        assert await _closed(second, 5.0)
        assert bus.peers[0].accepted == 1
        assert bus.peers[0].stream is not None
        assert not await _closed(first, 0.05)
        for stream in (first, second):
            await stream.aclose()

    _run_bus(body)


def test_descriptor_budget_names_every_part() -> None:
    from broker.runtime.serve import descriptor_budget, descriptor_limit_problem

    config = Config(
        replicas=["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"], cluster_secret=CLUSTER_SECRET
    )
    budget = descriptor_budget(config)
    assert budget.bus == bus_module.bus_descriptors_max(3)
    assert budget.total == (
        config.limits.connections_max
        + budget.bus
        + config.limits.partition_descriptors_reserved
        + DESCRIPTORS_MARGIN
    )
    assert descriptor_limit_problem(budget, budget.total) is None
    problem = descriptor_limit_problem(budget, budget.total - 1)
    assert problem is not None
    assert "limits.connections_max" in problem


# -- a group host in-process, its file creations refused ---------------------------------


class _Refusals:
    """Makes ``FileStorage.create`` of segment files refuse with EMFILE while ``on`` (as a
    full table at the first append; the group's other files are made at open)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = True
        self.refused = 0
        create = FileStorage.create

        def refusing(storage: FileStorage, name: str) -> Any:
            if self.on and name.endswith((".log", ".index")):
                self.refused += 1
                raise OSError(errno.EMFILE, "Too many open files (test)", name)
            return create(storage, name)

        monkeypatch.setattr(FileStorage, "create", refusing)


def _group(path: Path, kind: GroupKind, reserve: DescriptorReserve) -> GroupHost:
    def send(group: int, replica: int, message: Message) -> None:
        raise AssertionError("a group of one sends nothing")

    partition = PartitionIds(0, 0, 0, 1) if kind is GroupKind.PARTITION else None
    return GroupHost(
        group_id=1 if partition is not None else 0,
        kind=kind,
        path=path,
        replica_index=0,
        replica_count=1,
        persisted=True,
        no_sync=False,
        segment_size_bytes=1 << 20,
        replica_config=ReplicaConfig(state_transfer=kind is GroupKind.METADATA),
        send=send,
        on_applied=lambda host: None,
        prng=random.Random(1),
        partition=partition,
        descriptors=reserve,
    )


def _send_submission(waiter: ReplyWaiter, client_id: int, request: int) -> Submission:
    frame_body = wire.build_send_messages(
        wire.Identifier(0),
        wire.Identifier(0),
        wire.PartitionId(0),
        [wire.OutgoingMessage(1, b"payload")],
    )
    body = send_body(wire.SendMessages.decode(frame_body))
    return Submission(
        client_id,
        7,
        request,
        Operation.SEND_MESSAGES,
        body,
        1_000_000 + request,
        waiter.deliver,
        internal_checksum(joined_body(body)),
    )


def _failure(host: GroupHost) -> str | None:
    return host.failure


async def _outcome(host: GroupHost, submission: Submission, waiter: ReplyWaiter) -> Outcome:
    host.submit(submission)
    with trio.fail_after(20):
        await waiter.event.wait()
    assert waiter.outcome is not None
    return waiter.outcome


def test_partition_group_refused_descriptors_fails_alone_and_opens_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusals = _Refusals(monkeypatch)
    reserve = DescriptorReserve(descriptors_max=10 * PARTITION_DESCRIPTORS_CHARGED)

    async def main() -> None:
        host = _group(tmp_path / "partition", GroupKind.PARTITION, reserve)
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            waiter = ReplyWaiter()
            outcome = await _outcome(host, _send_submission(waiter, 100, 1), waiter)
            # Its first segment could not be created: retried, then the group failed.
            assert outcome in (
                Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED),
                Refused(IggyErrorCode.TRANSIENT_NOT_COMMITTED),
            )
            assert host.failure is not None
            assert refusals.refused > 1
            waiter = ReplyWaiter()  # refused at once while failed
            assert await _outcome(host, _send_submission(waiter, 101, 1), waiter) == Refused(
                IggyErrorCode.TRANSIENT_NOT_ACCEPTED
            )
            refusals.on = False
            with trio.fail_after(20):
                await host.wait_readable(0)  # a replica again, in normal status
            assert _failure(host) is None
            assert reserve.groups == 1
            waiter = ReplyWaiter()
            outcome = await _outcome(host, _send_submission(waiter, 102, 1), waiter)
            assert isinstance(outcome, Replied)
            nursery.cancel_scope.cancel()
        await host.close()
        assert reserve.groups == 0

    trio.run(main)


def test_partition_group_beyond_the_reserve_is_refused_until_there_is_room(
    tmp_path: Path,
) -> None:
    reserve = DescriptorReserve(descriptors_max=PARTITION_DESCRIPTORS_CHARGED)

    async def main() -> None:
        first = _group(tmp_path / "first", GroupKind.PARTITION, reserve)
        second = _group(tmp_path / "second", GroupKind.PARTITION, reserve)
        async with trio.open_nursery() as nursery:
            await nursery.start(first.run)
            await nursery.start(second.run)
            assert first.ready and second.failure is not None
            waiter = ReplyWaiter()
            assert await _outcome(second, _send_submission(waiter, 1, 1), waiter) == Refused(
                IggyErrorCode.TRANSIENT_NOT_ACCEPTED
            )
            assert not second.path.exists()  # refused before it opened anything
            nursery.cancel_scope.cancel()
        await first.close()
        await second.close()
        assert reserve.groups == 0

    trio.run(main)


def test_metadata_group_retries_a_descriptor_refusal_until_it_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusals = _Refusals(monkeypatch)

    async def main() -> None:
        host = _group(tmp_path / "metadata", GroupKind.METADATA, DescriptorReserve())
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            waiter = ReplyWaiter()
            operation, body = encode_command(Register(5, 0xFFFF_FFFF))
            submission = Submission(
                5,
                0,
                0,
                operation,
                body,
                1_000_000,
                waiter.deliver,
                register_checksum(0xFFFF_FFFF),
            )
            host.submit(submission)
            await trio.sleep(3.0)  # more than a partition group's retries
            assert not waiter.event.is_set()
            assert host.failure is None and host.ready
            assert refusals.refused > 5
            refusals.on = False
            with trio.fail_after(20):
                await waiter.event.wait()
            assert isinstance(waiter.outcome, Replied)
            nursery.cancel_scope.cancel()
        await host.close()

    trio.run(main)


def test_default_settings_shrink_to_fit_a_small_limit_and_chosen_ones_do_not() -> None:
    """``viewstream serve`` starts on a host with a small hard limit (defaults shrink, with
    a warning); a setting the operator chose is honoured or the node refuses to start."""
    from broker.runtime.serve import descriptor_budget, descriptor_limit_problem, fit_defaults

    defaults = Config()
    assert descriptor_limit_problem(descriptor_budget(defaults), 4096) is not None
    fitted = fit_defaults(defaults, 4096)
    assert descriptor_limit_problem(descriptor_budget(fitted), 4096) is None
    assert 0 < fitted.limits.connections_max < defaults.limits.connections_max
    assert 0 < fitted.limits.partition_descriptors_reserved <= 2048
    assert fit_defaults(defaults, 1 << 20) is defaults  # a generous limit changes nothing
    chosen = Config(limits={"connections_max": 10_000})
    assert fit_defaults(chosen, 4096) is chosen
    assert descriptor_limit_problem(descriptor_budget(chosen), 4096) is not None
