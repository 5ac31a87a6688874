"""What a node keeps about one client connection, and what it answers one request with.

Purpose: the shapes shared by the node's decisions and the transports that carry them
(``broker.runtime.connection`` for TCP and TLS): a transport builds a
:class:`ConnectionContext` per connection, hands the node each frame with it, and writes
the :class:`Response` it gets back. Neither knows of sockets or tasks.

Invariants:

1. A connection acts only in the sessions its context names: the one it registered, the
   one it is bound to by its latest login, and the one it attached (clusters).
2. A response belongs to exactly one request; ``close`` asks the transport to close the
   connection once the response is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.core.refusals import RefusalLimiter
from sdk import wire


@dataclass(slots=True)
class ConnectionContext:
    """What the node remembers about one client connection."""

    address: str
    client_id: int = 0
    #: The session this connection registered (its login opened it), ended when it
    #: closes; connections that joined the same session leave it alone when they close.
    registered_session: int = 0
    #: The session this connection may act in: the one its latest login opened or joined
    #: (a repeated register of a live session of the same user and client id). A request
    #: under any other session is refused with 40, whoever's it is.
    bound_session: int = 0
    #: The session this connection acts for in partition requests, once the client
    #: attached it (ATTACH_CONSUMER_SESSION): the session it holds on its coordinator
    #: node, whose consumer-group memberships its polls and offset writes use.
    attached_session: int = 0
    #: The highest op of each group this connection was answered with.
    seen: dict[int, int] = field(default_factory=dict)
    #: This connection's budget of refusal log lines.
    refusals: RefusalLimiter = field(default_factory=RefusalLimiter)

    def saw(self, group: int, op: int) -> None:
        """This connection was answered with committed ``op`` of ``group``: from now on it
        reads only state that holds it (read-your-writes, ``broker.core.reads``)."""
        self.seen[group] = max(self.seen.get(group, 0), op)

    def must_see(self, group: int) -> int:
        """The op of ``group`` a read on this connection must find applied."""
        return self.seen.get(group, 0)


@dataclass(frozen=True, slots=True)
class Response:
    """The frame(s) answering one request, and whether to close the connection after.

    ``refusal`` says why, when the answer refuses the request for a reason an operator
    should see (``broker.core.refusals``): it is logged once, rate-limited per connection.
    The rest say what the frames do not, for whoever checks the answer (the simulator's
    checkers): the group whose state or log answered (-1: none), the op that group had
    applied when a read was served, the partition's first offset a poll saw, and the
    identity digest of the request answered (``broker.core.identity``; empty when the
    node answered before it computed one).
    """

    parts: list[wire.Buffer]
    close: bool = False
    refusal: str = ""
    group: int = -1
    read_op: int = 0
    first_offset: int = 0
    checksum: bytes = b""
