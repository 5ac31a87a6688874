"""Events a replica consumes and actions it returns: the whole sans-IO surface of a replica.

Events are facts, named in the past tense; actions are orders for the host, named as
imperative nouns. The host feeds one event to ``Replica.step`` and executes the returned
actions in order (see :mod:`consensus.protocols` for the ordering contract).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from consensus.messages import Message, Prepare
from consensus.protocols import DurableState, RequestBody

# Events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """A decoded message from another replica of this group arrived."""

    message: Message


@dataclass(frozen=True, slots=True)
class Ticked:
    """Ticks of time passed (10 ms each in production); all timeouts are counted in ticks.

    ``count`` ticks at once are the same as ``count`` single ticks in a row with nothing
    between them, and the host may pass more than one only while none but the last can
    fire a timeout that has something to do: ``count <= Replica.ticks_until_due()``. So a
    host need not step an idle replica on every tick, only when a timeout is due or
    another event arrives (ticks owed are stepped first).
    """

    count: int = 1


@dataclass(frozen=True, slots=True)
class ClientRequested:
    """A client request for this group reached this replica.

    ``timestamp_us`` is the host's wall clock, as data: the primary stamps it (made
    monotonic) into the prepare so the state machine never reads a clock.

    ``request_checksum`` is the request's identity digest (16 bytes), computed by the host
    that received it from the client and carried unchanged when it is forwarded: with
    ``operation`` it tells a retry of a request (the same digest) from another request
    that reuses its number. The replica only compares digests; the host defines them.
    """

    client_id: int
    session: int
    request: int
    operation: int
    body: RequestBody
    timestamp_us: int
    request_checksum: bytes


@dataclass(frozen=True, slots=True)
class PrepareWritten:
    """Every append up to ``op`` (whose prepare has ``checksum``) is written to the journal."""

    op: int
    checksum: bytes


@dataclass(frozen=True, slots=True)
class PrepareSynced:
    """A journal sync covering ``op`` (whose prepare has ``checksum``) completed."""

    op: int
    checksum: bytes


Event = MessageReceived | Ticked | ClientRequested | PrepareWritten | PrepareSynced


# Actions -----------------------------------------------------------------------------------


class ClientError(enum.Enum):
    """Why a request got an error reply instead of a state-machine reply."""

    #: The client has no session in this group: it must register (log in) first.
    NO_SESSION = "no_session"
    #: The client's session was evicted from the client table or superseded by a newer
    #: register; the request may or may not have been applied, and the client must
    #: register again. Never answered with someone else's reply.
    SESSION_EVICTED = "session_evicted"
    #: The metadata group committed another request (another operation or digest) under
    #: this request number: the request is refused, nothing was applied, and the cached
    #: reply is never sent for it.
    REQUEST_MISMATCH = "request_mismatch"
    #: The request is older than the client's latest committed request: it is not
    #: applied (again), and the client table keeps only the latest reply, so this one's
    #: is no longer available (Iggy's "reply aged out", RequestAlreadyApplied).
    ALREADY_APPLIED = "already_applied"


@dataclass(frozen=True, slots=True)
class SendToReplica:
    """Send ``message`` to replica ``replica`` of this group (best effort, may be lost)."""

    replica: int
    message: Message


@dataclass(frozen=True, slots=True)
class ReplyToClient:
    """Answer a client request: the committed reply of op ``op``, or ``error``.

    ``status`` is non-zero when the state machine rejected the request before it entered
    the log (``RequestRejected``); then ``op`` is 0 and ``reply`` empty.

    The reply names the request it belongs to by its whole identity (``request``,
    ``operation``, ``request_checksum``), so a host never hands it to another request
    that reuses the number.
    """

    client_id: int
    session: int
    request: int
    operation: int
    request_checksum: bytes
    op: int
    reply: bytes
    error: ClientError | None = None
    status: int = 0


@dataclass(frozen=True, slots=True)
class AppendToJournal:
    """Append ``prepare`` after the journal's current last op (its op is that plus one)."""

    prepare: Prepare


@dataclass(frozen=True, slots=True)
class SyncJournal:
    """Make every append so far durable, then report ``PrepareSynced(op, checksum)``."""

    op: int
    checksum: bytes


@dataclass(frozen=True, slots=True)
class TruncateJournal:
    """Discard every op above ``after_op`` (they were never committed)."""

    after_op: int


@dataclass(frozen=True, slots=True)
class WriteSuperblock:
    """Persist ``state``; durable before any later action of the same step runs."""

    state: DurableState


@dataclass(frozen=True, slots=True)
class WriteCheckpoint:
    """Persist ``snapshot`` as the state after op ``op``; the journal continues at op + 1.

    Ops up to ``op`` may be discarded from the journal. If the journal's last op is not
    ``op`` (state transfer jumped over a gap, or the journal holds ops above it), the host
    resets it so that the next append is ``op + 1``. A ``WriteSuperblock`` naming the new
    checkpoint follows in the same step.

    ``journal_restart_op`` (a state transfer where the log is the data): empty the
    journal whatever it holds, so that its next op is ``journal_restart_op`` (at most
    ``op + 1``); the replica then appends the committed ops from there up to ``op`` with
    ``RepairJournal`` before anything else. 0: keep the journal as above.
    """

    op: int
    snapshot: bytes
    journal_restart_op: int = 0


@dataclass(frozen=True, slots=True)
class RepairJournal:
    """Make the committed record of ``prepare.op`` durable again, before the next action:
    rewrite it in place if recovery found it damaged (``Log.faulty_ops``), else append it
    at the head (recovery cut the journal below the checkpoint; ops come in ascending
    order, so it is always the head's next op). The prepare is proven the committed one
    (vouched by a replica of the same view, or matched against the parent checksum of the
    intact record above it)."""

    prepare: Prepare


Action = (
    SendToReplica
    | ReplyToClient
    | AppendToJournal
    | SyncJournal
    | TruncateJournal
    | WriteSuperblock
    | WriteCheckpoint
    | RepairJournal
)
