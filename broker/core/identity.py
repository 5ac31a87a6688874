"""Request identity: the digest that tells a retry from another request under its number.

Purpose: a client table answers a duplicate from its cache (``consensus.client_table``,
invariant 6), and a duplicate must be the *same* request: the same client id, request
number, operation and digest. This module defines the digest, once, for every place a
request reaches a group (a client frame, a forwarded request, the node's own requests).

Invariants:

1. The digest is 16 bytes, a function of the request as the client sent it (the frame
   body), computed where the frame arrived, and carried unchanged when the request is
   forwarded, so a retry sent to any node has the same digest.
2. For most requests it is XXH3-64 of the body widened to 128 bits, little-endian: what
   Iggy's clients stamp as ``request_checksum``. A stamped checksum that disagrees with
   the body is refused at admission (``stamped_checksum_valid``); an unstamped one (0) is
   computed here.
3. No digest of a request that carries a password covers the password: client tables are
   in snapshots on disk, and a fast hash of a password is a password anyone can brute
   force. Logins are identified by the user they log in as; CREATE_USER and
   CHANGE_PASSWORD by their other fields. Two such requests under one number that differ
   only in a password are therefore the same request (a client never does this: Iggy's
   clients give every metadata request a new number).

Theory of operation: ``request_checksum`` maps a decoded request to its digest; the
node calls it once per frame, the system client for its own bodies.
"""

from __future__ import annotations

import dataclasses
from typing import Final

import xxhash

from sdk import wire
from sdk.wire import CommandCode

REQUEST_CHECKSUM_SIZE: Final = 16
"""Bytes of a request's identity digest (Iggy's u128 ``request_checksum``)."""

_U64_MASK: Final = (1 << 64) - 1


def body_checksum(body: bytes | bytearray | memoryview) -> int:
    """XXH3-64 of a request body: the value Iggy's clients stamp (invariant 2)."""
    return xxhash.xxh3_64_intdigest(body)


def stamped_checksum_valid(stamped: int, body: bytes | bytearray | memoryview) -> bool:
    """Whether a client's stamped ``request_checksum`` is absent (0) or matches the body."""
    return stamped == 0 or stamped == body_checksum(body)


def _widen(value: int) -> bytes:
    assert 0 <= value <= _U64_MASK
    return value.to_bytes(REQUEST_CHECKSUM_SIZE, "little")


def _tagged(tag: bytes, body: bytes) -> bytes:
    """A digest of a re-encoded request, apart from any body digest (its own tag)."""
    return xxhash.xxh3_128_digest(tag + body)


def register_checksum(user_id: int) -> bytes:
    """The digest of a login (register) as user ``user_id``: it names the user only.

    A retry of a login (same client id, same user) is thus a duplicate and gets the
    session it opened back while that lives; a login as another user under the same
    client id is another request.
    """
    return _tagged(b"register", user_id.to_bytes(4, "little"))


def request_checksum(
    code: CommandCode, payload: wire.RequestPayload, body: bytes | bytearray | memoryview
) -> bytes:
    """The identity digest of a request other than a login (invariants 2 and 3)."""
    if isinstance(payload, wire.CreateUser):
        blanked = dataclasses.replace(payload, password="")
        return _tagged(b"create_user", blanked.encode())
    if isinstance(payload, wire.ChangePassword):
        blanked_change = dataclasses.replace(payload, current_password="", new_password="")
        return _tagged(b"change_password", blanked_change.encode())
    return _widen(body_checksum(body))


def internal_checksum(body: bytes) -> bytes:
    """The digest of a request the node makes itself (its body as it is sent)."""
    return _widen(body_checksum(body))
