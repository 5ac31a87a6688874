"""The checkers bite: each named property fails on the history it forbids."""

from __future__ import annotations

import dataclasses
import random

import pytest

from broker.state.errors import ErrorCode
from broker.state.metadata import ConsumerGroupInfo, MemberInfo
from consensus.messages import Prepare
from sdk import wire
from sim.checkers import Checkers, CheckFailed
from sim.client import Client, Kind, Pending, Role
from sim.network import ClientReply, ClientRequest
from sim.options import Options
from tests.consensus.test_replica_handlers import _prepares


class _Reporter:
    def on_reply(self, client: Client, pending: Pending, reply: ClientReply) -> None: ...

    def on_abandoned(self, client: Client, pending: Pending) -> None: ...


def _client() -> Client:
    return Client(0, 1000, 77, Role.CONSUMER, Options.from_seed(0), random.Random(0), _Reporter())


class _WithoutModel(Checkers):
    """Agreement alone: the model is not fed these synthetic prepares."""

    def _feed_model(self, group: int) -> None:
        del group


def test_agreement_fails_when_two_replicas_apply_different_prepares_at_one_op() -> None:
    checkers = _WithoutModel()
    ours = _prepares(1)[0]
    header = dataclasses.replace(ours.header, client_id=4242, checksum=b"\x01" * 16)
    checkers.on_apply(0, 1, ours, b"r")
    checkers.on_apply(2, 1, ours, b"r")  # the same prepare again is fine
    with pytest.raises(CheckFailed) as failed:
        checkers.on_apply(1, 1, Prepare(header, ours.body), b"r")
    assert failed.value.checker == "agreement" and failed.value.kind == "correctness"


def test_agreement_fails_when_replies_differ() -> None:
    checkers = _WithoutModel()
    ours = _prepares(1)[0]
    checkers.on_apply(0, 1, ours, b"r")
    with pytest.raises(CheckFailed, match="different reply"):
        checkers.on_apply(1, 1, ours, b"other")


def test_agreement_fails_when_a_replica_skips_an_op() -> None:
    checkers = _WithoutModel()
    prepares = _prepares(3)
    checkers.on_apply(0, 1, prepares[0], b"r")
    with pytest.raises(CheckFailed, match="applied op 3 after 1"):
        checkers.on_apply(0, 1, prepares[2], b"r")


def test_reply_for_an_op_nobody_committed_fails() -> None:
    checkers = Checkers()
    client = _client()
    request = ClientRequest(77, 1, 5, 0, b"")
    pending = Pending(Kind.STORE_OFFSET, (0, 0), request, 0)
    with pytest.raises(CheckFailed) as failed:
        checkers.on_reply(client, pending, ClientReply(77, 5, 9, 0, wire.result_ok(), group=1))
    assert failed.value.checker == "reply"


def _poll_reply(first_offset: int, ids: list[int], retained_from: int = 0) -> ClientReply:
    messages = [wire.OutgoingMessage(i, b"p") for i in ids]
    batch = wire.build_batch(messages)
    verified = wire.verify_batch(batch)
    wire.stamp_batch(batch, verified, partition_id=0, base_offset=first_offset, base_timestamp=1)
    body = wire.PollMessagesReply(0, first_offset + len(ids) - 1, len(ids), (bytes(batch),))
    return ClientReply(77, 5, 0, 0, body.encode(), first_offset=retained_from, group=1)


def test_poll_that_skips_forward_fails() -> None:
    checkers = Checkers()
    checkers.partition_model(1).message_ids = [10, 11, 12, 13]
    pending = Pending(Kind.POLL, (0, 0), ClientRequest(77, 1, 5, 0, b""), 0, position=1)
    checkers.on_reply(_client(), pending, _poll_reply(1, [11, 12]))
    with pytest.raises(CheckFailed, match="poll-skip"):
        checkers.on_reply(_client(), pending, _poll_reply(2, [12]))


def test_poll_of_uncommitted_or_different_messages_fails() -> None:
    checkers = Checkers()
    checkers.partition_model(1).message_ids = [10, 11]
    pending = Pending(Kind.POLL, (0, 0), ClientRequest(77, 1, 5, 0, b""), 0, position=0)
    with pytest.raises(CheckFailed, match="not committed"):
        checkers.on_reply(_client(), pending, _poll_reply(0, [10, 11, 12]))
    with pytest.raises(CheckFailed, match="inconsistent-offsets"):
        checkers.on_reply(_client(), pending, _poll_reply(0, [10, 99]))


def test_poll_skip_to_the_replicas_retained_start_is_counted_only_when_lenient() -> None:
    pending = Pending(Kind.POLL, (0, 0), ClientRequest(77, 1, 5, 0, b""), 0, position=1)
    lenient = Checkers(strict_polls=False)
    lenient.partition_model(1).message_ids = [10, 11, 12, 13]
    lenient.on_reply(_client(), pending, _poll_reply(3, [13], retained_from=3))
    assert lenient.poll_gaps == 1
    strict = Checkers()  # strict by default
    strict.partition_model(1).message_ids = [10, 11, 12, 13]
    with pytest.raises(CheckFailed, match="poll-skip"):
        strict.on_reply(_client(), pending, _poll_reply(3, [13], retained_from=3))


def test_a_node_hosting_a_group_the_metadata_does_not_name_fails() -> None:
    checkers = Checkers()
    checkers.on_hosted(0, 0, (), set())  # nothing created yet, nothing hosted: fine
    with pytest.raises(CheckFailed) as failed:
        checkers.on_hosted(1, 0, (42,), set())
    assert failed.value.checker == "hosting"
    with pytest.raises(CheckFailed, match="has not applied"):
        checkers.on_hosted(1, 7, (), set())


def test_a_deleted_topic_served_on_the_connection_told_of_its_deletion_fails() -> None:
    checkers = Checkers()
    pending = Pending(
        Kind.POLL_DELETED, (3, 0), ClientRequest(77, 1, 5, 0, b""), 0, via=(2, 1), topic=3
    )
    pending.replied_by = 2
    refused = ClientReply(77, 5, 0, int(ErrorCode.TOPIC_ID_NOT_FOUND), b"", incarnation=1)
    checkers.on_reply(_client(), pending, refused)
    assert checkers.deleted_polls_checked == 1
    elsewhere = ClientReply(77, 5, 0, 0, b"", incarnation=2)  # a new connection: not judged
    checkers.on_reply(_client(), pending, elsewhere)
    assert checkers.deleted_polls_checked == 1
    with pytest.raises(CheckFailed) as failed:
        checkers.on_reply(_client(), pending, ClientReply(77, 5, 0, 0, b"", incarnation=1))
    assert failed.value.checker == "deleted"


def _group(
    generation: int, *members: tuple[int, tuple[int, ...], tuple[int, ...]]
) -> ConsumerGroupInfo:
    return ConsumerGroupInfo(
        0,
        0,
        0,
        "g",
        generation,
        4,
        tuple(MemberInfo(member, member, owned, revoking) for member, owned, revoking in members),
    )


def test_a_partition_moving_straight_between_two_live_members_fails() -> None:
    checkers = Checkers()
    checkers.on_assignments(0, 10, (_group(2, (1, (0, 1), ()), (2, (), ())),))
    with pytest.raises(CheckFailed) as failed:
        checkers.on_assignments(0, 11, (_group(3, (1, (0,), ()), (2, (1,), ())),))
    assert failed.value.checker == "ownership"


def test_a_partition_moving_through_a_revocation_or_off_a_member_that_left_passes() -> None:
    checkers = Checkers()
    checkers.on_assignments(0, 10, (_group(2, (1, (0, 1), ()), (2, (), ())),))
    checkers.on_assignments(0, 11, (_group(3, (1, (0, 1), (1,)), (2, (), ())),))
    checkers.on_assignments(1, 12, (_group(4, (1, (0,), ()), (2, (1,), ())),))
    checkers.on_assignments(0, 13, (_group(5, (2, (0, 1), ())),))  # member 1 left
    assert checkers.handoffs == 1
