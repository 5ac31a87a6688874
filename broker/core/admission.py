"""Connection admission: what a client may cost the node before it has logged in.

Purpose: a client that has not logged in has proved nothing, so it must not be able to
make the node hold more than a login needs. This module holds the bookkeeping of those
bounds as pure objects; the connection layer (``broker.runtime.connection``) applies
them to sockets and waits where they say "not now".

Invariants:

1. Before login a frame may declare at most ``UNAUTHENTICATED_FRAME_SIZE_MAX`` bytes,
   header included: the largest LOGIN_REGISTER a client sends, with room to spare.
2. :class:`UnauthenticatedConnections` counts, per client address, the connections that
   have not logged in; an address holds at most ``per_address_max`` of them, and an
   address with none has no entry, so the table never has more entries than there are
   open connections.
3. :class:`IncomingFrameBytes` never has more than ``bytes_max`` bytes reserved: a
   reservation that does not fit is refused whole, never granted in part, so a frame
   that got its reservation can always be read to its end.
4. Pure: no clock, socket or task here; callers release exactly what they took (a
   release of more than is held is a bug and asserts).

Theory of operation: a connection takes a slot of its address when it is accepted and
gives it back when it logs in or closes, whichever comes first. For each frame it reserves
the frame's declared size from the node-wide :class:`IncomingFrameBytes` once the header
has arrived and before any body byte is read, and releases it once the frame is answered;
when the reservation does not fit, the connection stops reading until it does (TCP
backpressure), so the bytes that all connections hold for frames stay within the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from sdk.wire import HEADER_SIZE

UNAUTHENTICATED_FRAME_SIZE_MAX: Final = 4096
"""Largest frame, header included, a connection may send before it has logged in.

A LOGIN_REGISTER body is a u32 protocol version, three names (SDK name, SDK version and
username: a length byte and at most 255 bytes each), a password (a length byte and at
most 255 bytes) and a context (a u32 length and its bytes): at most 1,032 bytes before
the context, so 4 KiB leaves the context 2.8 KiB. A PING is a bare header."""

assert HEADER_SIZE + 4 + 4 * 256 + 4 < UNAUTHENTICATED_FRAME_SIZE_MAX


@dataclass(slots=True)
class UnauthenticatedConnections:
    """Connections that have not logged in, per client address (invariant 2).

    Args:
        per_address_max: The most connections one address may have open before login.
    """

    per_address_max: int
    _counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.per_address_max >= 1, self.per_address_max

    def admit(self, address: str) -> bool:
        """Count one more connection of ``address``; False (and nothing counted) if the
        address already has ``per_address_max`` of them."""
        count = self._counts.get(address, 0)
        if count >= self.per_address_max:
            return False
        self._counts[address] = count + 1
        return True

    def release(self, address: str) -> None:
        """One connection of ``address`` logged in or closed."""
        count = self._counts[address]
        assert count >= 1, (address, count)
        if count == 1:
            del self._counts[address]
        else:
            self._counts[address] = count - 1

    def count(self, address: str) -> int:
        """Connections of ``address`` that have not logged in."""
        return self._counts.get(address, 0)

    @property
    def addresses(self) -> int:
        """Addresses with at least one such connection (the table's entries)."""
        return len(self._counts)


@dataclass(slots=True)
class IncomingFrameBytes:
    """The node-wide budget of bytes held for incoming frames (invariant 3).

    Args:
        bytes_max: The most bytes reserved at once, over every connection.
    """

    bytes_max: int
    reserved: int = 0

    def __post_init__(self) -> None:
        assert self.bytes_max >= HEADER_SIZE, self.bytes_max

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes fit now."""
        return self.reserved + size <= self.bytes_max

    def try_reserve(self, size: int) -> bool:
        """Reserve ``size`` bytes if they fit; False (and nothing reserved) otherwise."""
        assert 0 <= size <= self.bytes_max, (size, self.bytes_max)
        if not self.fits(size):
            return False
        self.reserved += size
        return True

    def release(self, size: int) -> None:
        """Give back ``size`` bytes of earlier reservations."""
        assert 0 <= size <= self.reserved, (size, self.reserved)
        self.reserved -= size
