"""Long polls waiting on a node: which are released, when, and how many may wait.

Purpose: a long poll (``sdk.wire.LONG_POLL_CODE``, ``docs/protocol.md``) that finds no
message waits on the node until its partition group applies the message it asked for, or
its deadline passes, instead of the client polling again at once. This module is the
node's table of those waits: it decides whether one more may wait, and which waits each
event releases. The runtime (``broker.runtime.node``) and the simulator (``sim.node``)
feed it the same events (a group applied ops, the metadata changed, time passed, a
connection has another request or went, the node stops) and resume the released flows.

Invariants:

1. Bounded: at most ``waiting_max`` waits on the node and ``per_connection_max`` per
   connection; one more is refused at once (``Refusal``), never queued.
2. A wait ends exactly once, with the first of: its partition applied the message at
   ``offset`` (``MESSAGES``), its deadline passed (``DEADLINE``), the committed metadata
   changed (``METADATA``: the flow checks its session and route again, and may wait again
   until the same deadline), its connection has another request or went
   (``CONNECTION``), its group is no longer hosted here (``GROUP_GONE``), or the node
   stops (``STOPPING``).
3. Deadlines are absolute in the driver's clock, handed in as data (``now_us``); a wait's
   deadline is at most ``LONG_POLL_WAIT_MS_MAX`` after it was first registered, however
   often it waits again.
4. Released waits come out in registration order (dicts keep insertion order), so a
   driver resumes them in an order that depends on the events alone.
5. Pure: no clock, IO, randomness or task.

Theory of operation: a flow yields ``broker.core.handlers.AwaitMessages``; the driver
calls :meth:`LongPolls.register` with its clock and gets a token (or a refusal, which it
hands back to the flow at once). Each event returns the released waits as
``(token, Woken)``; the driver resumes each token's flow with its ``Woken``. The driver
arms one timer for :meth:`LongPolls.next_deadline_us`.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Final

from sdk.wire import LONG_POLL_WAIT_MS_MAX

LONG_POLLS_WAITING_MAX: Final = 1024
"""Long polls that may wait on one node at once (``limits.long_polls_waiting_max``)."""
LONG_POLLS_PER_CONNECTION_MAX: Final = 1
"""Long polls that may wait for one connection: a connection answers in request order, so
a second one could only wait behind the first."""
LONG_POLL_WAIT_US_MAX: Final = LONG_POLL_WAIT_MS_MAX * 1000


class WakeReason(enum.Enum):
    """Why a wait ended (invariant 2)."""

    MESSAGES = "messages"
    DEADLINE = "deadline"
    METADATA = "metadata"
    CONNECTION = "connection"
    GROUP_GONE = "group gone"
    STOPPING = "stopping"


@dataclass(frozen=True, slots=True)
class Woken:
    """The result of an ``AwaitMessages``: why the wait ended, and its deadline (to wait
    again until the same one)."""

    reason: WakeReason
    deadline_us: int


@dataclass(frozen=True, slots=True)
class Refusal:
    """The result of an ``AwaitMessages`` beyond a bound (invariant 1): the poll is
    answered with ``FEATURE_UNAVAILABLE`` and ``why``."""

    why: str


@dataclass(slots=True)
class _Wait:
    connection: Hashable
    group_id: int
    offset: int
    deadline_us: int


class LongPolls:
    """The node's waiting long polls; see the module docstring.

    Args:
        waiting_max: Waits allowed on the node at once.
        per_connection_max: Waits allowed per connection at once.
    """

    def __init__(
        self,
        waiting_max: int = LONG_POLLS_WAITING_MAX,
        per_connection_max: int = LONG_POLLS_PER_CONNECTION_MAX,
    ) -> None:
        assert waiting_max >= 0 and per_connection_max >= 1
        self.waiting_max = waiting_max
        self.per_connection_max = per_connection_max
        self._waits: dict[int, _Wait] = {}
        self._by_connection: dict[Hashable, int] = {}
        self._next_token = 1
        self.stopping = False
        self.refused = 0
        """Waits refused at a bound, since the node started."""
        self.started = 0
        """Waits registered (a poll that waits again counts again), since the node
        started."""

    def __len__(self) -> int:
        return len(self._waits)

    def register(
        self,
        connection: Hashable,
        group_id: int,
        offset: int,
        *,
        now_us: int,
        wait_us: int,
        deadline_us: int | None = None,
    ) -> int | Refusal:
        """Wait until group ``group_id`` applies the message at ``offset``, for at most
        ``wait_us`` from ``now_us`` (cut to ``LONG_POLL_WAIT_US_MAX``), or until
        ``deadline_us`` when it waits again; a token, or the refusal of a bound."""
        if self.stopping:
            return Refusal("the node is stopping")
        held = self._by_connection.get(connection, 0)
        if held >= self.per_connection_max:
            self.refused += 1
            return Refusal(f"{held} long polls already wait for this connection")
        if len(self._waits) >= self.waiting_max:
            self.refused += 1
            return Refusal(f"{self.waiting_max} long polls already wait on this node")
        if deadline_us is None:
            deadline_us = now_us + min(max(0, wait_us), LONG_POLL_WAIT_US_MAX)
        token = self._next_token
        self._next_token += 1
        self.started += 1
        self._waits[token] = _Wait(connection, group_id, offset, deadline_us)
        self._by_connection[connection] = held + 1
        return token

    def _release(self, tokens: list[int], reason: WakeReason) -> list[tuple[int, Woken]]:
        released = []
        for token in tokens:
            wait = self._waits.pop(token)
            left = self._by_connection[wait.connection] - 1
            if left:
                self._by_connection[wait.connection] = left
            else:
                del self._by_connection[wait.connection]
            released.append((token, Woken(reason, wait.deadline_us)))
        return released

    def applied(self, group_id: int, next_offset: int) -> list[tuple[int, Woken]]:
        """Group ``group_id`` applied ops here and its messages now end before
        ``next_offset``: the waits for an offset below it are released."""
        tokens = [
            token
            for token, wait in self._waits.items()
            if wait.group_id == group_id and wait.offset < next_offset
        ]
        return self._release(tokens, WakeReason.MESSAGES)

    def metadata_changed(self) -> list[tuple[int, Woken]]:
        """The committed metadata changed (a session ended, a consumer group rebalanced,
        a topic went): every wait is released to check its session and route again."""
        return self._release(list(self._waits), WakeReason.METADATA)

    def group_gone(self, group_id: int) -> list[tuple[int, Woken]]:
        """Group ``group_id`` is no longer hosted here."""
        tokens = [token for token, wait in self._waits.items() if wait.group_id == group_id]
        return self._release(tokens, WakeReason.GROUP_GONE)

    def connection_busy(self, connection: Hashable) -> list[tuple[int, Woken]]:
        """``connection`` has another request to answer, or went: its waits end."""
        if connection not in self._by_connection:
            return []
        tokens = [token for token, wait in self._waits.items() if wait.connection == connection]
        return self._release(tokens, WakeReason.CONNECTION)

    def expired(self, now_us: int) -> list[tuple[int, Woken]]:
        """The waits whose deadline is at or before ``now_us``."""
        tokens = [token for token, wait in self._waits.items() if wait.deadline_us <= now_us]
        return self._release(tokens, WakeReason.DEADLINE)

    def cancel(self, token: int) -> list[tuple[int, Woken]]:
        """The driver stopped waiting for ``token`` (its task was cancelled)."""
        if token not in self._waits:
            return []
        return self._release([token], WakeReason.CONNECTION)

    def stop(self) -> list[tuple[int, Woken]]:
        """The node stops: every wait ends and no new one starts."""
        self.stopping = True
        return self._release(list(self._waits), WakeReason.STOPPING)

    def next_deadline_us(self) -> int | None:
        """The earliest deadline of a wait, if any waits."""
        return min((wait.deadline_us for wait in self._waits.values()), default=None)
