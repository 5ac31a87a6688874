"""The read barrier (``broker.core.reads``), against a real replica."""

from __future__ import annotations

import random

from broker.core.reads import (
    ReadIndexRound,
    read_index_answer,
    read_index_confirmations,
    readable,
)
from consensus.events import MessageReceived
from consensus.messages import StartViewChange
from consensus.replica import Replica, Status
from consensus.testing import LedgerStateMachine, MemoryLog
from tests.consensus.harness import TEST_CONFIG


def _backup() -> Replica:
    return Replica(0, 1, 3, MemoryLog(), LedgerStateMachine(), random.Random(1), config=TEST_CONFIG)


def test_a_replica_in_normal_status_serves_what_it_applied_and_nothing_beyond() -> None:
    backup = _backup()
    assert backup.status is Status.NORMAL and backup.commit_min == 0
    assert readable(backup, 0)
    assert not readable(backup, 1)  # the client saw op 1 committed: not applied here yet


def test_no_reads_while_the_group_opens_or_its_view_changes() -> None:
    assert not readable(None, 0)
    backup = _backup()
    backup.step(MessageReceived(StartViewChange(0, 2, 1)))
    assert backup.status is Status.VIEW_CHANGE
    assert not readable(backup, 0)


def _replica(index: int, count: int) -> Replica:
    return Replica(
        0, index, count, MemoryLog(), LedgerStateMachine(), random.Random(index), config=TEST_CONFIG
    )


def test_read_index_confirmations_outnumber_the_replicas_a_newer_view_could_hold() -> None:
    # A newer view needs a majority; the asker's view must keep more than the rest.
    assert [read_index_confirmations(n) for n in (1, 2, 3, 4, 5, 7)] == [1, 1, 2, 2, 3, 4]


def test_only_the_primary_in_the_askers_view_answers_its_commit() -> None:
    primary, backup = _replica(0, 3), _replica(1, 3)
    assert read_index_answer(primary, 0) == (True, primary.commit_max)
    assert read_index_answer(backup, 0) == (True, None)
    assert read_index_answer(primary, 1) == (False, None)  # the asker is in a newer view
    assert read_index_answer(None, 0) == (False, None)  # the group is not open there
    backup.step(MessageReceived(StartViewChange(0, 2, 1)))
    assert read_index_answer(backup, 0) == (False, None)  # it left view 0


def test_with_three_replicas_the_primarys_answer_decides_the_round() -> None:
    round_ = ReadIndexRound(_replica(1, 3))
    assert round_.peers() == [0]
    assert round_.commit is None and not round_.failed
    round_.answered(0, True, 7)
    assert round_.commit == 7


def test_with_five_replicas_one_more_backup_must_confirm_the_view() -> None:
    """The case a primary and a backup cut off from a newer view of three replicas would
    get wrong: their view's commit misses what the newer view acknowledged."""
    round_ = ReadIndexRound(_replica(1, 5))
    assert round_.peers() == [0, 2, 3, 4]
    round_.answered(0, True, 7)
    assert round_.commit is None  # the asker and the primary: two of the three needed
    round_.answered(2, False, None)
    round_.answered(3, False, None)
    assert round_.commit is None and not round_.failed
    round_.answered(4, True, None)
    assert round_.commit == 7


def test_a_round_fails_once_it_cannot_be_decided() -> None:
    denied = ReadIndexRound(_replica(1, 3))
    denied.answered(0, False, None)  # the primary moved on
    assert denied.failed and denied.commit is None
    cut_off = ReadIndexRound(_replica(1, 5))
    for other in (2, 3, 4):
        cut_off.answered(other, False, None)
    assert cut_off.failed  # only the asker and the primary are left: two of three
    hint = ReadIndexRound(_replica(1, 5), confirmed=False)
    assert hint.peers() == [0]
    hint.answered(0, True, 9)
    assert hint.commit == 9  # a hint to learn the commit, not a fresh read's barrier


def _decided(round_: ReadIndexRound) -> int | None:
    return round_.commit


def test_a_primary_asks_its_backups_whether_it_still_leads() -> None:
    """A primary cut off from a newer view would serve its own old commit: for a fresh
    read it needs a backup of its view to confirm (two of three), its commit the answer."""
    primary = _replica(0, 3)
    round_ = ReadIndexRound(primary)
    assert round_.peers() == [1, 2]
    assert _decided(round_) is None
    round_.answered(1, False, None)  # that backup moved to a newer view
    assert _decided(round_) is None and not round_.failed
    round_.answered(2, True, None)
    assert _decided(round_) == primary.commit_max
    deposed = ReadIndexRound(_replica(0, 3))
    deposed.answered(1, False, None)
    deposed.answered(2, False, None)
    assert deposed.failed and deposed.commit is None


def test_a_lone_replica_or_an_unconfirmed_primary_needs_nobody() -> None:
    lone = ReadIndexRound(_replica(0, 1))
    assert lone.peers() == [] and lone.commit == 0
    hint = ReadIndexRound(_replica(0, 3), confirmed=False)
    assert hint.peers() == [] and hint.commit == 0


def test_a_backup_of_two_replicas_still_asks_the_primary_for_its_commit() -> None:
    """With two replicas the asker alone confirms the view (a newer one needs both), but
    the commit is still the primary's to give."""
    assert read_index_confirmations(2) == 1
    for confirmed in (True, False):
        round_ = ReadIndexRound(_replica(1, 2), confirmed=confirmed)
        assert round_.peers() == [0]
        assert _decided(round_) is None
        round_.answered(0, True, 5)
        assert _decided(round_) == 5
