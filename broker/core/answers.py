"""The frames a node answers a client request with, built from what it decided.

Purpose: one place that turns a decision (a reply, a status, an eviction, a group's
outcome for a submitted request) into the Iggy 0.9 frames of a :class:`Response`, for
the request handling of ``broker.core.handlers`` that both drivers run: the runtime
sends the frames, the simulator reads them back into its clients' replies.

Invariants:

1. An answer echoes its request's header (``sdk.wire.build_reply_frame``): it belongs to
   exactly that request. An eviction names the client and closes the connection.
2. A status answer carries no body; a refusal the client routes by names a group's view
   and that view's primary (``primary_of``, as ``consensus.Replica.primary_index``).
3. ``outcome_answer`` answers a group's outcome: its reply with the op, commit and view
   it committed in (the connection records the op it saw), a refusal, or the eviction of
   a lost session. Nothing here reads a clock or a socket.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from broker.core.connections import ConnectionContext, Response
from broker.core.groups import (
    REQUEST_MISMATCH_STATUS,
    Outcome,
    Refused,
    Replied,
    SessionLost,
)
from consensus import ClientError, Replica
from sdk import wire
from sdk.wire import (
    EvictionReason,
    ProtocolError,
    RequestHeader,
    build_eviction_frame,
    build_reply_frame,
    build_reply_frame_parts,
)


def reply(header: RequestHeader, body: bytes = b"", *, replica: int = 0) -> Response:
    """A successful reply made from this node's state (``replica``: this node)."""
    return Response([build_reply_frame(header, body, replica=replica)])


def reply_parts(
    header: RequestHeader, parts: Sequence[wire.Buffer], *, replica: int = 0
) -> Response:
    """A successful reply whose body is ``parts``, sent without copying them."""
    return Response(build_reply_frame_parts(header, parts, replica=replica))


def status(
    header: RequestHeader,
    code: int,
    *,
    view: int = 0,
    replica: int = 0,
    refusal: str = "",
) -> Response:
    """A status reply; ``refusal`` (the reason) when an operator should see it."""
    frame = build_reply_frame(header, status=int(code), view=view & 0xFFFF_FFFF, replica=replica)
    reason = f"status {int(code)}, {refusal}" if refusal else ""
    return Response([frame], refusal=reason)


def evict(client: int, reason: EvictionReason, detail: str = "") -> Response:
    """An eviction frame ending ``client``'s session; the connection closes after it."""
    why = f" ({detail})" if detail else ""
    return Response(
        [build_eviction_frame(client, reason)],
        close=True,
        refusal=f"evicted with {reason.name}{why}, connection closed",
    )


def protocol_failure(header: RequestHeader, error: ProtocolError) -> Response:
    """A malformed request costs its sender the connection: an eviction when the error
    names a reason, else the error code in a reply, then the connection is closed."""
    if error.eviction is not None:
        return evict(header.client, error.eviction, error.reason)
    return Response(
        [build_reply_frame(header, status=int(error.code))],
        close=True,
        refusal=f"invalid request, status {int(error.code)} ({error.reason}), connection closed",
    )


def primary_of(group_id: int, view: int, replica_count: int) -> int:
    """The replica index of ``group_id``'s primary in ``view``, as
    ``consensus.Replica.primary_index`` computes it."""
    return (view + group_id) % replica_count


def refused(
    header: RequestHeader,
    code: int,
    group_id: int,
    replica: Replica | None,
    replica_count: int,
) -> Response:
    """A status reply naming the current view of the group (its view being started,
    during a view change) and that view's primary, so a client told 58 routes again."""
    view = 0 if replica is None else replica.view
    return status(header, code, view=view, replica=primary_of(group_id, view, replica_count))


def outcome_answer(
    context: ConnectionContext,
    header: RequestHeader,
    outcome: Outcome,
    group_id: int,
    replica: Replica | None,
    replica_count: int,
    checksum: bytes = b"",
) -> Response:
    """The answer to a request ``group_id`` decided (module invariant 3); ``checksum``
    is the request's identity digest, carried for the simulator's clients."""
    if isinstance(outcome, Replied):
        # Every committed write comes this way: one Response, built once (a
        # ``dataclasses.replace`` of it costs as much as the reply frame).
        context.saw(group_id, outcome.op)
        return Response(
            [_replied_frame(header, outcome, group_id, replica_count)],
            group=group_id,
            checksum=checksum,
        )
    return replace(
        _outcome_answer(header, outcome, group_id, replica, replica_count),
        checksum=checksum,
    )


def _replied_frame(
    header: RequestHeader, outcome: Replied, group_id: int, replica_count: int
) -> bytearray:
    # The primary that committed it, which is not this node when a backup forwarded
    # the request: the client sends its next write there.
    return build_reply_frame(
        header,
        outcome.body,
        op=outcome.op,
        commit=outcome.commit,
        view=outcome.view & 0xFFFF_FFFF,
        replica=primary_of(group_id, outcome.view, replica_count),
    )


def _outcome_answer(
    header: RequestHeader,
    outcome: Refused | SessionLost,
    group_id: int,
    replica: Replica | None,
    replica_count: int,
) -> Response:
    if isinstance(outcome, Refused):
        if outcome.status == REQUEST_MISMATCH_STATUS:
            refusal = (
                f"request {header.request} is not applied: its number was already used (by "
                "another request, or by an older one whose reply is no longer kept)"
            )
            return status(header, outcome.status, refusal=refusal)
        return refused(header, outcome.status, group_id, replica, replica_count)
    assert isinstance(outcome, SessionLost)
    reason = (
        EvictionReason.NO_SESSION
        if outcome.error is ClientError.NO_SESSION
        else EvictionReason.SESSION_ERROR
    )
    return evict(header.client, reason)
