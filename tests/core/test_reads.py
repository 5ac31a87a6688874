"""The read barrier (``broker.core.reads``), against a real replica."""

from __future__ import annotations

import random

from broker.core.reads import readable
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
