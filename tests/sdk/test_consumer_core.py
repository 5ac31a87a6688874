"""The consumer core's pure parts: back-off, commit policy, acknowledgements."""

from __future__ import annotations

from sdk._consumer_core import AutoCommit, ConsumerCore
from sdk.types import ReceivedMessage
from sdk.wire import PollingStrategy
from tests.sdk.script import make_core


def consumer(auto_commit: AutoCommit) -> ConsumerCore:
    core, _ = make_core()
    return ConsumerCore(
        core,
        1,
        2,
        group=None,
        consumer_id=1,
        partition_ids=[0, 1],
        start=PollingStrategy.next(),
        batch_length=10,
        auto_commit=auto_commit,
        create_group=False,
        poll_interval_min_s=0.01,
        poll_interval_max_s=0.5,
        sync_interval_s=1.0,
    )


def received(partition: int, offset: int) -> ReceivedMessage:
    return ReceivedMessage(partition, offset, 1, 0, 0, 0, b"")


def test_idle_delay_doubles_over_empty_rounds_up_to_the_maximum_and_resets() -> None:
    c = consumer(AutoCommit.disabled())
    delays = []
    for rounds in range(1, 10):
        c.empty_rounds = rounds
        delays.append(c.idle_delay_s())
    assert delays[:4] == [0.01, 0.02, 0.04, 0.08]
    assert max(delays) == 0.5 and delays == sorted(delays)
    c.empty_rounds = 0
    assert c.idle_delay_s() == 0.01


def test_acks_only_move_forward_per_partition() -> None:
    c = consumer(AutoCommit.disabled())
    c.ack(received(0, 5))
    c.ack(received(0, 3))
    c.ack(received(1, 1))
    assert c.consumed == {0: 5, 1: 1}
    assert c.dirty


def test_disabled_policy_never_commits_on_its_own() -> None:
    c = consumer(AutoCommit.disabled())
    c.ack(received(0, 1))
    assert not c.commit_due(1000.0, batch_done=True)


def test_after_batch_policy_commits_when_the_batch_is_done() -> None:
    c = consumer(AutoCommit.after_each_batch())
    assert not c.commit_due(0.0, batch_done=True), "nothing consumed yet"
    c.ack(received(0, 1))
    assert not c.commit_due(0.0, batch_done=False)
    assert c.commit_due(0.0, batch_done=True)


def test_interval_policy_commits_when_the_interval_has_passed() -> None:
    c = consumer(AutoCommit.interval(2.0))
    c.ack(received(0, 1))
    assert not c.commit_due(1.0, batch_done=True)
    assert c.commit_due(2.5, batch_done=False)


def test_nothing_is_due_once_committed_offsets_match() -> None:
    c = consumer(AutoCommit.after_each_batch())
    c.ack(received(0, 4))
    c.committed[0] = 4
    assert not c.dirty
    assert not c.commit_due(0.0, batch_done=True)
