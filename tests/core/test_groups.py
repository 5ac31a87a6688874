"""A hosted group's client requests (``broker.core.groups``), against a real replica.

Each test drives a ``consensus.Replica`` the way a host does: ``take`` until None, step
what it says, report appends and replies. Disk completions are held until the test says
so, which keeps prepares in the pipeline as long as a case needs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from broker.core.execution import Execution
from broker.core.groups import (
    Forward,
    GroupRequests,
    Outcome,
    Propose,
    Refused,
    RefusedDiskFull,
    Replied,
    Submission,
    admissible,
    timed_out,
)
from consensus.events import (
    AppendToJournal,
    Event,
    MessageReceived,
    PrepareWritten,
)
from consensus.messages import StartViewChange, checksum
from consensus.replica import Replica, Status
from consensus.testing import LedgerStateMachine, MemoryLog
from sdk.wire import IggyErrorCode
from sdk.wire.codes import Operation
from tests.consensus.harness import TEST_CONFIG

OPERATION = 7
NOT_ACCEPTED = IggyErrorCode.TRANSIENT_NOT_ACCEPTED
NOT_COMMITTED = IggyErrorCode.TRANSIENT_NOT_COMMITTED


@dataclass
class Host:
    """The smallest host of one replica: a memory journal, writes completed on demand."""

    replica: Replica
    log: MemoryLog
    requests: GroupRequests = field(default_factory=GroupRequests)
    written: list[PrepareWritten] = field(default_factory=list)
    forwarded: list[Submission] = field(default_factory=list)
    disk_full: bool = False
    taken: list[type] = field(default_factory=list)

    def step(self, event: Event) -> None:
        execution = Execution(self.replica, self.requests, lambda replica, message: None)
        for action in execution.run(self.replica.step(event)):
            if isinstance(action, AppendToJournal):
                self.log.append(action.prepare)
                self.written.append(PrepareWritten(action.prepare.op, action.prepare.checksum))
        if not self.replica.is_primary:
            self.requests.primary_lost()

    def admit(self) -> None:
        while (taken := self.requests.take(self.replica, disk_full=self.disk_full)) is not None:
            self.taken.append(type(taken))
            if isinstance(taken, Forward):
                self.forwarded.append(taken.submission)
            elif isinstance(taken, Propose):
                self.step(taken.submission.event())
                self.requests.settle(taken.submission)

    def complete_writes(self) -> None:
        written, self.written = self.written, []
        for event in written:
            self.step(event)
        self.admit()


def _host(index: int = 0, count: int = 1, *, pipeline: int = 8) -> Host:
    log = MemoryLog()
    config = replace(TEST_CONFIG, pipeline_prepares_max=pipeline)
    replica = Replica(
        0, index, count, log, LedgerStateMachine(), random.Random(index), config=config
    )
    return Host(replica, log)


@dataclass
class Answers:
    """What each submission was told, in order."""

    got: dict[str, list[Outcome]] = field(default_factory=dict)

    def submission(
        self,
        name: str,
        request: int,
        body: bytes = b"x",
        *,
        client_id: int = 5,
        operation: int = OPERATION,
    ) -> Submission:
        self.got[name] = []
        return Submission(
            client_id, 1, request, operation, body, 1, self.got[name].append, checksum(body)
        )


def test_a_queued_request_on_a_lone_primary_is_answered_once_with_its_committed_reply() -> None:
    host, answers = _host(), Answers()
    host.requests.submit(answers.submission("a", 1))
    host.admit()
    assert answers.got["a"] == []  # in the pipeline until its write completes
    host.complete_writes()
    [outcome] = answers.got["a"]
    assert isinstance(outcome, Replied) and outcome.op == 1 and outcome.commit == 1


def test_a_retry_of_the_request_in_flight_takes_its_place_and_gets_the_one_reply() -> None:
    host, answers = _host(), Answers()
    host.requests.submit(answers.submission("first", 1))
    host.admit()
    host.requests.submit(answers.submission("retry", 1))
    host.admit()
    host.complete_writes()
    assert answers.got["first"] == []
    assert [type(o) for o in answers.got["retry"]] == [Replied]
    assert host.log.op_max() == 1  # prepared once


def test_another_request_under_the_number_in_flight_never_gets_that_requests_reply() -> None:
    host, answers = _host(), Answers()
    host.requests.submit(answers.submission("first", 1, b"one"))
    host.admit()
    host.requests.submit(answers.submission("reuse", 1, b"two"))
    host.admit()
    assert answers.got["reuse"] == [Refused(NOT_ACCEPTED)]
    host.complete_writes()
    assert [type(o) for o in answers.got["first"]] == [Replied]
    assert answers.got["reuse"] == [Refused(NOT_ACCEPTED)]  # nothing more


def test_a_later_request_of_the_client_tells_the_waiter_of_the_earlier_its_outcome_is_unknown() -> (
    None
):
    host, answers = _host(), Answers()
    host.requests.submit(answers.submission("one", 1, b"one"))
    host.admit()
    host.requests.submit(answers.submission("two", 2, b"two"))
    host.admit()
    assert answers.got["one"] == [Refused(NOT_COMMITTED)]
    host.complete_writes()
    assert answers.got["one"] == [Refused(NOT_COMMITTED)]  # its reply went to nobody


def test_a_full_pipeline_holds_requests_until_it_has_room() -> None:
    host, answers = _host(pipeline=1), Answers()
    host.requests.submit(answers.submission("a", 1, client_id=5))
    host.requests.submit(answers.submission("b", 1, client_id=6))
    host.admit()
    assert host.replica.op == 1 and host.requests.queued == 1
    assert not host.requests.has_work(host.replica)
    host.complete_writes()  # a commits; b goes in
    host.complete_writes()
    assert [type(o) for o in answers.got["a"] + answers.got["b"]] == [Replied, Replied]


def test_a_backup_hands_requests_on_and_a_request_it_cannot_judge_waits() -> None:
    backup, answers = _host(index=1, count=3), Answers()
    assert admissible(backup.replica)
    backup.requests.submit(answers.submission("a", 1))
    backup.admit()
    assert [s.request for s in backup.forwarded] == [1] and answers.got["a"] == []
    # A view change starts: nothing may go on until it ends.
    backup.step(MessageReceived(StartViewChange(0, 2, 1)))
    assert backup.replica.status is Status.VIEW_CHANGE and not admissible(backup.replica)
    backup.requests.submit(answers.submission("b", 2))
    backup.admit()
    assert backup.requests.queued == 1 and len(backup.forwarded) == 1


def test_a_primary_that_loses_its_role_tells_its_clients_in_flight_59() -> None:
    host, answers = _host(), Answers()
    host.requests.submit(answers.submission("a", 1))
    host.admit()
    host.requests.primary_lost()
    assert answers.got["a"] == [Refused(NOT_COMMITTED)]
    host.complete_writes()
    assert answers.got["a"] == [Refused(NOT_COMMITTED)]  # its reply found no waiter


def test_a_full_disk_refuses_new_messages_and_still_answers_their_retries() -> None:
    host, answers = _host(), Answers()
    send = Operation.SEND_MESSAGES
    host.requests.submit(answers.submission("a", 1, operation=send))
    host.admit()
    host.disk_full = True
    host.taken.clear()
    host.requests.submit(answers.submission("new", 1, client_id=6, operation=send))
    host.requests.submit(answers.submission("retry", 1, operation=send))
    host.admit()
    assert host.taken == [RefusedDiskFull, Propose]
    assert answers.got["new"] == [Refused(IggyErrorCode.CANNOT_APPEND_MESSAGE)]
    host.complete_writes()
    assert [type(o) for o in answers.got["retry"]] == [Replied]


def test_a_request_older_than_the_tables_latest_is_refused_as_aged_out_with_59() -> None:
    host, answers = _host(), Answers()
    host.requests.submit(answers.submission("two", 2, b"two"))
    host.admit()
    host.complete_writes()
    host.requests.submit(answers.submission("old", 1, b"one"))  # below the table's number
    host.admit()
    assert answers.got["old"] == [Refused(IggyErrorCode.REQUEST_ALREADY_APPLIED)]


def test_an_abandoned_submission_is_never_answered_and_refuse_all_answers_the_rest() -> None:
    host, answers = _host(pipeline=1), Answers()
    host.requests.submit(answers.submission("a", 1, client_id=5))
    gone = answers.submission("gone", 1, client_id=6)
    host.requests.submit(gone)
    host.requests.submit(answers.submission("queued", 1, client_id=7))
    host.admit()
    host.requests.abandon(gone)
    host.requests.refuse_all(NOT_ACCEPTED)
    assert answers.got == {
        "a": [Refused(NOT_COMMITTED)],
        "gone": [],
        "queued": [Refused(NOT_ACCEPTED)],
    }
    host.complete_writes()
    assert answers.got["a"] == [Refused(NOT_COMMITTED)]


def test_a_submitter_that_stops_waiting_says_58_before_the_pipeline_and_59_after() -> None:
    answers = Answers()
    submission = answers.submission("a", 1)
    assert timed_out(submission) == Refused(NOT_ACCEPTED)
    submission.admitted = True
    assert timed_out(submission) == Refused(NOT_COMMITTED)


def test_a_request_the_replica_drops_is_refused_with_58() -> None:
    host, answers = _host(), Answers()
    host.requests.submit(answers.submission("first", 1, b"one"))
    host.admit()  # in the pipeline, not yet written
    host.requests.submit(answers.submission("second", 2, b"two"))
    host.admit()  # the replica drops a client's request while another is in flight
    assert answers.got["second"] == [Refused(NOT_ACCEPTED)]
