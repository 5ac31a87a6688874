"""Consumer groups over real processes: cooperative revocation while members come and go
and a producer runs, and the heartbeat eviction of a member that stops talking.

Every node binds 127.0.0.1 on free ports in a temporary directory and is killed in
teardown; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
import trio
from apache_iggy import AutoCommit, IggyClient, PollingStrategy

from sdk import Client, wire
from sdk.client import AsyncClient
from sdk.types import ConsumerRef
from sdk.wire import CommandCode, EvictionReason
from sdk.wire import PollingStrategy as WireStrategy
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess, start_node
from tests.runtime.test_interop_node import run
from tests.sdk.real import RealCluster, node_url
from tests.wire_client import WireClient

STREAM, TOPIC, GROUP = "coop", "t", "workers"
PARTITIONS = 4
MESSAGES = 240
"""Messages the producer sends, over every partition in turn."""
POLL_COUNT = 5
ROUNDS_MAX = 400
SCENARIO_TIMEOUT_S = 240.0


# -- cooperative revocation ---------------------------------------------------------------


@dataclass
class Ledger:
    """What the members were served and committed, judged at every poll."""

    #: partition -> (member, last offset served and not yet committed)
    holders: dict[int, tuple[str, int]] = field(default_factory=dict)
    #: partition -> every offset any member was served
    served: dict[int, set[int]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    polls: int = 0

    def polled(self, member: str, partition: int, offsets: list[int]) -> None:
        self.polls += 1
        holder = self.holders.get(partition)
        if holder is not None and holder[0] != member:
            self.violations.append(
                f"poll {self.polls}: {member} was served partition {partition} "
                f"(offsets {offsets[0]}..{offsets[-1]}) while {holder[0]} still held "
                f"offsets up to {holder[1]} uncommitted"
            )
        self.served.setdefault(partition, set()).update(offsets)
        self.holders[partition] = (member, offsets[-1])

    def committed(self, member: str, partition: int, offset: int) -> None:
        holder = self.holders.get(partition)
        if holder is not None and holder[0] == member and holder[1] <= offset:
            del self.holders[partition]

    def left(self, member: str) -> None:
        """A member that leaves stops owning what it held: the next owner gets what it
        had not committed again (at-least-once)."""
        for partition in [p for p, (m, _) in self.holders.items() if m == member]:
            del self.holders[partition]


@dataclass
class Member:
    name: str
    client: AsyncClient
    joined: bool = False
    #: (partition, last offset) served last round, committed this round
    uncommitted: list[tuple[int, int]] = field(default_factory=list)


async def _cooperative_scenario(urls: list[str]) -> tuple[Ledger, list[int]]:
    admin = AsyncClient.from_connection_string(urls[0], heartbeat_interval_s=0)
    await admin.connect()
    await admin.create_stream(STREAM)
    await admin.create_topic(STREAM, TOPIC, PARTITIONS)
    await admin.create_consumer_group(STREAM, TOPIC, GROUP)
    group = ConsumerRef(GROUP, is_group=True)
    members = [
        Member(name, AsyncClient.from_connection_string(urls[i % len(urls)]))
        for i, name in enumerate(("a", "b", "c"))
    ]
    for member in members:
        await member.client.connect()
    ledger = Ledger()
    produced = 0

    async def produce() -> None:
        nonlocal produced
        producer = admin.new_session()
        await producer.connect()
        for i in range(MESSAGES):
            await producer.send_messages(
                STREAM, TOPIC, [f"m{i}".encode()], partitioning=i % PARTITIONS
            )
            produced += 1
            await trio.sleep(0.01)
        await producer.close()

    async def commit(member: Member) -> None:
        for partition, offset in member.uncommitted:
            await member.client.store_consumer_offset(
                STREAM, TOPIC, offset, consumer=group, partition_id=partition
            )
            ledger.committed(member.name, partition, offset)
        member.uncommitted = []

    async def poll(member: Member) -> None:
        polled = await member.client.poll_messages(
            STREAM, TOPIC, consumer=group, polling_strategy=WireStrategy.next(), count=POLL_COUNT
        )
        if polled.messages:
            offsets = [m.offset for m in polled.messages]
            ledger.polled(member.name, polled.partition_id, offsets)
            member.uncommitted.append((polled.partition_id, offsets[-1]))

    # Who joins (+) or leaves (-) at which round; a member holds what it polled for one
    # round before it commits, so every join finds partitions in flight.
    schedule = {0: "+a", 6: "+b", 14: "+c", 24: "-a", 34: "+a", 44: "-b", 54: "-c", 64: "+b"}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        for round_ in range(ROUNDS_MAX):
            event = schedule.get(round_)
            if event is not None:
                member = next(m for m in members if m.name == event[1])
                if event[0] == "+":
                    await member.client.join_consumer_group(STREAM, TOPIC, GROUP)
                    member.joined = True
                else:
                    await member.client.leave_consumer_group(STREAM, TOPIC, GROUP)
                    member.joined = False
                    member.uncommitted = []  # left without committing
                    ledger.left(member.name)
            for member in members:
                if member.joined:
                    await commit(member)
                    await poll(member)
            per_partition = MESSAGES // PARTITIONS
            served = [len(ledger.served.get(p, ())) for p in range(PARTITIONS)]
            if produced == MESSAGES and round_ > max(schedule) and min(served) >= per_partition:
                break
            await trio.sleep(0.02)
    ends = [MESSAGES // PARTITIONS] * PARTITIONS
    for member in members:
        await member.client.close()
    await admin.close()
    return ledger, ends


def _check_cooperative(ledger: Ledger, per_partition: list[int]) -> None:
    assert ledger.violations == []
    assert ledger.polls > 0
    for partition, count in enumerate(per_partition):
        # Nothing skipped: every offset of every partition reached some member.
        assert ledger.served.get(partition, set()) == set(range(count)), partition


def test_three_members_join_and_leave_while_a_producer_runs_one_node(tmp_path: Path) -> None:
    node = start_node(tmp_path / "node")
    try:
        ledger, ends = trio.run(_bounded, [node_url(node.address)])
    finally:
        node.kill()
    _check_cooperative(ledger, ends)


@pytest.fixture(scope="module")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    cluster = RealCluster.start(tmp_path_factory.mktemp("coop-cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()


def test_three_members_join_and_leave_while_a_producer_runs_three_nodes(
    real_cluster: RealCluster,
) -> None:
    ledger, ends = trio.run(_bounded, [real_cluster.url(i) for i in range(3)])
    _check_cooperative(ledger, ends)


async def _bounded(urls: list[str]) -> tuple[Ledger, list[int]]:
    with trio.fail_after(SCENARIO_TIMEOUT_S):
        return await _cooperative_scenario(urls)


# -- heartbeats ---------------------------------------------------------------------------

HEARTBEAT_INTERVAL_S = 1.0
"""The node's heartbeat interval in these tests: a member silent for 1.2 s is stale."""


@pytest.fixture(scope="module")
def fast_heartbeat_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    node = start_node(
        tmp_path_factory.mktemp("heartbeat") / "node",
        env={"VIEWSTREAM_HEARTBEAT__INTERVAL_S": str(HEARTBEAT_INTERVAL_S)},
    )
    try:
        yield node
    finally:
        node.kill()


def _group_ref() -> wire.GroupRef:
    return wire.GroupRef(
        wire.Identifier.named(STREAM), wire.Identifier.named(TOPIC), wire.Identifier.named(GROUP)
    )


def _setup_group(address: str) -> None:
    async def setup() -> None:
        async with AsyncClient.from_connection_string(node_url(address)) as admin:
            await admin.create_stream(STREAM)
            await admin.create_topic(STREAM, TOPIC, 2)
            await admin.create_consumer_group(STREAM, TOPIC, GROUP)

    trio.run(setup)


def _members(address: str) -> int:
    with WireClient(address) as admin:
        admin.login("iggy", ROOT_PASSWORD)
        details = admin.call(CommandCode.GET_CONSUMER_GROUP, _group_ref())
        assert isinstance(details, wire.ConsumerGroupDetails)
        return len(details.members)


def test_a_silent_member_is_evicted_as_stale_and_a_pinging_one_keeps_its_session(
    fast_heartbeat_node: NodeProcess,
) -> None:
    address = fast_heartbeat_node.address
    _setup_group(address)
    with WireClient(address) as silent, WireClient(address) as pinging, WireClient(address) as idle:
        for client in (silent, pinging, idle):
            client.login("iggy", ROOT_PASSWORD)
        silent.call(CommandCode.JOIN_CONSUMER_GROUP, _group_ref())
        pinging.call(CommandCode.JOIN_CONSUMER_GROUP, _group_ref())
        assert _members(address) == 2
        until = time.monotonic() + 4 * HEARTBEAT_INTERVAL_S
        while time.monotonic() < until:
            pinging.ping()
            time.sleep(HEARTBEAT_INTERVAL_S / 4)
        # The silent member got Iggy's eviction, then the connection closed.
        frame = silent.read_frame()
        assert frame is not None and frame.command is wire.Command.EVICTION
        assert frame.eviction_header().reason == EvictionReason.STALE_CLIENT
        assert silent.read_frame() is None
        # The pinging one is still a member, well past the interval; the idle one, a
        # member of nothing, is left alone, as in Iggy.
        assignment = pinging.call(CommandCode.SYNC_CONSUMER_GROUP, _group_ref())
        assert isinstance(assignment, wire.ConsumerGroupAssignment)
        assert assignment.partitions == (0, 1)
        idle.ping()
        me = idle.call(CommandCode.GET_ME, wire.Empty())
        assert isinstance(me, wire.ClientInfoDetails)
    assert _members(address) <= 1


def test_our_sdk_keeps_its_session_with_its_heartbeat(fast_heartbeat_node: NodeProcess) -> None:
    address = fast_heartbeat_node.address

    async def scenario() -> tuple[int, int]:
        async with AsyncClient.from_connection_string(
            node_url(address), heartbeat_interval_s=HEARTBEAT_INTERVAL_S / 4
        ) as client:
            await client.join_consumer_group(STREAM, TOPIC, GROUP)
            session = client.session
            await trio.sleep(4 * HEARTBEAT_INTERVAL_S)
            assignment = await client.sync_consumer_group(STREAM, TOPIC, GROUP)
            assert assignment is not None and assignment.partitions
            return session, client.session

    before, after = trio.run(scenario)
    assert before == after  # the same session: never evicted


def test_our_blocking_sdk_keeps_its_session_with_its_heartbeat(
    fast_heartbeat_node: NodeProcess,
) -> None:
    """The blocking client's heartbeat thread keeps a member that makes no call; one
    without a heartbeat (interval 0) is evicted as stale, and its partition moves."""
    address = fast_heartbeat_node.address
    url = node_url(address)
    with (
        Client.from_connection_string(url, heartbeat_interval_s=HEARTBEAT_INTERVAL_S / 4) as kept,
        Client.from_connection_string(url, heartbeat_interval_s=0) as silent,
    ):
        kept.join_consumer_group(STREAM, TOPIC, GROUP)
        silent.join_consumer_group(STREAM, TOPIC, GROUP)
        session = kept.session
        time.sleep(4 * HEARTBEAT_INTERVAL_S)
        assignment = kept.sync_consumer_group(STREAM, TOPIC, GROUP)
        assert assignment is not None and assignment.partitions == (0, 1)
        assert kept.session == session  # the same session: never evicted


def test_the_official_sdk_keeps_its_session_with_its_heartbeat(tmp_path: Path) -> None:
    # The official SDK pings every 5 s: a node with a 6 s interval evicts after 7.2 s.
    node = start_node(tmp_path / "node", env={"VIEWSTREAM_HEARTBEAT__INTERVAL_S": "6"})
    try:
        _setup_group(node.address)

        async def scenario() -> int:
            client = IggyClient(node.address)
            await client.connect()
            await client.login_user("iggy", ROOT_PASSWORD)
            await client.consumer_group(
                GROUP,
                STREAM,
                TOPIC,
                auto_commit=AutoCommit.Disabled(),
                polling_strategy=PollingStrategy.Next(),
                poll_interval=timedelta(milliseconds=50),
            )
            await asyncio.sleep(12)
            return _members(node.address)

        assert run(scenario(), timeout_s=60) == 1
    finally:
        node.kill()


def test_a_silent_member_on_a_backup_is_evicted_through_the_metadata_primary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every node of the cluster reads its settings from the environment it starts with.
    monkeypatch.setenv("VIEWSTREAM_HEARTBEAT__INTERVAL_S", str(HEARTBEAT_INTERVAL_S))
    cluster = RealCluster.start(tmp_path / "cluster")
    try:
        _setup_group(cluster.addresses[0])
        for address in cluster.addresses:
            with WireClient(address) as silent:
                silent.login("iggy", ROOT_PASSWORD)
                silent.call(CommandCode.JOIN_CONSUMER_GROUP, _group_ref())
                # Nothing sent for 1.2 intervals: whichever node holds the connection
                # evicts it, and its session ends through the metadata group.
                frame = silent.read_frame()
                assert frame is not None and frame.command is wire.Command.EVICTION
                assert frame.eviction_header().reason == EvictionReason.STALE_CLIENT
            # (Had the member not joined, nothing would have evicted the connection.)
            deadline = time.monotonic() + 10
            while _members(address) != 0:
                assert time.monotonic() < deadline, "the evicted member stayed in the group"
                time.sleep(0.1)
    finally:
        cluster.stop()
