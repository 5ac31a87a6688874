"""The node's own client: its identity, its session, its request numbers, its retry rule.

Purpose: a node proposes requests of its own (``broker.core.maintenance`` says when): the
root user, purges, auto-commits, expired tokens, the end of a closed connection's session.
They go through the groups as any client's requests do, so they need what a client has:
a client id, a session in the metadata group's client table, and request numbers that
only grow. How the node registers, numbers a request and reacts to an outcome is decided
here, once, for the runtime (which runs requests of several groups at once) and the
simulator (one at a time).

Invariants:

1. The session is opened by registering as a user that does not exist
   (``SYSTEM_USER_ID``): the register commits and the client table gets an entry, but no
   user session is created, so the system client can never act for a user.
2. Request numbers only grow, across every group: each is above the last and no lower
   than the driver's clock in microseconds, so a new process (a new client id) and a long
   idle one still number above anything a table may hold.
3. A request whose session was lost (evicted from a client table) is tried again once
   after registering again: ``ATTEMPTS_MAX`` attempts in all; any other outcome is final,
   and a register that fails ends the request with 58.
4. Pure: the driver passes the clock and the outcomes and carries out the requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from broker.core.groups import Outcome, Refused, Replied, SessionLost
from broker.core.identity import internal_checksum, register_checksum
from broker.core.sessions import SYSTEM_USER_ID
from broker.state.codec import encode_command
from broker.state.metadata import Register
from sdk.wire import IggyErrorCode

ATTEMPTS_MAX: Final = 2
"""Attempts of one request: the first, and one more after a lost session was registered
again."""

NO_SESSION: Final = Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
"""The outcome of a request whose register failed: nothing was proposed."""


@dataclass(frozen=True, slots=True)
class SystemCall:
    """One request of the system client, ready to submit to a group."""

    client_id: int
    session: int
    request: int
    operation: int
    body: bytes
    checksum: bytes


@dataclass(slots=True)
class SystemClient:
    """The system client's identity and numbering (see the module docstring)."""

    client_id: int
    session: int = 0
    request: int = 0

    def register(self) -> SystemCall:
        """The register that opens the session (request number 0, as every register)."""
        operation, body = encode_command(Register(self.client_id, SYSTEM_USER_ID))
        return SystemCall(
            self.client_id, 0, 0, int(operation), bytes(body), register_checksum(SYSTEM_USER_ID)
        )

    def registered(self, outcome: Outcome) -> bool:
        """Take the register's outcome; whether the session is open now."""
        if isinstance(outcome, Replied):
            self.session = outcome.op
            return True
        return False

    def call(self, operation: int, body: bytes, now_us: int) -> SystemCall:
        """The next request, numbered above every earlier one (invariant 2); the session
        must be open."""
        assert self.session, "register first"
        self.request = max(self.request + 1, now_us)
        return SystemCall(
            self.client_id, self.session, self.request, operation, body, internal_checksum(body)
        )

    def answered(self, outcome: Outcome, attempt: int) -> bool:
        """Take the outcome of attempt ``attempt`` (1-based) of a request: True when it is
        final, False when the session was lost and the request goes again after a new
        register (invariant 3). A lost session is forgotten either way."""
        if not isinstance(outcome, SessionLost):
            return True
        self.session = 0
        return attempt >= ATTEMPTS_MAX
