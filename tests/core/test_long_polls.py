"""The node's table of waiting long polls: release on commit, on deadline, bounds."""

from __future__ import annotations

from broker.core.long_polls import (
    LONG_POLL_WAIT_US_MAX,
    LongPolls,
    Refusal,
    WakeReason,
    Woken,
)

GROUP = 7
OTHER_GROUP = 8


def _token(result: int | Refusal) -> int:
    assert isinstance(result, int), result
    return result


def test_wait_is_released_once_its_group_applies_the_message_it_waits_for() -> None:
    polls = LongPolls()
    token = _token(polls.register(1, GROUP, 5, now_us=0, wait_us=1_000_000))
    assert polls.applied(GROUP, 5) == []  # messages end before offset 5: not there yet
    assert polls.applied(OTHER_GROUP, 100) == []  # another partition's messages
    assert polls.applied(GROUP, 6) == [(token, Woken(WakeReason.MESSAGES, 1_000_000))]
    assert len(polls) == 0
    assert polls.applied(GROUP, 7) == []  # released exactly once


def test_commit_releases_every_wait_it_satisfies_in_registration_order() -> None:
    polls = LongPolls()
    first = _token(polls.register(1, GROUP, 3, now_us=0, wait_us=10))
    later = _token(polls.register(2, GROUP, 9, now_us=0, wait_us=10))
    second = _token(polls.register(3, GROUP, 2, now_us=0, wait_us=10))
    released = polls.applied(GROUP, 4)
    assert [token for token, _ in released] == [first, second]
    assert [token for token, _ in polls.applied(GROUP, 10)] == [later]


def test_wait_is_released_at_its_deadline_not_before() -> None:
    polls = LongPolls()
    token = _token(polls.register(1, GROUP, 0, now_us=1_000, wait_us=500))
    assert polls.next_deadline_us() == 1_500
    assert polls.expired(1_499) == []
    assert polls.expired(1_500) == [(token, Woken(WakeReason.DEADLINE, 1_500))]
    assert polls.next_deadline_us() is None


def test_wait_longer_than_the_maximum_is_cut_to_it() -> None:
    polls = LongPolls()
    polls.register(1, GROUP, 0, now_us=0, wait_us=10 * LONG_POLL_WAIT_US_MAX)
    assert polls.next_deadline_us() == LONG_POLL_WAIT_US_MAX


def test_waiting_again_keeps_the_first_deadline() -> None:
    polls = LongPolls()
    _token(polls.register(1, GROUP, 0, now_us=0, wait_us=1_000))
    ((_, woken),) = polls.metadata_changed()
    assert woken == Woken(WakeReason.METADATA, 1_000)
    polls.register(1, GROUP, 0, now_us=900, wait_us=1_000, deadline_us=woken.deadline_us)
    assert polls.next_deadline_us() == 1_000


def test_node_bound_refuses_one_more_wait_and_frees_a_place_on_release() -> None:
    polls = LongPolls(waiting_max=2)
    a = _token(polls.register(1, GROUP, 0, now_us=0, wait_us=10))
    _token(polls.register(2, GROUP, 5, now_us=0, wait_us=10))
    refused = polls.register(3, GROUP, 0, now_us=0, wait_us=10)
    assert isinstance(refused, Refusal)
    assert "2 long polls already wait on this node" in refused.why
    assert polls.refused == 1
    assert [token for token, _ in polls.applied(GROUP, 1)] == [a]
    _token(polls.register(3, GROUP, 0, now_us=0, wait_us=10))


def test_connection_bound_refuses_a_second_wait_for_the_same_connection() -> None:
    polls = LongPolls(per_connection_max=1)
    _token(polls.register(1, GROUP, 0, now_us=0, wait_us=10))
    refused = polls.register(1, OTHER_GROUP, 0, now_us=0, wait_us=10)
    assert isinstance(refused, Refusal)
    assert "for this connection" in refused.why
    _token(polls.register(2, GROUP, 0, now_us=0, wait_us=10))  # another connection may


def test_busy_connection_releases_its_wait_only() -> None:
    polls = LongPolls()
    mine = _token(polls.register(1, GROUP, 0, now_us=0, wait_us=10))
    _token(polls.register(2, GROUP, 0, now_us=0, wait_us=10))
    assert polls.connection_busy(3) == []
    assert polls.connection_busy(1) == [(mine, Woken(WakeReason.CONNECTION, 10))]
    assert len(polls) == 1
    _token(polls.register(1, GROUP, 0, now_us=0, wait_us=10))  # its place is free again


def test_group_gone_releases_the_waits_on_it() -> None:
    polls = LongPolls()
    gone = _token(polls.register(1, GROUP, 0, now_us=0, wait_us=10))
    _token(polls.register(2, OTHER_GROUP, 0, now_us=0, wait_us=10))
    assert polls.group_gone(GROUP) == [(gone, Woken(WakeReason.GROUP_GONE, 10))]


def test_stop_releases_every_wait_and_refuses_new_ones() -> None:
    polls = LongPolls()
    tokens = [_token(polls.register(c, GROUP, 0, now_us=0, wait_us=10)) for c in (1, 2)]
    released = polls.stop()
    assert [(token, woken.reason) for token, woken in released] == [
        (token, WakeReason.STOPPING) for token in tokens
    ]
    assert isinstance(polls.register(3, GROUP, 0, now_us=0, wait_us=10), Refusal)
    assert polls.refused == 0  # stopping is not a bound


def test_cancelled_wait_leaves_the_table() -> None:
    polls = LongPolls()
    token = _token(polls.register(1, GROUP, 0, now_us=0, wait_us=10))
    assert [t for t, _ in polls.cancel(token)] == [token]
    assert polls.cancel(token) == []
    assert len(polls) == 0 and polls.next_deadline_us() is None
