"""Helpers shared by the payload modules (codec internals).

Purpose: the empty payload and the small decoding checks every payload module uses,
so the rules (counts bounded by the bytes left, booleans exactly 0 or 1, enums closed)
are written once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Self, TypeVar

from sdk.wire._buffer import Buffer, Reader, Writer
from sdk.wire.codes import IggyErrorCode
from sdk.wire.errors import ProtocolError

__all__ = ["Empty", "bool_flag", "check_count", "closed_enum", "read_str32", "write_str32"]


@dataclass(frozen=True, slots=True)
class Empty:
    """A body with no bytes: ping, logout, the argument-less reads, most replies."""

    def encode(self) -> bytes:
        """No bytes."""
        return b""

    @classmethod
    def decode(cls, body: Buffer) -> Self:
        """Refuse any byte."""
        if len(body) != 0:
            raise ProtocolError(f"expected an empty body, got {len(body)} bytes")
        return cls()


def write_str32(writer: Writer, text: str) -> None:
    """Append ``[len u32][utf8]``."""
    raw = text.encode("utf-8")
    writer.u32(len(raw))
    writer.raw(raw)


def read_str32(reader: Reader) -> str:
    """Read ``[len u32][utf8]``."""
    return reader.utf8(reader.u32())


def check_count(count: int, reader: Reader, element_bytes_min: int, what: str) -> None:
    """Refuse a count the remaining bytes cannot hold, before looping over it."""
    if count * element_bytes_min > reader.remaining:
        raise ProtocolError(
            f"{count} {what} cannot fit in {reader.remaining} bytes",
            IggyErrorCode.INVALID_FORMAT,
        )


def bool_flag(raw: int, what: str) -> bool:
    """A wire boolean, which must be exactly 0 or 1."""
    if raw > 1:
        raise ProtocolError(f"{what} is {raw}, not 0 or 1")
    return raw == 1


_E = TypeVar("_E", bound=enum.IntEnum)


def closed_enum(kind: type[_E], raw: int, what: str) -> _E:
    """``kind(raw)``, refusing values the enum does not define."""
    try:
        return kind(raw)
    except ValueError:
        raise ProtocolError(f"unknown {what} {raw}") from None
