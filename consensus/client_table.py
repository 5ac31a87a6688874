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
   commit is oldest goes (ties by client id, which cannot happen as ops are unique), among
   those whose session the state machine no longer holds when there are any (the
   metadata group, ``session_live``: a function of committed state, the same on every
   replica), and ``session_evicted_max`` remembers the highest session ever evicted.
3. A client whose session is evicted or superseded gets ``SESSION_EVICTED``, never a reply
   computed for another request.
4. Request numbers belong to the client id, not to one of its sessions. A client numbers
   its requests upwards across all its sessions (a retry re-uses the number), and a
   request below the highest number the client committed (``request_max``) is never
   judged new while the client's entry is held: a request retried after the client
   registered again is still answered from the table.
5. An entry caches two replies: that of the client's latest committed request
   (``request_number``, ``request_op``) and, in the metadata group, that of the register
   which opened its current session (``register_request``; its op is ``session``). A
   duplicate is answered with the one it repeats (``cached_reply``), never the other.
6. A duplicate is the same request, not only the same number: its identity is the request
   number, the operation and the request's digest (``request_checksum``, defined by the
   host). A request with the number of a cached reply but another operation or digest is
   never answered with that reply. In the metadata group it is refused
   (``REQUEST_MISMATCH``); in a partition group it is new (at-least-once, as Iggy's
   partition plane, which does not deduplicate: some clients send every partition request
   with the same number). An entry keeps the latest ``SAME_NUMBER_REQUESTS_MAX`` requests
   committed under the client's latest number, so a retry of any of them is still a
   duplicate answered with its own reply.
7. A late copy of a login never ends a newer session. The Iggy wire numbers every
   register 0; a client that numbers its registers like any request (the simulator's)
   logs in under growing numbers, its first login under 0. A register numbered below the
   one that opened the entry's session, request 0 included, is therefore a copy of an
   older login still in the network (duplicated or retried), and is STALE: judged new,
   it would supersede the session the client holds, and abort whatever the client has in
   flight. It cannot be told apart from a client that restarted under the same client id
   and numbers from 0 again, but invariant 4 already leaves that client out (its next
   requests, below ``request_max``, would be dropped as stale): a client that starts
   numbering again takes a new client id, as the SDK does when it abandons or forgets a
   session and the runtime's system client does in each process. On the wire the entry's
   register is numbered 0 as well, so this never applies there: a second login as another
   user still opens a new session.
8. A register is never dropped but as such a late copy. A login the entry does not hold,
   numbered above the register that opened the entry's session but not above
   ``request_max`` (or when the entry holds no register, as when it was evicted while the
   client's write was in flight and that write's commit made it anew), opened or joined a
   session the table no longer holds, and gets SESSION_EVICTED. A client repeats its
   login to join its session on another connection and waits for the answer: dropping it
   would leave the client waiting for good, never told to log in again.

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
  From an unknown client: NEW. With the request number and the digest of the register
  that opened the client's current session: a retry of it, or a second login of a client
  id that holds that session (the host's digest of a register names the user, never a
  password). While the session lives (``session_live``) it is DUPLICATE and gets the
  original session back; once it has ended (logout, closed connection, eviction, its user
  removed), or if the register opened none, it is NEW: a register that left no live
  session has no effect to protect, so running it again applies nothing twice, and the
  client id gets a new session. A number above ``request_max`` is NEW too (a new login,
  which ends the client's previous session). A number below that of the register that
  opened the entry's session, 0 included, is STALE (invariant 7). Otherwise request 0 is
  NEW (on the wire every login is 0: one as another user, or one into an entry that holds
  no register) and any other number is SESSION_EVICTED (invariant 8).
* Any other request. From an unknown client: SESSION_EVICTED at or below
  ``session_evicted_max``, else NO_SESSION in the metadata group (or with session 0) and
  NEW in a partition group. From a session below the entry's: SESSION_EVICTED. From one
  above it: NO_SESSION in the metadata group, which assigns sessions itself; in a partition
  group the client registered again, and the request is judged by its number like any
  other. By number: above ``request_max`` NEW; equal to the latest committed request
  DUPLICATE if it is the same request (invariant 6), else REQUEST_MISMATCH in the metadata
  group and NEW in a partition group; otherwise STALE: the replica answers it with the
  error ALREADY_APPLIED (the reply aged out: only the latest is kept) and never applies it
  again; a STALE register (invariant 7) is dropped silently.

Bound: deduplication across sessions holds while the client's entry is held. An evicted
entry forgets the client's numbers: its old sessions are refused, but a request re-sent
under a session registered after the eviction is new. A client therefore never re-sends a
write whose outcome is unknown under a new session.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from consensus.messages import MessageError, Prepare

_TABLE_HEADER: Final = struct.Struct("<4sIQ")  # magic, count, session_evicted_max
_ENTRY: Final = struct.Struct(
    "<16s"  # client_id
    "Q"  # session
    "Q"  # request_number: the latest committed request other than a register
    "Q"  # request_op: its op (0: none yet)
    "I"  # request_operation: its operation
    "16s"  # request_checksum: its identity digest
    "Q"  # register_request: request number of the register that opened the session
    "16s"  # register_checksum: that register's identity digest
    "B"  # flags: _REGISTERED when the register's reply is cached
    "I"  # size of the request's reply
    "I"  # size of the register's reply
    "B"  # count of earlier requests under the same number (``_EARLIER``, after the replies)
)
_EARLIER: Final = struct.Struct(
    "<Q"  # op
    "I"  # operation
    "16s"  # request_checksum
    "I"  # size of its reply, whose bytes follow
)
#: The encoding's version: VCT3 added the request identities (operation, digests). An
#: older table is refused rather than guessed at: its replies could not be told apart.
_MAGIC: Final = b"VCT3"
_REGISTERED: Final = 0x01
_CHECKSUM_ZERO: Final = bytes(16)
assert _TABLE_HEADER.size == 16
assert _ENTRY.size == 94
assert _EARLIER.size == 32

SAME_NUMBER_REQUESTS_MAX: Final = 8
"""Committed requests of one client under one request number that an entry keeps (a
partition group's client that numbers every request alike retries any of its latest
few, and each is answered with its own reply); an older one is new again."""

#: Whether the application still holds ``session`` for ``client_id``; see ``ClientTable``.
SessionLive = Callable[[int, int], bool]


class Verdict(enum.Enum):
    """What the primary does with a request, judged against committed state only."""

    NEW = "new"  # prepare it
    DUPLICATE = "duplicate"  # resend the cached reply
    STALE = "stale"  # an older request: ALREADY_APPLIED (a login's late copy: silence)
    NO_SESSION = "no_session"  # error reply: register first
    SESSION_EVICTED = "session_evicted"  # error reply: register again
    REQUEST_MISMATCH = "request_mismatch"  # error reply: the number holds another request


@dataclass(frozen=True, slots=True)
class EarlierRequest:
    """A committed request under the number of the client's latest one, before it."""

    op: int
    operation: int
    request_checksum: bytes
    reply: bytes


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
    #: The identity of that request besides its number (invariant 6).
    request_operation: int = 0
    request_checksum: bytes = _CHECKSUM_ZERO
    #: The register that opened ``session`` (metadata group): its request number, digest
    #: and reply; its op is ``session``. ``register_reply`` is None when none is cached.
    register_request: int = 0
    register_reply: bytes | None = None
    register_checksum: bytes = _CHECKSUM_ZERO
    #: Earlier committed requests under ``request_number`` (a partition group only),
    #: oldest first; with the latest, at most ``SAME_NUMBER_REQUESTS_MAX``.
    earlier: list[EarlierRequest] = field(default_factory=list)

    def same_request(self, operation: int, request_checksum: bytes) -> CachedReply | None:
        """The committed request under ``request_number`` with this identity, if any."""
        if self.request_op == 0:
            return None
        if operation == self.request_operation and request_checksum == self.request_checksum:
            return CachedReply(
                self.session, self.request_number, self.request_op, self.request_reply
            )
        for slot in reversed(self.earlier):
            if operation == slot.operation and request_checksum == slot.request_checksum:
                return CachedReply(self.session, self.request_number, slot.op, slot.reply)
        return None

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

    def judge(
        self,
        client_id: int,
        session: int,
        request: int,
        *,
        register: bool,
        operation: int,
        request_checksum: bytes,
    ) -> Verdict:
        """Classify a request against committed state (in-flight ones are checked first).

        ``operation`` and ``request_checksum`` are the request's identity besides its
        number (invariant 6).
        """
        assert len(request_checksum) == len(_CHECKSUM_ZERO)
        entry = self.entries.get(client_id)
        if register:
            assert self.registers_sessions
            return self._judge_register(entry, client_id, request, request_checksum)
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
            if entry.same_request(operation, request_checksum) is not None:
                return Verdict.DUPLICATE
            # Another request under the number of the cached one (invariant 6).
            return Verdict.REQUEST_MISMATCH if self.registers_sessions else Verdict.NEW
        return Verdict.STALE

    def _judge_register(
        self, entry: ClientEntry | None, client_id: int, request: int, request_checksum: bytes
    ) -> Verdict:
        if entry is None:
            return Verdict.NEW
        if (
            entry.register_reply is not None
            and request == entry.register_request
            and request_checksum == entry.register_checksum
        ):
            live = self.session_live is None or self.session_live(client_id, entry.session)
            return Verdict.DUPLICATE if live else Verdict.NEW
        if request > entry.request_max:
            return Verdict.NEW
        if entry.register_reply is not None and request < entry.register_request:
            # An older login than the one that opened the entry's session, request 0
            # included: a late copy, which must not end that session (invariant 7).
            return Verdict.STALE
        if request == 0:
            return Verdict.NEW  # the wire's login: as another user, or no register held
        # Numbered after the register the entry holds, or the entry holds none: the session
        # this login opened or joined is not the entry's. Its client waits for the answer,
        # so it is told to log in again, never left waiting (invariant 8).
        return Verdict.SESSION_EVICTED

    def cached_reply(
        self,
        client_id: int,
        *,
        register: bool,
        operation: int = 0,
        request_checksum: bytes = _CHECKSUM_ZERO,
    ) -> CachedReply:
        """The reply a request judged DUPLICATE repeats: its register's, for a register,
        else that of the committed request with its identity (``operation``,
        ``request_checksum``)."""
        entry = self.entries[client_id]
        if register:
            assert entry.register_reply is not None
            return CachedReply(
                entry.session, entry.register_request, entry.session, entry.register_reply
            )
        cached = entry.same_request(operation, request_checksum)
        assert cached is not None
        return cached

    def commit(self, prepare: Prepare, reply: bytes, *, register: bool) -> ClientEntry | None:
        """Record a committed request and its reply; return the evicted entry, if any."""
        header = prepare.header
        assert header.client_id != 0
        assert self.registers_sessions or not register
        entry = self.entries.get(header.client_id)
        evicted: ClientEntry | None = None
        if entry is None:
            if len(self.entries) >= self.clients_max:
                evicted = self._eviction_candidate()
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
            entry.register_checksum = header.request_checksum
        else:
            entry.session = max(entry.session, header.session)
            same_number = entry.request_op != 0 and entry.request_number == header.request
            if same_number and not self.registers_sessions:
                # Another request under the same number (a partition group, invariant 6).
                entry.earlier.append(
                    EarlierRequest(
                        entry.request_op,
                        entry.request_operation,
                        entry.request_checksum,
                        entry.request_reply,
                    )
                )
                if len(entry.earlier) >= SAME_NUMBER_REQUESTS_MAX:
                    del entry.earlier[0]
            else:
                entry.earlier.clear()
            entry.request_number = header.request
            entry.request_op = header.op
            entry.request_reply = reply
            entry.request_operation = header.operation
            entry.request_checksum = header.request_checksum
        assert entry.op == header.op
        assert len(self.entries) <= self.clients_max
        return evicted

    def _eviction_candidate(self) -> ClientEntry:
        """The entry a full table evicts (invariant 2): the oldest whose session the state
        machine no longer holds, if any, else the oldest. A client that registers without
        end under new client ids thus pushes out the entries of its own ended sessions, not
        the entry of another client's live one."""
        entries = sorted(self.entries.values(), key=lambda e: (e.op, e.client_id))
        live = self.session_live
        if live is not None:
            for entry in entries:
                if entry.register_reply is None or not live(entry.client_id, entry.session):
                    return entry
        return entries[0]

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
                    e.request_operation,
                    e.request_checksum,
                    e.register_request,
                    e.register_checksum,
                    _REGISTERED if e.register_reply is not None else 0,
                    len(e.request_reply),
                    len(register_reply),
                    len(e.earlier),
                )
            )
            parts.append(e.request_reply)
            parts.append(register_reply)
            for slot in e.earlier:
                parts.append(
                    _EARLIER.pack(slot.op, slot.operation, slot.request_checksum, len(slot.reply))
                )
                parts.append(slot.reply)
        return b"".join(parts)

    def restore(self, data: bytes) -> None:
        """Replace the table with one from ``encode``; MessageError if the bytes are bad."""
        if len(data) < _TABLE_HEADER.size:
            raise MessageError("truncated client table")
        magic, count, evicted_max = _TABLE_HEADER.unpack_from(data, 0)
        if magic != _MAGIC:
            raise MessageError(f"client table encoding {magic!r} is not {_MAGIC!r}")
        if count > self.clients_max:
            raise MessageError("client table count is above its bound")
        entries: dict[int, ClientEntry] = {}
        offset = _TABLE_HEADER.size
        client_id_last = 0
        for _ in range(count):
            if len(data) - offset < _ENTRY.size:
                raise MessageError("truncated client table entry")
            fields = _ENTRY.unpack_from(data, offset)
            raw_id, session, request, request_op, request_operation = fields[:5]
            request_checksum, register_request, register_checksum = fields[5:8]
            flags, reply_size, register_size, earlier_count = fields[8:]
            offset += _ENTRY.size
            if len(data) - offset < reply_size + register_size:
                raise MessageError("truncated client table reply")
            client_id = int.from_bytes(raw_id, "little")
            if client_id <= client_id_last:
                raise MessageError("client table entries are not in client id order")
            client_id_last = client_id
            registered = flags == _REGISTERED
            if flags & ~_REGISTERED or (
                not registered
                and (register_request != 0 or register_size != 0 or any(register_checksum))
            ):
                raise MessageError("client table entry flags are wrong")
            if registered and not self.registers_sessions:
                raise MessageError("a register in a partition group's client table")
            if request_op == 0 and (
                request != 0 or reply_size != 0 or request_operation != 0 or any(request_checksum)
            ):
                raise MessageError("client table entry has a reply but no op")
            if request_op == 0 and not registered:
                raise MessageError("client table entry holds nothing")
            reply = data[offset : offset + reply_size]
            offset += reply_size
            register_reply = data[offset : offset + register_size] if registered else None
            offset += register_size
            if earlier_count > SAME_NUMBER_REQUESTS_MAX - 1 or (
                earlier_count and (request_op == 0 or self.registers_sessions)
            ):
                raise MessageError("client table entry holds wrong earlier requests")
            earlier: list[EarlierRequest] = []
            op_last = 0
            for _ in range(earlier_count):
                if len(data) - offset < _EARLIER.size:
                    raise MessageError("truncated client table earlier request")
                slot_op, slot_operation, slot_checksum, slot_size = _EARLIER.unpack_from(
                    data, offset
                )
                offset += _EARLIER.size
                if len(data) - offset < slot_size:
                    raise MessageError("truncated client table earlier reply")
                if not op_last < slot_op < request_op:
                    raise MessageError("client table earlier requests are out of op order")
                op_last = slot_op
                slot_reply = data[offset : offset + slot_size]
                offset += slot_size
                earlier.append(EarlierRequest(slot_op, slot_operation, slot_checksum, slot_reply))
            entries[client_id] = ClientEntry(
                client_id,
                session,
                request,
                request_op,
                reply,
                request_operation,
                request_checksum,
                register_request,
                register_reply,
                register_checksum if registered else _CHECKSUM_ZERO,
                earlier,
            )
        if offset != len(data):
            raise MessageError("trailing bytes after the client table")
        self.entries = entries
        self.session_evicted_max = evicted_max
