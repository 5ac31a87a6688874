"""A node's waiting client requests: each answered once, at its deadline at the latest."""

from __future__ import annotations

import trio
import trio.testing

from broker.core.groups import Outcome, Refused, Replied, Submission
from broker.runtime.group import ReplyWaiter
from broker.runtime.node import WaitingRequests, expire_requests
from sdk.wire import IggyErrorCode
from sdk.wire.codes import Operation

TIMEOUT_S = 10.0


class _Host:
    """A group host that never answers; it records what it was told to forget."""

    def __init__(self) -> None:
        self.abandoned: list[Submission] = []

    def abandon(self, submission: Submission) -> None:
        submission.done = True
        self.abandoned.append(submission)


def _outcome(waiter: ReplyWaiter) -> Outcome | None:
    """Read anew (not narrowed by an earlier check: ``expire`` sets it)."""
    return waiter.outcome


def _submission(waiter: ReplyWaiter, request: int = 1) -> Submission:
    return Submission(7, 1, request, Operation.SEND_MESSAGES, b"", 0, waiter.deliver, bytes(16))


def test_a_request_is_answered_at_its_deadline_not_before() -> None:
    waiting, host = WaitingRequests(TIMEOUT_S), _Host()
    waiter = ReplyWaiter()
    submission = _submission(waiter)
    waiting.add(host, submission, waiter, now=100.0)
    assert waiting.next_check(100.0) == 110.0
    waiting.expire(109.99)
    assert waiter.outcome is None and not host.abandoned
    waiting.expire(110.0)
    assert _outcome(waiter) == Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
    assert host.abandoned == [submission] and len(waiting) == 0


def test_a_late_request_that_entered_a_pipeline_is_told_its_outcome_is_unknown() -> None:
    waiting, host = WaitingRequests(TIMEOUT_S), _Host()
    waiter = ReplyWaiter()
    submission = _submission(waiter)
    submission.admitted = True
    waiting.add(host, submission, waiter, now=0.0)
    waiting.expire(TIMEOUT_S)
    assert _outcome(waiter) == Refused(IggyErrorCode.TRANSIENT_NOT_COMMITTED)


def test_deadlines_fall_in_arrival_order_and_answered_requests_are_not_answered_again() -> None:
    waiting, host = WaitingRequests(TIMEOUT_S), _Host()
    waiters = [ReplyWaiter() for _ in range(3)]
    submissions = [_submission(w, request=i + 1) for i, w in enumerate(waiters)]
    for index, (submission, waiter) in enumerate(zip(submissions, waiters, strict=True)):
        waiting.add(host, submission, waiter, now=float(index))
    replied = Replied(1, 1, 0, b"ok")
    waiters[0].deliver(replied)  # answered, its submitter not yet resumed
    waiting.discard(submissions[1])  # answered and gone
    assert waiting.next_check(5.0) == TIMEOUT_S  # the first entry's, answered or not
    waiting.expire(TIMEOUT_S + 1.5)
    assert waiters[0].outcome == replied, "an outcome is never replaced"
    assert waiters[1].outcome is None and waiters[2].outcome is None
    assert host.abandoned == [] and len(waiting) == 1
    waiting.expire(TIMEOUT_S + 2.0)
    assert _outcome(waiters[2]) == Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
    assert host.abandoned == [submissions[2]]


def test_with_nothing_waiting_the_next_check_is_one_timeout_away() -> None:
    assert WaitingRequests(TIMEOUT_S).next_check(3.0) == 3.0 + TIMEOUT_S


async def _wait(waiting: WaitingRequests, host: _Host, submission: Submission) -> Outcome:
    waiter = ReplyWaiter()
    submission.deliver = waiter.deliver
    waiting.add(host, submission, waiter, trio.current_time())
    try:
        await waiter.event.wait()
    finally:
        waiting.discard(submission)
    assert waiter.outcome is not None
    return waiter.outcome


def test_the_expiry_task_answers_requests_that_arrive_while_it_sleeps() -> None:
    """Requests added at different times, the task asleep on an empty table or on an
    earlier deadline: each is answered at its own deadline."""
    outcomes: list[tuple[float, Outcome]] = []

    async def main() -> None:
        waiting, host = WaitingRequests(TIMEOUT_S), _Host()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(expire_requests, waiting)

            async def request(at: float) -> None:
                await trio.sleep_until(at)
                outcome = await _wait(waiting, host, _submission(ReplyWaiter()))
                outcomes.append((trio.current_time(), outcome))

            async with trio.open_nursery() as requests:
                for at in (3.0, 4.5, 27.0):
                    requests.start_soon(request, at)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    refused = Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
    assert outcomes == [(13.0, refused), (14.5, refused), (37.0, refused)]
