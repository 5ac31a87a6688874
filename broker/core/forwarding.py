"""Requests a backup hands to its group's primary on another node, each answered once.

Purpose: a client may send a write to any node; a node whose replica of the group is a
backup hands the request (``broker.core.groups.Forward``) to the node of the group's
primary, which submits it as its own and sends the outcome back. Whom to hand it to, and
what the client is told when the answer cannot come, are decisions a test must replay;
the transport (the runtime's replica bus, the simulator's network) only carries the two
messages.

Invariants:

1. A request is forwarded only to the primary of a view in normal status, never to this
   node, and never again once it was forwarded to this node (no loops): a request that
   cannot be forwarded is refused with 58 by its group's host, and the client routes again.
2. A forwarded request is answered exactly once, on the node the client sent it to: by
   the primary's outcome, or with 59 (``TRANSIENT_NOT_COMMITTED``, its fate is unknown)
   when the link to the primary's node is lost first. An outcome for a token nobody waits
   for (a duplicate, or one whose client stopped waiting) is dropped.
3. Pure: tokens count up from 1 per node; nothing here reads a clock or does IO.

Theory of operation: when its group host is told ``Forward``, the node asks
:func:`forward_target` for the peer, sends the request under ``Forwards.next_token``,
records it with ``Forwards.sent`` once the transport took it, and calls
``Forwards.answered`` when the outcome comes back, ``Forwards.peer_lost`` when the link
drops. The primary's node submits the request with ``forwarded=True`` and a delivery that
sends the outcome back under the same token.
"""

from __future__ import annotations

from broker.core.groups import Outcome, Refused, Submission
from consensus.replica import Replica, Status
from sdk.wire import IggyErrorCode


def forward_target(replica: Replica | None, submission: Submission) -> int | None:
    """The replica index of the node to hand ``submission`` to (invariant 1), or None
    when it may not be forwarded."""
    if replica is None or replica.status is not Status.NORMAL or submission.forwarded:
        return None
    primary = replica.primary
    return None if primary == replica.replica else primary


class Forwards:
    """This node's forwarded requests that wait for their outcome (invariant 2)."""

    __slots__ = ("_token", "_waiting")

    def __init__(self) -> None:
        self._token = 0
        self._waiting: dict[int, tuple[int, Submission]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def next_token(self) -> int:
        """The token the next forwarded request is sent under."""
        return self._token + 1

    def sent(self, token: int, peer: int, submission: Submission) -> None:
        """``submission`` went to ``peer`` under ``token`` (:meth:`next_token`). From here
        its fate is out of this node's hands: a client that stops waiting is told 59."""
        assert token == self._token + 1, "tokens are used in order, once"
        self._token = token
        self._waiting[token] = (peer, submission)
        submission.admitted = True

    def answered(self, peer: int, token: int, outcome: Outcome) -> None:
        """``peer`` sent the outcome of ``token``."""
        waiting = self._waiting.get(token)
        if waiting is None or waiting[0] != peer:
            return
        del self._waiting[token]
        waiting[1].answer(outcome)

    def peer_lost(self, peer: int) -> None:
        """The link to ``peer`` dropped: what was forwarded there may or may not commit."""
        lost = [token for token, (to, _) in self._waiting.items() if to == peer]
        for token in lost:
            _, submission = self._waiting.pop(token)
            submission.answer(Refused(IggyErrorCode.TRANSIENT_NOT_COMMITTED))

    def forget_answered(self) -> None:
        """Drop the entries whose client was answered otherwise (it stopped waiting)."""
        done = [token for token, (_, submission) in self._waiting.items() if submission.done]
        for token in done:
            del self._waiting[token]
