"""Payloads of personal access tokens: create, list, delete, and the login with a token.

Purpose: typed request and reply payloads of GET_PERSONAL_ACCESS_TOKENS (41),
CREATE_PERSONAL_ACCESS_TOKEN (42), DELETE_PERSONAL_ACCESS_TOKEN (43) and
LOGIN_REGISTER_WITH_PAT (45, the register handshake with a token instead of a username
and password).

Invariants (as for every payload module):

1. ``X.decode(x.encode()) == x``, and a successful ``X.decode(body)`` re-encodes to
   ``body`` exactly.
2. Decoders raise :class:`ProtocolError` only; encoders raise ``ValueError``.
3. A request type's ``read(reader)`` reads and validates every field from the front of
   a reader and leaves what follows unread; ``decode`` is ``read`` plus a refusal of
   trailing bytes.
4. A token never appears in a ``repr``: token fields are excluded from it, as password
   fields are (``users``), so a payload that reaches a log line does not leak one.

Theory of operation: a token is created by a logged-in user under a name (unique per
user) with an expiry in microseconds (0 the server's default, ``u64::MAX`` never); the
reply carries the raw token once. GET lists the caller's tokens as ``[name][expiry_at
u64]`` records back to back (``expiry_at`` 0: never expires). The login body is the
client version prefix of LOGIN_REGISTER (40), then ``[token_len u8][token][context_len
u32][context]``; it travels as ``Operation.REGISTER`` like a password login, and the
server tells the two apart by the body.

Sources: apache/iggy ``core/binary_protocol/src/requests/personal_access_tokens/*.rs``,
``responses/personal_access_tokens/*.rs`` and ``requests/users/login_register_with_pat.rs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Self

from sdk.wire._buffer import Buffer, Reader, Writer, read_whole
from sdk.wire.codes import PROTOCOL_VERSION
from sdk.wire.primitives import decode_name, encode_name

__all__ = [
    "EXPIRY_NEVER",
    "EXPIRY_SERVER_DEFAULT",
    "CreatePersonalAccessToken",
    "LoginRegisterWithPat",
    "PersonalAccessTokenInfo",
    "PersonalAccessTokenRef",
    "PersonalAccessTokens",
    "RawPersonalAccessToken",
]

EXPIRY_SERVER_DEFAULT: Final = 0
"""A create's ``expiry`` that asks for the server's default (Iggy's: never expires)."""
EXPIRY_NEVER: Final = (1 << 64) - 1
"""A create's ``expiry`` for a token that never expires."""


@dataclass(frozen=True, slots=True)
class CreatePersonalAccessToken:
    """CREATE_PERSONAL_ACCESS_TOKEN (42) request: ``[name name][expiry u64]``, the expiry
    in microseconds from the creation."""

    name: str
    expiry: int = EXPIRY_SERVER_DEFAULT

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_name(writer, self.name)
        writer.u64(self.expiry)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the name and expiry; what follows is left unread."""
        return cls(decode_name(reader), reader.u64())

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "create personal access token")


@dataclass(frozen=True, slots=True)
class PersonalAccessTokenRef:
    """DELETE_PERSONAL_ACCESS_TOKEN (43) request: ``[name name]``, one of the caller's."""

    name: str

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        encode_name(writer, self.name)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the name; what follows is left unread."""
        return cls(decode_name(reader))

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "personal access token reference")


@dataclass(frozen=True, slots=True)
class RawPersonalAccessToken:
    """CREATE_PERSONAL_ACCESS_TOKEN reply payload (behind a result section): ``[token
    name]``, the only time the raw token is ever sent."""

    token: str = field(repr=False)

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        encode_name(writer, self.token)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        return read_whole(body, lambda reader: cls(decode_name(reader)), "raw token")


@dataclass(frozen=True, slots=True)
class PersonalAccessTokenInfo:
    """One token in a GET_PERSONAL_ACCESS_TOKENS reply: ``[name name][expiry_at u64]``,
    microseconds since the Unix epoch, 0 for a token that never expires."""

    name: str
    expiry_at: int = 0

    def write(self, writer: Writer) -> None:
        """Append the record."""
        encode_name(writer, self.name)
        writer.u64(self.expiry_at)

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read one record."""
        return cls(decode_name(reader), reader.u64())


@dataclass(frozen=True, slots=True)
class PersonalAccessTokens:
    """GET_PERSONAL_ACCESS_TOKENS (41) reply: records back to back until the body ends,
    no count; an empty body is no tokens."""

    tokens: tuple[PersonalAccessTokenInfo, ...] = ()

    def encode(self) -> bytes:
        """The reply payload."""
        writer = Writer()
        for token in self.tokens:
            token.write(writer)
        return writer.getvalue()

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse the reply payload."""
        reader = Reader(body)
        tokens = []
        while reader.remaining:
            tokens.append(PersonalAccessTokenInfo.read(reader))
        return cls(tuple(tokens))


@dataclass(frozen=True, slots=True)
class LoginRegisterWithPat:
    """LOGIN_REGISTER_WITH_PAT (45) request: the client version prefix, then
    ``[token_len u8][token][context_len u32][context]``."""

    token: str = field(repr=False)
    sdk_name: str = "viewstream"
    sdk_version: str = "0.1.0"
    protocol_version: int = PROTOCOL_VERSION
    context: str = ""

    def encode(self) -> bytes:
        """The request body."""
        writer = Writer()
        writer.u32(self.protocol_version)
        encode_name(writer, self.sdk_name)
        encode_name(writer, self.sdk_version)
        token = self.token.encode("utf-8")
        if len(token) > 255:
            raise ValueError("token longer than 255 bytes")
        writer.u8(len(token))
        writer.raw(token)
        context = self.context.encode("utf-8")
        writer.u32(len(context))
        writer.raw(context)
        return writer.getvalue()

    @classmethod
    def read(cls, reader: Reader) -> Self:
        """Read the request's fields; what follows the context is left unread."""
        protocol_version = reader.u32()
        sdk_name = decode_name(reader)
        sdk_version = decode_name(reader)
        token = reader.utf8(reader.u8())
        context = reader.utf8(reader.u32())
        return cls(token, sdk_name, sdk_version, protocol_version, context)

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Parse exactly the request body."""
        return read_whole(body, cls.read, "login register with token")
