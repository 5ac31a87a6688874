"""Request identity in a real 3-node cluster: requests under one reused number are each
applied and answered with their own reply, also through a backup that forwards them, and a
true retry sent to a new primary after the old one was killed is answered from the client
table and applied once. Every process binds 127.0.0.1 and is killed in teardown."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.chaos.nodes import ChaosCluster
from sdk import wire
from sdk.wire import CommandCode, IggyErrorCode
from tests.runtime.processes import CLUSTER_SECRET, ROOT_PASSWORD
from tests.runtime.test_cluster_replies import METADATA, create_topic, login, primary_of
from tests.runtime.test_request_identity import (
    _base_offset,
    _poll_all,
    _send_body,
    call_as,
    exercise_reused_number,
)
from tests.wire_client import WireClient

TICK_MS = 5
RETRY_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[ChaosCluster]:
    with tempfile.TemporaryDirectory(prefix="viewstream-identity-") as folder:
        running = ChaosCluster(
            Path(folder),
            root_password=ROOT_PASSWORD,
            cluster_secret=CLUSTER_SECRET,
            tick_ms=TICK_MS,
        )
        try:
            running.start()
            yield running
        finally:
            running.close()


def _partition_led_away_from_metadata(cluster: ChaosCluster, groups: list[str]) -> int:
    """A partition whose primary is not the metadata primary's node, if there is one."""
    metadata_primary, _ = primary_of(cluster, METADATA)
    for partition, group in enumerate(groups):
        if primary_of(cluster, group)[0] != metadata_primary:
            return partition
    return 0


def test_reused_numbers_at_the_partition_primary_and_through_a_backup(
    cluster: ChaosCluster,
) -> None:
    groups = create_topic(cluster, "identity-direct")
    partition = _partition_led_away_from_metadata(cluster, groups)
    primary, _ = primary_of(cluster, groups[partition])
    client, _ = login(cluster.client_addresses[primary])
    with client:
        exercise_reused_number(client, "identity-direct", partition, (partition + 1) % 3)
    groups = create_topic(cluster, "identity-forwarded")
    primary, _ = primary_of(cluster, groups[partition])
    backup, _ = login(cluster.client_addresses[(primary + 1) % cluster.count])
    with backup:
        exercise_reused_number(backup, "identity-forwarded", partition, (partition + 1) % 3)


def _retry_until_answered(client: WireClient, number: int, body: bytes) -> wire.Frame:
    """A true retry (same client, session, number and bytes), repeated while the cluster
    says it is not ready (58, a view change under way), bounded."""
    deadline = time.monotonic() + RETRY_TIMEOUT_S
    while True:
        frame = call_as(client, number, CommandCode.SEND_MESSAGES, body)
        status = frame.reply_header().status
        if status == 0:
            return frame
        assert status in (
            IggyErrorCode.TRANSIENT_NOT_ACCEPTED,
            IggyErrorCode.TRANSIENT_NOT_COMMITTED,
        ), status
        assert time.monotonic() < deadline, "the retry was never answered"
        time.sleep(0.1)


def test_a_retry_at_a_new_primary_after_the_old_one_was_killed_is_applied_once(
    cluster: ChaosCluster,
) -> None:
    groups = create_topic(cluster, "identity-failover")
    partition = _partition_led_away_from_metadata(cluster, groups)
    group = groups[partition]
    old, old_view = primary_of(cluster, group)
    client, _ = login(cluster.client_addresses[old])
    with client:
        number = client.request
        batch_a = _send_body("identity-failover", partition, [b"a"])
        batch_b = _send_body("identity-failover", partition, [b"b1", b"b2"])
        assert _base_offset(call_as(client, number, CommandCode.SEND_MESSAGES, batch_a)) == 0
        reply_b = call_as(client, number, CommandCode.SEND_MESSAGES, batch_b)
        assert _base_offset(reply_b) == 1
        client_id, session = client.client_id, client.session
        # Killed while this connection is open: had it closed first, the node could end
        # its session (a closed connection ends the session it opened) before it dies,
        # and the login below would rightly open a new one.
        cluster.kill(old)
    survivor = (old + 1) % cluster.count
    # The client comes back on another node under its client id: its login is a retry of
    # the register, which gives it its live session back; then it retries B.
    with WireClient(cluster.client_addresses[survivor]) as again:
        again.client_id = client_id
        deadline = time.monotonic() + RETRY_TIMEOUT_S
        while True:
            frame = again.call_raw(
                int(CommandCode.LOGIN_REGISTER), wire.LoginRegister("iggy", ROOT_PASSWORD).encode()
            )
            if frame.reply_header().status == 0:
                break
            assert frame.reply_header().status == IggyErrorCode.TRANSIENT_NOT_ACCEPTED
            assert time.monotonic() < deadline, "no login after the primary was killed"
            time.sleep(0.1)
        reply = wire.read_reply(CommandCode.LOGIN_REGISTER, frame)
        assert isinstance(reply, wire.LoginRegisterReply) and reply.session == session
        again.session = session
        retried = _retry_until_answered(again, number, batch_b)
        assert bytes(retried.data[wire.HEADER_SIZE :]) == bytes(reply_b.data[wire.HEADER_SIZE :])
        new, new_view = primary_of(cluster, group)
        assert new != old and new_view > old_view
        again.request = number + 1
        assert _poll_all(again, "identity-failover", partition) == [b"a", b"b1", b"b2"]
        # A new batch under the same number after the failover is applied (at-least-once).
        batch_c = _send_body("identity-failover", partition, [b"c"])
        assert _base_offset(_retry_until_answered(again, number, batch_c)) == 3
    cluster.restart(old)
