"""The client table: per client id, its session, its latest request and its register.

Purpose: make client retries idempotent. The table is part of the replicated state: every
replica derives it identically from committed ops, it is encoded into snapshots, and it is
never touched by an op that has only been prepared.

Invariants:

1. Only committed ops enter the table (``commit`` is called from the apply path alone).
   VSR Revisited §4.1 records a request at prepare time; if a view change then drops that
   prepare, every retry looks like a duplicate and the client is locked out. In-flight
   requests are deduplicated against the primary's pipeline instead.
2. At most ``clients_max`` entries. Eviction is deterministic: the entry whose latest
   commit is oldest goes (ties by client id, which cannot happen as ops are unique), and
   ``session_evicted_max`` remembers the highest session ever evicted.
3. A client whose session is evicted or superseded gets ``SESSION_EVICTED``, never a reply
   computed for another request.
4. Request numbers belong to the client id, not to one of its sessions. A client numbers
   its requests upwards across all its sessions (a retry re-uses the number), and a
   request at or below the highest number the client committed (``request_max``) is
   never judged new while the client's entry is held: a request retried after the client
   registered again is still answered from the table.
5. An entry caches two replies: that of the client's latest committed request
   (``request_number``, ``request_op``) and, in the metadata group, that of the register
   which opened its current session (``register_request``; its op is ``session``). A
   duplicate is answered with the one it repeats (``cached_reply``), never the other.

Sessions: a session is the commit op of the client's register in the metadata group, so
sessions only grow. The metadata group (``registers_sessions``) creates entries by
committing a register. A partition group cannot see registers; a request carries its
session, and the group trusts the host to have checked it against the metadata state at
admission. An unknown client whose session is above ``session_evicted_max`` is new there;
at or below it, it may be a client whose entry was evicted, so its request may already be
applied and it is told to register again.

The verdicts (the primary judges against committed state, after the pipeline absorbed
requests already in flight):

* A register (metadata group only; the Iggy wire sends request 0 on every Register).
  From an unknown client: NEW. With the request number of the register that opened the
  client's current session: a retry of it, or a second login of a client id that holds
  that session. While the session lives (``session_live``) it is DUPLICATE and gets the
  original session back; once it has ended (logout, closed connection, eviction, its user
  removed), or if the register opened none, it is NEW: a register that left no live
  session has no effect to protect, so running it again applies nothing twice, and the
  client id gets a new session. Request 0 or a number above ``request_max`` is NEW too (a
  new login, which ends the client's previous session); any other number is STALE.
* Any other request. From an unknown client: SESSION_EVICTED at or below
  ``session_evicted_max``, else NO_SESSION in the metadata group (or with session 0) and
  NEW in a partition group. From a session below the entry's: SESSION_EVICTED. From one
  above it: NO_SESSION in the metadata group, which assigns sessions itself; in a partition
  group the client registered again, and the request is judged by its number like any
  other. By number: above ``request_max`` NEW, equal to the latest committed request
  DUPLICATE, otherwise STALE (dropped: a lock-step client never retries an older one).

Bound: deduplication across sessions holds while the client's entry is held. An evicted
entry forgets the client's numbers: its old sessions are refused, but a request re-sent
under a session registered after the eviction is new. A client therefore never re-sends a
write whose outcome is unknown under a new session.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from consensus.messages import MessageError, Prepare

_TABLE_HEADER: Final = struct.Struct("<4sIQ")  # magic, count, session_evicted_max
_ENTRY: Final = struct.Struct(
    "<16s"  # client_id
    "Q"  # session
    "Q"  # request_number: the latest committed request other than a register
    "Q"  # request_op: its op (0: none yet)
    "Q"  # register_request: request number of the register that opened the session
    "B"  # flags: _REGISTERED when the register's reply is cached
    "I"  # size of the request's reply
    "I"  # size of the register's reply
)
_MAGIC: Final = b"VCT2"
_REGISTERED: Final = 0x01
assert _TABLE_HEADER.size == 16
assert _ENTRY.size == 57

#: Whether the application still holds ``session`` for ``client_id``; see ``ClientTable``.
SessionLive = Callable[[int, int], bool]


class Verdict(enum.Enum):
    """What the primary does with a request, judged against committed state only."""

    NEW = "new"  # prepare it
    DUPLICATE = "duplicate"  # resend the cached reply
    STALE = "stale"  # an older request: drop silently
    NO_SESSION = "no_session"  # error reply: register first
    SESSION_EVICTED = "session_evicted"  # error reply: register again


@dataclass(slots=True)
class ClientEntry:
    """One client's entry: two slots (its latest request, the register that opened its
    session), and a view of its latest commit of either kind (``request``, ``op``,
    ``reply``)."""

    client_id: int
    #: The client's current session (in the metadata group the op of its register).
    session: int
    #: The client's latest committed request other than a register: its number, op and
    #: reply (``request_op`` 0: none yet).
    request_number: int = 0
    request_op: int = 0
    request_reply: bytes = b""
    #: The register that opened ``session`` (metadata group): its request number and
    #: reply; its op is ``session``. ``register_reply`` is None when none is cached.
    register_request: int = 0
    register_reply: bytes | None = None

    @property
    def registered_last(self) -> bool:
        """Whether the client's latest commit is the register that opened its session."""
        return self.register_reply is not None and self.session > self.request_op

    @property
    def request(self) -> int:
        """The request number of the client's latest commit."""
        return self.register_request if self.registered_last else self.request_number

    @property
    def op(self) -> int:
        """The op of the client's latest commit (the eviction order)."""
        return self.session if self.registered_last else self.request_op

    @property
    def reply(self) -> bytes:
        """The reply of the client's latest commit."""
        if self.register_reply is not None and self.registered_last:
            return self.register_reply
        return self.request_reply

    @reply.setter
    def reply(self, reply: bytes) -> None:
        if self.registered_last:
            self.register_reply = reply
        else:
            self.request_reply = reply

    @property
    def request_max(self) -> int:
        """The highest request number the client committed (invariant 4)."""
        if self.register_reply is None:
            return self.request_number
        return max(self.request_number, self.register_request)


@dataclass(frozen=True, slots=True)
class CachedReply:
    """What a duplicate is answered with: the committed reply of op ``op``."""

    session: int
    request: int
    op: int
    reply: bytes


class ClientTable:
    """Committed requests and replies per client id; see the module docstring.

    Args:
        clients_max: The most entries held (``CLIENTS_MAX``).
        registers_sessions: True for the metadata group, whose committed registers open
            sessions; False for a partition group.
        session_live: Whether the state machine still holds a session for a client id
            (metadata group only). Consulted on the primary when a register repeats the
            one that opened the client's current session; None counts every session as
            live until a register of the same client supersedes it or its entry is
            evicted.
    """

    def __init__(
        self,
        clients_max: int,
        *,
        registers_sessions: bool,
        session_live: SessionLive | None = None,
    ) -> None:
        assert clients_max >= 1
        assert session_live is None or registers_sessions
        self.clients_max = clients_max
        self.registers_sessions = registers_sessions
        self.session_live = session_live
        self.entries: dict[int, ClientEntry] = {}
        self.session_evicted_max = 0

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, client_id: int) -> ClientEntry | None:
        return self.entries.get(client_id)

    def judge(self, client_id: int, session: int, request: int, *, register: bool) -> Verdict:
        """Classify a request against committed state (in-flight ones are checked first)."""
        entry = self.entries.get(client_id)
        if register:
            assert self.registers_sessions
            return self._judge_register(entry, client_id, request)
        if entry is None:
            if session != 0 and session <= self.session_evicted_max:
                return Verdict.SESSION_EVICTED
            if self.registers_sessions or session == 0:
                return Verdict.NO_SESSION
            return Verdict.NEW
        if session < entry.session:
            return Verdict.SESSION_EVICTED
        if session > entry.session and self.registers_sessions:
            # The metadata group assigns sessions itself: a higher one is a client bug.
            return Verdict.NO_SESSION
        # A partition group judges a higher session (the client registered again) by the
        # request number like any other: numbers keep growing across sessions.
        if request > entry.request_max:
            return Verdict.NEW
        if request == entry.request_number and entry.request_op != 0:
            return Verdict.DUPLICATE
        return Verdict.STALE

    def _judge_register(self, entry: ClientEntry | None, client_id: int, request: int) -> Verdict:
        if entry is None:
            return Verdict.NEW
        if entry.register_reply is not None and request == entry.register_request:
            live = self.session_live is None or self.session_live(client_id, entry.session)
            return Verdict.DUPLICATE if live else Verdict.NEW
        if request == 0 or request > entry.request_max:
            return Verdict.NEW
        return Verdict.STALE

    def cached_reply(self, client_id: int, *, register: bool) -> CachedReply:
        """The reply a request judged DUPLICATE repeats (its register's, for a register)."""
        entry = self.entries[client_id]
        if register:
            assert entry.register_reply is not None
            return CachedReply(
                entry.session, entry.register_request, entry.session, entry.register_reply
            )
        assert entry.request_op != 0
        return CachedReply(
            entry.session, entry.request_number, entry.request_op, entry.request_reply
        )

    def commit(self, prepare: Prepare, reply: bytes, *, register: bool) -> ClientEntry | None:
        """Record a committed request and its reply; return the evicted entry, if any."""
        header = prepare.header
        assert header.client_id != 0
        assert self.registers_sessions or not register
        entry = self.entries.get(header.client_id)
        evicted: ClientEntry | None = None
        if entry is None:
            if len(self.entries) >= self.clients_max:
                evicted = min(self.entries.values(), key=lambda e: (e.op, e.client_id))
                del self.entries[evicted.client_id]
                self.session_evicted_max = max(self.session_evicted_max, evicted.session)
            entry = ClientEntry(header.client_id, header.session)
            self.entries[header.client_id] = entry
        else:
            assert header.op > entry.op
        if register:
            # The register's commit op is the new session; the request slot stays, so a
            # request retried under the new session is still judged by its number.
            entry.session = header.op
            entry.register_request = header.request
            entry.register_reply = reply
        else:
            entry.session = max(entry.session, header.session)
            entry.request_number = header.request
            entry.request_op = header.op
            entry.request_reply = reply
        assert entry.op == header.op
        assert len(self.entries) <= self.clients_max
        return evicted

    def encode(self) -> bytes:
        """Deterministic bytes: entries sorted by client id."""
        parts = [_TABLE_HEADER.pack(_MAGIC, len(self.entries), self.session_evicted_max)]
        for client_id in sorted(self.entries):
            e = self.entries[client_id]
            register_reply = e.register_reply if e.register_reply is not None else b""
            parts.append(
                _ENTRY.pack(
                    client_id.to_bytes(16, "little"),
                    e.session,
                    e.request_number,
                    e.request_op,
                    e.register_request,
                    _REGISTERED if e.register_reply is not None else 0,
                    len(e.request_reply),
                    len(register_reply),
                )
            )
            parts.append(e.request_reply)
            parts.append(register_reply)
        return b"".join(parts)

    def restore(self, data: bytes) -> None:
        """Replace the table with one from ``encode``; MessageError if the bytes are bad."""
        if len(data) < _TABLE_HEADER.size:
            raise MessageError("truncated client table")
        magic, count, evicted_max = _TABLE_HEADER.unpack_from(data, 0)
        if magic != _MAGIC or count > self.clients_max:
            raise MessageError("client table magic or count is wrong")
        entries: dict[int, ClientEntry] = {}
        offset = _TABLE_HEADER.size
        client_id_last = 0
        for _ in range(count):
            if len(data) - offset < _ENTRY.size:
                raise MessageError("truncated client table entry")
            fields = _ENTRY.unpack_from(data, offset)
            raw_id, session, request, request_op, register_request = fields[:5]
            flags, reply_size, register_size = fields[5:]
            offset += _ENTRY.size
            if len(data) - offset < reply_size + register_size:
                raise MessageError("truncated client table reply")
            client_id = int.from_bytes(raw_id, "little")
            if client_id <= client_id_last:
                raise MessageError("client table entries are not in client id order")
            client_id_last = client_id
            registered = flags == _REGISTERED
            if flags & ~_REGISTERED or (
                not registered and (register_request != 0 or register_size != 0)
            ):
                raise MessageError("client table entry flags are wrong")
            if registered and not self.registers_sessions:
                raise MessageError("a register in a partition group's client table")
            if request_op == 0 and (request != 0 or reply_size != 0):
                raise MessageError("client table entry has a reply but no op")
            if request_op == 0 and not registered:
                raise MessageError("client table entry holds nothing")
            reply = data[offset : offset + reply_size]
            offset += reply_size
            register_reply = data[offset : offset + register_size] if registered else None
            offset += register_size
            entries[client_id] = ClientEntry(
                client_id, session, request, request_op, reply, register_request, register_reply
            )
        if offset != len(data):
            raise MessageError("trailing bytes after the client table")
        self.entries = entries
        self.session_evicted_max = evicted_max
