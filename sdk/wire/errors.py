"""Errors and sentinels of the wire codec.

Purpose: give every way remote bytes can be wrong one typed exception, so the layer
above can turn it into an Iggy error reply (or an eviction, or a closed connection)
without ever catching ``IndexError``, ``struct.error`` or ``UnicodeDecodeError``.

Invariants:

1. A decoder fed remote bytes raises :class:`ProtocolError` and nothing else. Any
   other exception escaping a decoder is a bug in the codec.
2. :class:`ProtocolError` always carries an :class:`IggyErrorCode`, the code the server
   answers with; it may also name the :class:`EvictionReason` a server should evict
   the session with when the failure is session-terminal.
3. :class:`ServerRejected` and :class:`SessionEvicted` are not protocol failures: they
   are well-formed frames that say "no" (a non-zero reply status, a result section
   with an error entry, or an eviction).

Theory of operation: the incremental frame decoder returns :data:`NEED_MORE_BYTES`
instead of raising when a frame is merely incomplete, so "not yet" and "never" are
different types and a caller cannot confuse them.
"""

from __future__ import annotations

import enum
from typing import Final

from sdk.wire.codes import EvictionReason, IggyErrorCode

__all__ = [
    "NEED_MORE_BYTES",
    "NeedMoreBytes",
    "ProtocolError",
    "ServerRejected",
    "SessionEvicted",
]


class ProtocolError(Exception):
    """Remote bytes that violate the protocol.

    Attributes:
        reason: What was wrong, in words, for logs.
        code: The Iggy error code a server replies with for this failure.
        eviction: The eviction reason a server should end the session with, or
            ``None`` when the failure does not name one.
    """

    __slots__ = ("code", "eviction", "reason")

    def __init__(
        self,
        reason: str,
        code: IggyErrorCode = IggyErrorCode.INVALID_FORMAT,
        eviction: EvictionReason | None = None,
    ) -> None:
        super().__init__(f"{reason} ({code.name}={int(code)})")
        self.reason = reason
        self.code = code
        self.eviction = eviction


class ServerRejected(Exception):
    """A well-formed reply that reports a failure.

    Attributes:
        code: The raw Iggy error code from the reply (kept as ``int`` so codes this
            codec does not name still reach the caller).
    """

    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        try:
            name = IggyErrorCode(code).name
        except ValueError:
            name = "UNKNOWN"
        super().__init__(f"server rejected the request: {name}={code}")
        self.code = code


class SessionEvicted(Exception):
    """The server ended the session with an eviction frame.

    Attributes:
        reason: Why.
        server_protocol_version: The server's packed protocol version (set for
            ``INCOMPATIBLE_PROTOCOL``, else 0).
        server_protocol_version_min: The oldest packed version the server accepts
            (set for ``INCOMPATIBLE_PROTOCOL``, else 0).
    """

    __slots__ = ("reason", "server_protocol_version", "server_protocol_version_min")

    def __init__(
        self,
        reason: EvictionReason,
        server_protocol_version: int = 0,
        server_protocol_version_min: int = 0,
    ) -> None:
        super().__init__(f"session evicted: {reason.name}")
        self.reason = reason
        self.server_protocol_version = server_protocol_version
        self.server_protocol_version_min = server_protocol_version_min


class NeedMoreBytes(enum.Enum):
    """The type of :data:`NEED_MORE_BYTES` (a one-member enum so mypy can narrow it)."""

    NEED_MORE_BYTES = enum.auto()


NEED_MORE_BYTES: Final = NeedMoreBytes.NEED_MORE_BYTES
"""Returned by the frame decoder when the buffered bytes do not yet hold a whole frame."""
