"""A hosted group's client requests: queued, admitted to its replica, answered once.

Purpose: a node hands each client request for a group to the host of that group's replica
(``broker.runtime.group`` on real files, ``sim.node`` in the simulator). What happens to it
there is a decision a test must be able to replay: whether it waits, goes to the replica,
is forwarded to the primary's node, is refused, and which reply of the replica answers it.
:class:`GroupRequests` holds those decisions as pure bookkeeping; the host only steps the
replica with the events it is given and reports what the replica did.

Invariants:

1. Every :class:`Submission` is answered at most once (``Submission.answer``), and only
   with an outcome of its own request: a reply goes to the waiter whose identity (number,
   operation and identity digest, ``broker.core.identity``) is the reply's; a reply nobody
   with that identity waits for is dropped, never handed to another request that reuses
   the number.
2. A queued request goes to the replica only when the replica judges requests and has room
   in its pipeline (``Replica.judges_requests``, ``Replica.pipeline_has_room``): it is
   never dropped for being early. A backup in normal status hands it on at once (forward,
   or refuse with 58 where there is nobody to forward to).
3. At most one waiter per client id: a retry of the request in flight takes its
   predecessor's place (the same reply answers it); another request under the number in
   flight is refused with 58 and never gets that reply; a later request supersedes the
   waiter of an earlier one, which is told 59 (outcome unknown).
4. A primary that loses its role tells every client with a prepare in flight 59: whether
   it commits is decided elsewhere now.
5. While its disk is full, a partition group's primary refuses new messages with Iggy's
   "cannot append" error, and still answers retries of prepared or committed requests.
6. Pure: no clock, task or IO; the host calls in the order events happen.

Theory of operation: ``submit`` queues; the host, whenever it may admit (after each pass
of its loop, or each step in the simulator), calls ``take`` until it returns None, and
carries out what it says: a :class:`Forward` to the primary's node, or a :class:`Propose`
whose event it steps into the replica, then ``settle``. The step's actions are carried out
by ``broker.core.execution``, which reports each prepare the host appended (``prepared``)
and each ``ReplyToClient`` (``replied``); after each step the host says whether the
replica is still the primary (``primary_lost``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from consensus.events import ClientError, ClientRequested, ReplyToClient
from consensus.messages import PrepareHeader
from consensus.protocols import RequestBody
from consensus.replica import Replica, Status
from sdk.wire import IggyErrorCode
from sdk.wire.codes import Operation

REQUEST_TIMEOUT_US: Final = 10_000_000
"""How long a node waits for a group to answer a client request before it tells the
client 58 or 59 (``timed_out``) and stops waiting."""


@dataclass(frozen=True, slots=True)
class Replied:
    """The committed reply of a request."""

    op: int
    commit: int
    view: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Refused:
    """An Iggy error code decided before commit (nothing was applied), or 59 when the
    outcome is unknown (``TRANSIENT_NOT_COMMITTED``)."""

    status: int


@dataclass(frozen=True, slots=True)
class SessionLost:
    """The group's client table does not know the session (log in again)."""

    error: ClientError


Outcome = Replied | Refused | SessionLost

#: A request's number, operation and identity digest: a retry has all three of the
#: request it repeats (``consensus.client_table``, invariant 6).
RequestIdentity = tuple[int, int, bytes]

REQUEST_MISMATCH_STATUS: Final = IggyErrorCode.REQUEST_ALREADY_APPLIED
"""The status of a request whose number was used: by another committed request (metadata
group), or by this one or an older one below the client's latest committed request, whose
reply is no longer kept (Iggy's "reply aged out"). The request is not applied (again), and
no other request's reply is sent for it."""


@dataclass(slots=True, eq=False)
class Submission:
    """One client request on its way to a group, answered once through ``deliver``."""

    client_id: int
    session: int
    request: int
    operation: int
    #: Parts when admission hands over pieces it holds (a send: the batch, a view of the
    #: client's frame, and its checksums); a forward sends them gathered.
    body: RequestBody
    timestamp_us: int
    deliver: Callable[[Outcome], None]
    #: The request's identity digest (``consensus.ClientRequested``), computed where the
    #: client's frame arrived and forwarded with it.
    request_checksum: bytes
    #: Set when its prepare entered the pipeline: the outcome may be unknown from then on.
    admitted: bool = False
    done: bool = False
    #: It came from another node's bus: never forward it again (no forwarding loops).
    forwarded: bool = False

    @property
    def identity(self) -> RequestIdentity:
        """What tells this request from another under the same number."""
        return (self.request, self.operation, self.request_checksum)

    def answer(self, outcome: Outcome) -> None:
        if not self.done:
            self.done = True
            self.deliver(outcome)

    def event(self) -> ClientRequested:
        """The event that hands this request to a replica."""
        return ClientRequested(
            self.client_id,
            self.session,
            self.request,
            self.operation,
            self.body,
            self.timestamp_us,
            self.request_checksum,
        )


def timed_out(submission: Submission) -> Refused:
    """What a submitter that stopped waiting tells its client: 59 (outcome unknown) once
    the request entered a pipeline, 58 (not taken, send again) before."""
    if submission.admitted:
        return Refused(IggyErrorCode.TRANSIENT_NOT_COMMITTED)
    return Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)


def admissible(replica: Replica | None) -> bool:
    """Whether a queued request can go on now (invariant 2): handed on by a backup in
    normal status, or judged by a primary with room in its pipeline."""
    if replica is None or replica.status is not Status.NORMAL:
        return False
    if not replica.is_primary:
        return True
    return replica.judges_requests and replica.pipeline_has_room


@dataclass(frozen=True, slots=True)
class Forward:
    """Hand ``submission`` to the primary's node; refuse it with 58 if that cannot be."""

    submission: Submission


@dataclass(frozen=True, slots=True)
class Propose:
    """Step ``submission.event()`` into the replica, then call ``settle(submission)``."""

    submission: Submission


@dataclass(frozen=True, slots=True)
class RefusedDiskFull:
    """``submission`` was refused for want of disk (invariant 5); already answered."""

    submission: Submission


Admission = Forward | Propose | RefusedDiskFull


class GroupRequests:
    """The client requests of one hosted group; see the module docstring."""

    def __init__(self) -> None:
        self._queue: deque[Submission] = deque()
        self._waiters: dict[int, Submission] = {}
        # client id -> identity of its request prepared here and not yet replied to
        self._in_flight: dict[int, RequestIdentity] = {}

    # -- the queue ----------------------------------------------------------------------------

    def submit(self, submission: Submission) -> None:
        """Queue ``submission`` until the replica may take it."""
        self._queue.append(submission)

    def abandon(self, submission: Submission) -> None:
        """Its submitter stopped waiting: forget it (it gets no answer from here)."""
        submission.done = True
        if self._waiters.get(submission.client_id) is submission:
            del self._waiters[submission.client_id]

    @property
    def queued(self) -> int:
        """Submissions waiting for the replica (abandoned ones included until taken)."""
        return len(self._queue)

    def has_work(self, replica: Replica | None) -> bool:
        """Whether ``take`` would hand something out now."""
        return bool(self._queue) and admissible(replica)

    def take(self, replica: Replica, *, disk_full: bool) -> Admission | None:
        """The next queued request and what to do with it, or None when none may go on.

        Refusals decided here are answered here; a :class:`RefusedDiskFull` is returned
        so the host can count it.
        """
        while self._queue and admissible(replica):
            submission = self._queue.popleft()
            if submission.done:
                continue
            if not replica.is_primary:
                return Forward(submission)
            if disk_full and self._new_messages(replica, submission):
                submission.answer(Refused(IggyErrorCode.CANNOT_APPEND_MESSAGE))
                return RefusedDiskFull(submission)
            if not self._install(submission):
                continue
            return Propose(submission)
        return None

    def settle(self, submission: Submission) -> None:
        """After stepping a :class:`Propose`'s event: a request the replica neither
        prepared, absorbed nor answered was dropped (an old request number, or another
        request of the client in flight), and nothing was applied: refuse it with 58."""
        if submission.done or submission.admitted:
            return
        if self._in_flight.get(submission.client_id) == submission.identity:
            return  # absorbed by its own earlier copy in the pipeline
        if self._waiters.get(submission.client_id) is submission:
            del self._waiters[submission.client_id]
        submission.answer(Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))

    def refuse_all(self, status: int) -> None:
        """The group stops (or fails): queued requests get ``status``; requests in the
        pipeline get 59, their outcome unknown."""
        for submission in self._queue:
            submission.answer(Refused(status))
        self._queue.clear()
        for waiter in self._waiters.values():
            waiter.answer(Refused(IggyErrorCode.TRANSIENT_NOT_COMMITTED))
        self._waiters.clear()
        self._in_flight.clear()

    # -- what the replica did -----------------------------------------------------------------

    def prepared(self, header: PrepareHeader, *, primary: bool) -> None:
        """The replica appended a prepare (as primary: one it proposed)."""
        if not primary or header.client_id == 0:
            return
        identity = (header.request, header.operation, header.request_checksum)
        self._in_flight[header.client_id] = identity
        waiter = self._waiters.get(header.client_id)
        if waiter is not None and waiter.identity == identity:
            waiter.admitted = True

    def replied(self, action: ReplyToClient, *, commit: int, view: int) -> None:
        """The replica answered a request: give the answer to its waiter, if any
        (invariant 1); ``commit`` and ``view`` are the replica's now."""
        identity = (action.request, action.operation, action.request_checksum)
        if self._in_flight.get(action.client_id) == identity:
            del self._in_flight[action.client_id]
        waiter = self._waiters.get(action.client_id)
        if waiter is None or waiter.identity != identity:
            # Nobody waits for this request: a retry answered earlier, its submitter gave
            # up, or another request that reuses its number waits (never given this reply).
            return
        del self._waiters[action.client_id]
        if action.error in (ClientError.REQUEST_MISMATCH, ClientError.ALREADY_APPLIED):
            waiter.answer(Refused(REQUEST_MISMATCH_STATUS))
        elif action.error is not None:
            waiter.answer(SessionLost(action.error))
        elif action.status != 0:
            waiter.answer(Refused(action.status))
        else:
            waiter.answer(Replied(action.op, commit, view, action.reply))

    def primary_lost(self) -> None:
        """The replica is no longer a primary in normal status (invariant 4)."""
        if not self._in_flight:
            return
        for client_id in list(self._in_flight):
            waiter = self._waiters.pop(client_id, None)
            if waiter is not None:
                waiter.answer(Refused(IggyErrorCode.TRANSIENT_NOT_COMMITTED))
        self._in_flight.clear()

    # -- internals ----------------------------------------------------------------------------

    @staticmethod
    def _new_messages(replica: Replica, submission: Submission) -> bool:
        """Whether ``submission`` would append new messages (invariant 5)."""
        return submission.operation == Operation.SEND_MESSAGES and replica.would_prepare(
            submission.client_id,
            submission.session,
            submission.request,
            submission.operation,
            submission.request_checksum,
        )

    def _install(self, submission: Submission) -> bool:
        """Make ``submission`` its client's waiter (invariant 3); False if it was refused."""
        previous = self._waiters.get(submission.client_id)
        if previous is not None and previous is not submission:
            # A waiter's request is in the pipeline (it is installed just before its
            # step, and removed unless the step admitted or absorbed it).
            if previous.identity == submission.identity:
                previous.done = True  # a retry of the request in flight takes its place
            elif previous.request == submission.request:
                # Another request under the number of the one in flight: it never gets
                # that one's reply; it may come back once that one committed.
                submission.answer(Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
                return False
            else:
                previous.answer(Refused(IggyErrorCode.TRANSIENT_NOT_COMMITTED))
        self._waiters[submission.client_id] = submission
        return True
