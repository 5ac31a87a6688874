"""Requests a backup forwards to its primary's node (``broker.core.forwarding``)."""

from __future__ import annotations

import random

from broker.core.forwarding import Forwards, forward_target
from broker.core.groups import Outcome, Refused, Replied, Submission, timed_out
from consensus.events import MessageReceived
from consensus.messages import StartViewChange
from consensus.replica import Replica
from consensus.testing import LedgerStateMachine, MemoryLog
from sdk.wire import IggyErrorCode
from tests.consensus.harness import TEST_CONFIG

NOT_COMMITTED = IggyErrorCode.TRANSIENT_NOT_COMMITTED


def _replica(index: int, count: int = 3) -> Replica:
    return Replica(
        0, index, count, MemoryLog(), LedgerStateMachine(), random.Random(index), config=TEST_CONFIG
    )


def _submission(got: list[Outcome], *, forwarded: bool = False) -> Submission:
    return Submission(5, 1, 1, 7, b"x", 1, got.append, b"c" * 16, forwarded=forwarded)


def test_only_a_backup_in_normal_status_forwards_and_only_to_its_views_primary() -> None:
    got: list[Outcome] = []
    assert forward_target(_replica(1), _submission(got)) == 0  # view 0's primary of group 0
    assert forward_target(_replica(0), _submission(got)) is None  # the primary itself
    assert forward_target(None, _submission(got)) is None  # the group is still opening
    # A request another node forwarded here is never forwarded again (no loops).
    assert forward_target(_replica(1), _submission(got, forwarded=True)) is None
    changing = _replica(1)
    changing.step(MessageReceived(StartViewChange(0, 2, 1)))
    assert forward_target(changing, _submission(got)) is None


def test_a_forwarded_request_is_answered_once_by_its_peers_outcome() -> None:
    forwards, got = Forwards(), list[Outcome]()
    submission = _submission(got)
    token = forwards.next_token()
    forwards.sent(token, 2, submission)
    assert submission.admitted and len(forwards) == 1
    # Once sent, a client that stops waiting is told its outcome is unknown, not 58.
    assert timed_out(submission) == Refused(NOT_COMMITTED)
    forwards.answered(1, token, Replied(3, 3, 0, b"r"))  # another peer: not its answer
    assert got == []
    forwards.answered(2, token, Replied(3, 3, 0, b"r"))
    forwards.answered(2, token, Replied(3, 3, 0, b"r"))  # a duplicate
    assert got == [Replied(3, 3, 0, b"r")] and len(forwards) == 0


def test_a_lost_link_tells_every_request_forwarded_over_it_59() -> None:
    forwards = Forwards()
    got: dict[str, list[Outcome]] = {"a": [], "b": [], "c": []}
    for name, peer in (("a", 1), ("b", 2), ("c", 1)):
        forwards.sent(forwards.next_token(), peer, _submission(got[name]))
    forwards.peer_lost(1)
    assert got == {"a": [Refused(NOT_COMMITTED)], "b": [], "c": [Refused(NOT_COMMITTED)]}
    assert len(forwards) == 1
    forwards.answered(1, 1, Replied(1, 1, 0, b""))  # too late: answered already
    assert got["a"] == [Refused(NOT_COMMITTED)]


def test_entries_of_clients_answered_otherwise_are_forgotten() -> None:
    forwards, got = Forwards(), list[Outcome]()
    submission = _submission(got)
    token = forwards.next_token()
    forwards.sent(token, 1, submission)
    submission.answer(timed_out(submission))  # its submitter's deadline passed
    forwards.forget_answered()
    assert len(forwards) == 0
    forwards.answered(1, token, Replied(1, 1, 0, b""))
    assert got == [Refused(NOT_COMMITTED)]
