"""Bounds-checked little-endian cursor and builder over byte buffers (codec internals).

Purpose: the payload codecs of the control plane read and write through these two
classes so that bounds are checked in exactly one place.

Invariants:

1. :class:`Reader` never reads past its view: every read checks the remaining length
   first and raises :class:`ProtocolError` instead of ``struct.error``/``IndexError``.
2. :class:`Reader.take` returns a ``memoryview`` slice, never a copy.
3. :class:`Writer` only appends; its result is the bytes in order of the calls.
4. Strictness is the caller's: a reader never looks past what it was asked for, so a
   decoder that stops after its last field leaves any trailing bytes unread, and
   :meth:`Reader.finish` (:func:`read_whole`) is what refuses them. Strict decoders
   (every reply, the canonical ``decode`` of every request) end with it; the server's
   request decoding does not (``commands.CommandSpec.decode_request``).

The message-batch hot path does not use these (it unpacks precompiled structs at
precomputed offsets, see ``batch.py``); they serve the small metadata payloads.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final, TypeAlias, TypeVar

from sdk.wire.codes import IggyErrorCode
from sdk.wire.errors import ProtocolError

__all__ = ["Buffer", "Reader", "Writer", "as_byte_view", "read_whole"]

Buffer: TypeAlias = bytes | bytearray | memoryview
"""Anything the codec accepts as input bytes."""

_U8: Final = struct.Struct("<B")
_U16: Final = struct.Struct("<H")
_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")
_F32: Final = struct.Struct("<f")


def as_byte_view(data: Buffer) -> memoryview:
    """A one-dimensional unsigned-byte view of ``data``, without copying."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


class Reader:
    """A cursor over a byte view that raises :class:`ProtocolError` on truncation."""

    __slots__ = ("_end", "_pos", "_view")

    def __init__(self, data: Buffer) -> None:
        self._view = as_byte_view(data)
        self._pos = 0
        self._end = len(self._view)

    @property
    def position(self) -> int:
        """Bytes consumed so far."""
        return self._pos

    @property
    def remaining(self) -> int:
        """Bytes not yet consumed."""
        return self._end - self._pos

    def _need(self, size: int) -> int:
        start = self._pos
        if size > self._end - start:
            raise ProtocolError(
                f"truncated: need {size} bytes at offset {start}, have {self._end - start}"
            )
        self._pos = start + size
        return start

    def u8(self) -> int:
        """Read an unsigned byte."""
        value: int = _U8.unpack_from(self._view, self._need(1))[0]
        return value

    def u16(self) -> int:
        """Read a little-endian u16."""
        value: int = _U16.unpack_from(self._view, self._need(2))[0]
        return value

    def u32(self) -> int:
        """Read a little-endian u32."""
        value: int = _U32.unpack_from(self._view, self._need(4))[0]
        return value

    def u64(self) -> int:
        """Read a little-endian u64."""
        value: int = _U64.unpack_from(self._view, self._need(8))[0]
        return value

    def u128(self) -> int:
        """Read a little-endian u128."""
        start = self._need(16)
        return int.from_bytes(self._view[start : start + 16], "little")

    def f32(self) -> float:
        """Read a little-endian IEEE-754 binary32."""
        value: float = _F32.unpack_from(self._view, self._need(4))[0]
        return value

    def take(self, size: int) -> memoryview:
        """The next ``size`` bytes as a view (no copy)."""
        start = self._need(size)
        return self._view[start : start + size]

    def utf8(self, size: int) -> str:
        """The next ``size`` bytes decoded as UTF-8."""
        raw = self.take(size)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("invalid UTF-8", IggyErrorCode.INVALID_FORMAT) from None

    def rest(self) -> memoryview:
        """Everything not yet consumed, as a view; the reader ends up exhausted."""
        return self.take(self._end - self._pos)

    def finish(self, what: str) -> None:
        """Refuse trailing bytes: for a strict decoder a payload is the whole body, never
        a prefix of it."""
        if self._pos != self._end:
            raise ProtocolError(f"{what}: {self._end - self._pos} trailing bytes")


_T = TypeVar("_T")


def read_whole(body: Buffer, read: Callable[[Reader], _T], what: str) -> _T:
    """``read`` over all of ``body``, which it must consume exactly: strict decoding.

    Raises:
        ProtocolError: what ``read`` raises, or trailing bytes after what it read.
    """
    reader = Reader(body)
    value = read(reader)
    reader.finish(what)
    return value


class Writer:
    """An append-only little-endian builder."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def u8(self, value: int) -> None:
        """Append an unsigned byte."""
        self._buffer += _U8.pack(value)

    def u16(self, value: int) -> None:
        """Append a little-endian u16."""
        self._buffer += _U16.pack(value)

    def u32(self, value: int) -> None:
        """Append a little-endian u32."""
        self._buffer += _U32.pack(value)

    def u64(self, value: int) -> None:
        """Append a little-endian u64."""
        self._buffer += _U64.pack(value)

    def u128(self, value: int) -> None:
        """Append a little-endian u128."""
        self._buffer += value.to_bytes(16, "little")

    def f32(self, value: float) -> None:
        """Append a little-endian IEEE-754 binary32."""
        self._buffer += _F32.pack(value)

    def raw(self, data: Buffer) -> None:
        """Append bytes verbatim."""
        self._buffer += data

    def getvalue(self) -> bytes:
        """The bytes written so far."""
        return bytes(self._buffer)
