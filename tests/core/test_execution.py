"""Carrying out a replica's actions (``broker.core.execution``), with a real replica.

The host here performs storage work by recording it, so each test sees in which order
the execution sent messages, answered requests and handed out work.
"""

from __future__ import annotations

import random

from broker.core.execution import Execution
from broker.core.groups import GroupRequests, Replied, Submission
from consensus.events import (
    Action,
    AppendToJournal,
    SendToReplica,
    TruncateJournal,
    WriteSuperblock,
)
from consensus.messages import Message, StartViewChange, checksum
from consensus.protocols import DurableState
from consensus.replica import Replica, Status
from consensus.testing import LedgerStateMachine, MemoryLog
from tests.consensus.harness import TEST_CONFIG
from tests.consensus.test_replica_handlers import _prepares


def _replica(count: int = 1) -> Replica:
    return Replica(
        0, 0, count, MemoryLog(), LedgerStateMachine(), random.Random(0), config=TEST_CONFIG
    )


def _run(execution: Execution, actions: list[Action], trail: list[str]) -> None:
    for action in execution.run(actions):
        trail.append(f"performed {type(action).__name__}")


def test_a_message_after_storage_work_leaves_only_once_the_work_is_performed() -> None:
    trail: list[str] = []

    def send(replica: int, message: Message) -> None:
        trail.append(f"sent to {replica}")

    execution = Execution(_replica(3), GroupRequests(), send)
    announce = StartViewChange(0, 0, 1)
    actions: list[Action] = [
        WriteSuperblock(DurableState(1, 0, 0, 0)),
        SendToReplica(1, announce),
        SendToReplica(2, announce),
    ]
    _run(execution, actions, trail)
    assert trail == ["performed WriteSuperblock", "sent to 1", "sent to 2"]


def test_written_is_the_newest_append_a_later_truncation_left() -> None:
    prepares = _prepares(3)
    execution = Execution(_replica(), GroupRequests(), lambda replica, message: None)
    trail: list[str] = []
    _run(execution, [AppendToJournal(p) for p in prepares[:2]], trail)
    written = execution.written_event()
    assert written is not None and written.op == 2
    _run(execution, [TruncateJournal(after_op=1)], trail)
    assert execution.written_event() is None
    _run(execution, [AppendToJournal(prepares[2]), TruncateJournal(after_op=3)], trail)
    written = execution.written_event()  # a truncation above it takes nothing back
    assert written is not None and written.op == 3


def test_a_lone_primary_answers_its_request_once_its_prepare_is_written() -> None:
    """A submission goes through take, step, execution and the write's report, as the
    runtime's and the simulator's hosts carry it, and gets its reply once (a lone
    ``replicated`` replica commits what it wrote)."""
    replica = _replica()
    requests = GroupRequests()
    got: list[object] = []
    body = b"x"
    requests.submit(Submission(5, 1, 1, 7, body, 1, got.append, checksum(body)))
    taken = requests.take(replica, disk_full=False)
    assert taken is not None and replica.status is Status.NORMAL
    execution = Execution(replica, requests, lambda index, message: None)
    work = [type(a).__name__ for a in execution.run(replica.step(taken.submission.event()))]
    requests.settle(taken.submission)
    assert "AppendToJournal" in work and got == []  # prepared, not yet written
    written = execution.written_event()
    assert written is not None
    after = [type(a).__name__ for a in execution.run(replica.step(written))]
    [outcome] = got
    assert isinstance(outcome, Replied) and outcome.op == 1
    # Replies and messages are the execution's own; the host only ever sees storage work.
    assert not {"ReplyToClient", "SendToReplica"} & {*work, *after}
