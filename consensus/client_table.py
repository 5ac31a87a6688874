"""The client table: per client, the latest committed request and its reply.

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

Sessions: a session is the commit op of the client's register in the metadata group, so
sessions only grow. The metadata group (``register_operation`` set) creates entries only by
committing a register. A partition group cannot see registers; a request carries its
session, and the group trusts the host to have checked it against the metadata state at
admission. It keys deduplication by (client_id, session): an unknown client whose session is
above ``session_evicted_max`` is new; at or below it, it may be a client whose entry was
evicted, so its request may already be applied and it is told to register again. A higher
session for a known client supersedes the old entry (the client registered again).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from consensus.messages import MessageError, Prepare

_TABLE_HEADER: Final = struct.Struct("<4sIQ")  # magic, count, session_evicted_max
_ENTRY: Final = struct.Struct("<16sQQQI")  # client_id, session, request, op, reply size
_MAGIC: Final = b"VCT1"


class Verdict(enum.Enum):
    """What the primary does with a request, judged against committed state only."""

    NEW = "new"  # prepare it
    DUPLICATE = "duplicate"  # resend the cached reply
    STALE = "stale"  # an older request: drop silently
    NO_SESSION = "no_session"  # error reply: register first
    SESSION_EVICTED = "session_evicted"  # error reply: register again


@dataclass(slots=True)
class ClientEntry:
    client_id: int
    session: int
    request: int
    #: The op of the latest committed request (the eviction order).
    op: int
    reply: bytes


class ClientTable:
    """Committed requests and replies per client id; see the module docstring."""

    def __init__(self, clients_max: int, *, registers_sessions: bool) -> None:
        assert clients_max >= 1
        self.clients_max = clients_max
        self.registers_sessions = registers_sessions
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
            if entry is None:
                return Verdict.NEW
            if request == entry.request:
                return Verdict.DUPLICATE
            return Verdict.STALE if request < entry.request else Verdict.NEW
        if entry is None:
            if session != 0 and session <= self.session_evicted_max:
                return Verdict.SESSION_EVICTED
            if self.registers_sessions or session == 0:
                return Verdict.NO_SESSION
            return Verdict.NEW
        if session < entry.session:
            return Verdict.SESSION_EVICTED
        if session > entry.session:
            # The metadata group assigns sessions itself: a higher one is a client bug.
            return Verdict.NO_SESSION if self.registers_sessions else Verdict.NEW
        if request == entry.request:
            return Verdict.DUPLICATE
        return Verdict.STALE if request < entry.request else Verdict.NEW

    def commit(self, prepare: Prepare, reply: bytes, *, register: bool) -> ClientEntry | None:
        """Record a committed request and its reply; return the evicted entry, if any."""
        header = prepare.header
        assert header.client_id != 0
        session = header.op if register else header.session
        entry = self.entries.get(header.client_id)
        evicted: ClientEntry | None = None
        if entry is None:
            if len(self.entries) >= self.clients_max:
                evicted = min(self.entries.values(), key=lambda e: (e.op, e.client_id))
                del self.entries[evicted.client_id]
                self.session_evicted_max = max(self.session_evicted_max, evicted.session)
            self.entries[header.client_id] = ClientEntry(
                header.client_id, session, header.request, header.op, reply
            )
        else:
            assert header.op > entry.op
            entry.session = max(entry.session, session)
            entry.request = header.request
            entry.op = header.op
            entry.reply = reply
        assert len(self.entries) <= self.clients_max
        return evicted

    def encode(self) -> bytes:
        """Deterministic bytes: entries sorted by client id."""
        parts = [_TABLE_HEADER.pack(_MAGIC, len(self.entries), self.session_evicted_max)]
        for client_id in sorted(self.entries):
            e = self.entries[client_id]
            parts.append(
                _ENTRY.pack(
                    client_id.to_bytes(16, "little"), e.session, e.request, e.op, len(e.reply)
                )
            )
            parts.append(e.reply)
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
        for _ in range(count):
            if len(data) - offset < _ENTRY.size:
                raise MessageError("truncated client table entry")
            raw_id, session, request, op, size = _ENTRY.unpack_from(data, offset)
            offset += _ENTRY.size
            if len(data) - offset < size:
                raise MessageError("truncated client table reply")
            client_id = int.from_bytes(raw_id, "little")
            entries[client_id] = ClientEntry(
                client_id, session, request, op, data[offset : offset + size]
            )
            offset += size
        if offset != len(data):
            raise MessageError("trailing bytes after the client table")
        self.entries = entries
        self.session_evicted_max = evicted_max
