"""Failed logins: how long a client address waits before its next password check.

Purpose: a password check is an scrypt verification, tens of milliseconds of CPU. A flood
of wrong passwords must neither take the CPU from every other client nor be a guessing
oracle at the speed of the hardware. Two bounds, both in the node:

1. At most ``PASSWORD_CHECKS_CONCURRENT`` (2) password checks or hashes run at once
   (one ``trio.CapacityLimiter`` for login, user creation and password change), so
   however many connections flood, they hold two worker threads at most, and one
   address one of them (3).
2. After ``FREE_FAILURES`` failed logins from one host (an unknown user counts), each
   further login from it first waits ``BASE_DELAY_S``, doubling with each failure, up to
   ``MAX_DELAY_S``. A success from the host clears its count; a count is forgotten
   ``FORGET_AFTER_S`` after its host's last failure. At most ``HOSTS_MAX`` hosts are
   remembered, the least recently failed forgotten first, so memory is bounded.

3. One login of a host at a time waits out that host's delay and checks its password
   (``HostTurns``), before it joins the node-wide queue. However many connections one
   address opens, it holds one place in that queue, so while one address floods, a
   login from another address finds the second check free and waits for none of the
   flood's checks (for at most one when another address holds that one).
   At most ``HOST_LOGINS_WAITING_MAX`` logins of a failing host (one with a delay) wait
   for its turn; more are refused at once as transient (58), without a check.

The delay rule (2) is ``broker.core.logins.LoginThrottle``, pure, on the caller's clock
(``trio.current_time()`` here); this module holds the bounds that need trio (1, 3).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import trio

PASSWORD_CHECKS_CONCURRENT: Final = 2
"""Password checks at once, node-wide: one more than a single address may hold, so one
address's flood never makes another address's login wait (invariant 3)."""
HOST_LOGINS_WAITING_MAX: Final = 2
"""Logins of a *failing* host (one that waits a delay) that may wait for its turn; one
more is refused at once (58), so a flood's abandoned attempts never pile up in front of
the host's next real login. A host without recent failures queues its logins (many
clients of one machine log in at once), bounded by the connections it may hold."""


class TurnsBusy(Exception):
    """``HOST_LOGINS_WAITING_MAX`` logins of the host already wait for its turn."""


class HostTurns:
    """One turn at a time per client host (invariant 3), at most
    ``HOST_LOGINS_WAITING_MAX`` waiting; a host's lock is forgotten once nobody holds or
    awaits it, so memory follows the hosts logging in right now."""

    def __init__(self) -> None:
        self._locks: dict[str, trio.Lock] = {}

    @asynccontextmanager
    async def turn(self, host: str, *, waiting_max: int | None) -> AsyncIterator[None]:
        """Hold ``host``'s turn; with ``waiting_max``, refuse to wait behind that many.

        Raises:
            TurnsBusy: ``waiting_max`` logins of the host wait already.
        """
        lock = self._locks.get(host)
        if (
            waiting_max is not None
            and lock is not None
            and lock.statistics().tasks_waiting >= waiting_max
        ):
            raise TurnsBusy(host)
        if lock is None:
            lock = self._locks[host] = trio.Lock()
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._locks.pop(host, None)

    def __len__(self) -> int:
        return len(self._locks)
