"""Replica-to-replica messages of one VSR group and their binary codec.

Purpose: the typed messages a :class:`consensus.replica.Replica` consumes and produces, and
the compact frame format they travel in between nodes.

Invariants:

1. Every frame starts with a 40-byte header whose first 16 bytes are a XXH3-128 checksum
   of everything after them, except in a prepare (and a repair answer): there it covers
   the frame and prepare headers only, since the prepare header carries the checksum of
   the body, so a body is hashed once per hop, not twice. Nothing in a frame is trusted
   before the checksums that cover it verify.
2. A prepare is identified by its header checksum (XXH3-128 over the packed header,
   which includes the checksum of the body). The same prepare has the same bytes wherever
   it is sent, so a retransmission or a repair answer is indistinguishable from the
   original, and ``parent`` chains every prepare to the one before it (a hash chain).
3. Decoding never raises anything but :class:`MessageError` for bad input from a peer, and
   never allocates more than the frame it was given.
4. Every size is bounded by a named constant, checked before the bytes are read.

Theory of operation: the frame header carries the command, the sending replica, the group
and the sender's view; the command-specific body follows. Prepare bodies are opaque bytes
(for a partition group, a stamped message batch). Control messages are small and fixed
apart from the header lists of DoViewChange and StartView (VSR Revisited §4.2 and §5.3:
only a suffix of the log travels with a view change; missing bodies are repaired).
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from dataclasses import dataclass
from typing import Final, TypeAlias

import xxhash

CHECKSUM_SIZE: Final = 16
#: A prepare body (a metadata command or a stamped message batch) is at most this large:
#: the largest client frame the Iggy protocol allows (64 MiB), so any admitted request fits.
PREPARE_BODY_SIZE_MAX: Final = 64 * 1024 * 1024
#: A snapshot chunk of state transfer carries at most this many bytes.
SNAPSHOT_CHUNK_SIZE_MAX: Final = 1024 * 1024
#: DoViewChange and StartView carry at most this many prepare headers.
VIEW_HEADERS_MAX: Final = 128
#: No frame is larger than this; it bounds every read before it is made.
MESSAGE_SIZE_MAX: Final = PREPARE_BODY_SIZE_MAX + 64 * 1024

_U64_MAX: Final = (1 << 64) - 1
_U128_MAX: Final = (1 << 128) - 1


def checksum(data: bytes | bytearray | memoryview) -> bytes:
    """XXH3-128: the one checksum of the consensus wire and log.

    It detects corruption (disk rot, torn writes, a bad peer), not forgery: the replica bus
    authenticates peers separately. XXH3 runs at tens of GB/s where BLAKE2b manages a few
    hundred MB/s, and every prepare body is checksummed on every replica.
    """
    return xxhash.xxh3_128_digest(data)


class MessageError(ValueError):
    """A peer sent bytes that do not decode to a valid message (checksum, size, field)."""


class Command(enum.IntEnum):
    """The u8 command code at byte 20 of every frame."""

    PREPARE = 1
    PREPARE_OK = 2
    COMMIT = 3
    START_VIEW_CHANGE = 4
    DO_VIEW_CHANGE = 5
    START_VIEW = 6
    REQUEST_START_VIEW = 7
    REQUEST_PREPARES = 8
    REQUEST_SNAPSHOT = 9
    SNAPSHOT_CHUNK = 10
    REPAIR_PREPARE = 11


# Frame header, little-endian, 40 bytes.
FRAME_HEADER: Final = struct.Struct(
    "<"
    "16s"  # checksum: XXH3-128 of frame[16:]
    "I"  # size: total frame size in bytes, header included
    "B"  # command: Command
    "B"  # replica: the sending replica's index
    "2x"  # reserved, zero
    "Q"  # group: the VSR group the message belongs to
    "Q"  # view: the sender's view when it sent the message
)
assert FRAME_HEADER.size == 40

# Prepare header, little-endian, 152 bytes.
PREPARE_HEADER: Final = struct.Struct(
    "<"
    "16s"  # checksum: XXH3-128 of the packed header after this field
    "Q"  # group
    "Q"  # view: the view in which the primary created this prepare
    "Q"  # op: position in the group's log, 1-based (0 is the root)
    "Q"  # commit: the primary's commit number when it created the prepare
    "16s"  # parent: checksum of the prepare at op - 1 (hash chain)
    "16s"  # client_id: u128, little-endian; 0 for none
    "Q"  # session: commit op of the client's register (0 for a register itself)
    "Q"  # request: the client's request number
    "I"  # operation: state-machine operation code
    "Q"  # timestamp_us: wall-clock microseconds stamped by the primary
    "Q"  # frontier: the state machine's frontier after this op (opaque to consensus)
    "16s"  # body_checksum: XXH3-128 of the body
    "I"  # body_size: body length in bytes
    "16s"  # request_checksum: the client request's identity digest (ClientRequested)
)
assert PREPARE_HEADER.size == 152

_PREPARE_OK: Final = struct.Struct("<Q16s")  # op, checksum of the prepare at op
_COMMIT: Final = struct.Struct("<Q")  # commit
_DO_VIEW_CHANGE: Final = struct.Struct("<QQQQH")  # log_view, op, commit, headers_op_min, count
_START_VIEW: Final = struct.Struct("<QQQH")  # op, commit, nonce, count
_REQUEST_START_VIEW: Final = struct.Struct("<Q")  # nonce
_REQUEST_PREPARES: Final = struct.Struct("<QQ")  # op_min, op_max (inclusive)
_REQUEST_SNAPSHOT: Final = struct.Struct("<QQ")  # op (0: any), offset
_SNAPSHOT_CHUNK: Final = struct.Struct("<QQQ16sI")  # op, size, offset, checksum, data length


@dataclass(frozen=True, slots=True)
class PrepareHeader:
    """The identity of one op in a group's log; ``checksum`` covers every other field."""

    checksum: bytes
    group: int
    view: int
    op: int
    commit: int
    parent: bytes
    client_id: int
    session: int
    request: int
    operation: int
    timestamp_us: int
    #: What the state machine's primary-side ``prepare`` derived for this op and needs to
    #: continue from at the next one (a partition: the next message offset). Consensus
    #: only carries it along the hash chain.
    frontier: int
    body_checksum: bytes
    body_size: int
    #: The identity digest of the client request this op executes (``ClientRequested``):
    #: with ``operation`` it tells a retry of the request from another request that
    #: reuses its number. Zero for an op without a client.
    request_checksum: bytes = bytes(CHECKSUM_SIZE)

    def pack(self) -> bytes:
        return PREPARE_HEADER.pack(
            self.checksum,
            self.group,
            self.view,
            self.op,
            self.commit,
            self.parent,
            self.client_id.to_bytes(16, "little"),
            self.session,
            self.request,
            self.operation,
            self.timestamp_us,
            self.frontier,
            self.body_checksum,
            self.body_size,
            self.request_checksum,
        )


def make_prepare_header(
    *,
    group: int,
    view: int,
    op: int,
    commit: int,
    parent: bytes,
    client_id: int,
    session: int,
    request: int,
    operation: int,
    timestamp_us: int,
    body: PrepareBody,
    frontier: int = 0,
    request_checksum: bytes = bytes(CHECKSUM_SIZE),
) -> PrepareHeader:
    """Build a header with both checksums computed."""
    assert 0 <= client_id <= _U128_MAX
    assert len(parent) == CHECKSUM_SIZE
    assert len(request_checksum) == CHECKSUM_SIZE
    assert len(body) <= PREPARE_BODY_SIZE_MAX
    unsealed = PrepareHeader(
        checksum=bytes(CHECKSUM_SIZE),
        group=group,
        view=view,
        op=op,
        commit=commit,
        parent=parent,
        client_id=client_id,
        session=session,
        request=request,
        operation=operation,
        timestamp_us=timestamp_us,
        frontier=frontier,
        body_checksum=checksum(body),
        body_size=len(body),
        request_checksum=request_checksum,
    )
    return dataclasses.replace(unsealed, checksum=checksum(unsealed.pack()[CHECKSUM_SIZE:]))


def root_header(group: int) -> PrepareHeader:
    """The virtual op 0 of every log: the anchor of the hash chain, never stored."""
    return make_prepare_header(
        group=group,
        view=0,
        op=0,
        commit=0,
        parent=bytes(CHECKSUM_SIZE),
        client_id=0,
        session=0,
        request=0,
        operation=0,
        timestamp_us=0,
        body=b"",
    )


def unpack_prepare_header(data: bytes | memoryview, offset: int = 0) -> PrepareHeader:
    """Parse and verify one packed header; raise MessageError if it is not intact."""
    if len(data) - offset < PREPARE_HEADER.size:
        raise MessageError("truncated prepare header")
    fields = PREPARE_HEADER.unpack_from(data, offset)
    expected = checksum(bytes(data[offset + CHECKSUM_SIZE : offset + PREPARE_HEADER.size]))
    if fields[0] != expected:
        raise MessageError("prepare header checksum mismatch")
    header = PrepareHeader(
        checksum=fields[0],
        group=fields[1],
        view=fields[2],
        op=fields[3],
        commit=fields[4],
        parent=fields[5],
        client_id=int.from_bytes(fields[6], "little"),
        session=fields[7],
        request=fields[8],
        operation=fields[9],
        timestamp_us=fields[10],
        frontier=fields[11],
        body_checksum=fields[12],
        body_size=fields[13],
        request_checksum=fields[14],
    )
    if header.body_size > PREPARE_BODY_SIZE_MAX:
        raise MessageError("prepare body too large")
    return header


# Messages ----------------------------------------------------------------------------------

PrepareBody: TypeAlias = bytes | memoryview
"""A prepare body: ``bytes``, or a view of a buffer handed over to the log whole (a
stamped batch in the request buffer it arrived in). Read, never written, once it is a
prepare's."""


@dataclass(frozen=True, slots=True)
class Prepare:
    """One op of the log: the record the journal stores and the message that replicates it.

    On the wire the frame's replica field is the sender (the primary, or a replica answering
    a repair request) and its view the sender's view; neither is part of the prepare.
    """

    header: PrepareHeader
    body: PrepareBody

    @property
    def op(self) -> int:
        return self.header.op

    @property
    def checksum(self) -> bytes:
        return self.header.checksum


@dataclass(frozen=True, slots=True)
class PrepareOk:
    """Backup -> primary: every op up to ``op`` is durable here, and ``op`` has ``checksum``."""

    group: int
    replica: int
    view: int
    op: int
    checksum: bytes


@dataclass(frozen=True, slots=True)
class Commit:
    """Primary -> backups, as its pipeline drains and when idle: ops up to ``commit`` are
    committed (and a heartbeat)."""

    group: int
    replica: int
    view: int
    commit: int


@dataclass(frozen=True, slots=True)
class StartViewChange:
    """Any -> all: the sender has moved to ``view`` and stopped accepting older prepares."""

    group: int
    replica: int
    view: int


@dataclass(frozen=True, slots=True)
class DoViewChange:
    """Any -> the new primary of ``view``: the sender's log suffix (VSR Revisited §4.2).

    ``headers`` lists the headers the sender knows for ops in ``[headers_op_min, op]``
    (gaps allowed); ``present[i]`` says whether ``headers[i]``'s prepare is durable at the
    sender, that is, whether the sender may have acknowledged it. A header the sender does
    not hold durably is a *nack*: proof the sender never acknowledged that prepare.
    """

    group: int
    replica: int
    view: int
    log_view: int
    op: int
    commit: int
    headers_op_min: int
    headers: tuple[PrepareHeader, ...]
    present: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class StartView:
    """New primary -> backups: the log of ``view`` ends at ``op``; ops up to ``commit`` are
    committed. ``headers`` is the top of that log (every op above the commit and one below).
    ``nonce`` echoes a RequestStartView, or is 0 when the message is a broadcast."""

    group: int
    replica: int
    view: int
    op: int
    commit: int
    nonce: int
    headers: tuple[PrepareHeader, ...]


@dataclass(frozen=True, slots=True)
class RequestStartView:
    """A replica that restarted (or fell out of its view) asks the primary for its view."""

    group: int
    replica: int
    view: int
    nonce: int


@dataclass(frozen=True, slots=True)
class RequestPrepares:
    """Ask a peer for its prepares of ops ``op_min..op_max``; each answer is a Prepare."""

    group: int
    replica: int
    view: int
    op_min: int
    op_max: int


@dataclass(frozen=True, slots=True)
class RepairPrepare:
    """A repair answer the sender vouches for: ``prepare`` is in the log of view ``view``.

    Only a replica in normal status sends one, and only for an op of its verified log, so
    the log of ``view`` (its ``log_view``) holds ``prepare``. A receiver in normal status
    in the same view may take it without a hash-chain proof: this is how a replica far
    behind repairs ops whose headers it has never seen (a plain Prepare answer can only be
    verified against a known header or the parent of a known child).
    """

    group: int
    replica: int
    view: int
    prepare: Prepare


@dataclass(frozen=True, slots=True)
class RequestSnapshot:
    """Ask a peer for the chunk at ``offset`` of its snapshot at ``op`` (0: any snapshot)."""

    group: int
    replica: int
    view: int
    op: int
    offset: int


@dataclass(frozen=True, slots=True)
class SnapshotChunk:
    """One chunk of a snapshot of committed state (state machine and client table)."""

    group: int
    replica: int
    view: int
    op: int
    size: int
    offset: int
    snapshot_checksum: bytes
    data: bytes


Message = (
    Prepare
    | PrepareOk
    | Commit
    | StartViewChange
    | DoViewChange
    | StartView
    | RequestStartView
    | RequestPrepares
    | RepairPrepare
    | RequestSnapshot
    | SnapshotChunk
)


# Encoding ----------------------------------------------------------------------------------


_PREPARE_FRAME_HEAD: Final = FRAME_HEADER.size + PREPARE_HEADER.size
"""The bytes of a prepare frame its frame checksum covers (from byte 16): the frame and
prepare headers; the body is covered by the prepare header's body checksum (invariant 1)."""


def _frame(command: Command, replica: int, group: int, view: int, body: bytes) -> bytes:
    size = FRAME_HEADER.size + len(body)
    assert size <= MESSAGE_SIZE_MAX
    assert 0 <= replica <= 0xFF
    assert 0 <= group <= _U64_MAX and 0 <= view <= _U64_MAX
    frame = bytearray(size)
    FRAME_HEADER.pack_into(frame, 0, bytes(CHECKSUM_SIZE), size, command, replica, group, view)
    frame[FRAME_HEADER.size :] = body
    frame[:CHECKSUM_SIZE] = checksum(memoryview(frame)[CHECKSUM_SIZE:])
    return bytes(frame)


def _prepare_frame_head(command: Command, replica: int, view: int, prepare: Prepare) -> bytes:
    """The frame and prepare headers of a prepare frame; its body follows as it is."""
    header = prepare.header
    assert len(prepare.body) == header.body_size
    size = _PREPARE_FRAME_HEAD + header.body_size
    assert size <= MESSAGE_SIZE_MAX
    assert 0 <= replica <= 0xFF
    assert 0 <= header.group <= _U64_MAX and 0 <= view <= _U64_MAX
    head = bytearray(_PREPARE_FRAME_HEAD)
    FRAME_HEADER.pack_into(
        head, 0, bytes(CHECKSUM_SIZE), size, command, replica, header.group, view
    )
    head[FRAME_HEADER.size :] = header.pack()
    head[:CHECKSUM_SIZE] = checksum(memoryview(head)[CHECKSUM_SIZE:])
    return bytes(head)


def encode_message_parts(message: Message, *, sender: int | None = None) -> tuple[PrepareBody, ...]:
    """:func:`encode_message` as the parts of one frame, in order, for a gathered write:
    a prepare's body is its own part, not copied into the frame."""
    if isinstance(message, Prepare):
        replica = sender if sender is not None else 0
        head = _prepare_frame_head(Command.PREPARE, replica, message.header.view, message)
        return (head, message.body)
    if isinstance(message, RepairPrepare):
        prepare = message.prepare
        assert prepare.header.group == message.group
        head = _prepare_frame_head(Command.REPAIR_PREPARE, message.replica, message.view, prepare)
        return (head, prepare.body)
    return (encode_message(message, sender=sender),)


def encode_message(message: Message, *, sender: int | None = None) -> bytes:
    """Encode a message into one frame.

    ``sender`` is only used for a Prepare (which does not name its sender); it defaults to
    the replica that is primary of the prepare's view and is informational only.
    """
    if isinstance(message, Prepare | RepairPrepare):
        return b"".join(encode_message_parts(message, sender=sender))
    if isinstance(message, PrepareOk):
        body = _PREPARE_OK.pack(message.op, message.checksum)
        command = Command.PREPARE_OK
    elif isinstance(message, Commit):
        body = _COMMIT.pack(message.commit)
        command = Command.COMMIT
    elif isinstance(message, StartViewChange):
        body = b""
        command = Command.START_VIEW_CHANGE
    elif isinstance(message, DoViewChange):
        assert len(message.headers) == len(message.present) <= VIEW_HEADERS_MAX
        body = _DO_VIEW_CHANGE.pack(
            message.log_view,
            message.op,
            message.commit,
            message.headers_op_min,
            len(message.headers),
        ) + b"".join(
            h.pack() + (b"\x01" if p else b"\x00")
            for h, p in zip(message.headers, message.present, strict=True)
        )
        command = Command.DO_VIEW_CHANGE
    elif isinstance(message, StartView):
        assert len(message.headers) <= VIEW_HEADERS_MAX
        body = _START_VIEW.pack(
            message.op, message.commit, message.nonce, len(message.headers)
        ) + b"".join(h.pack() for h in message.headers)
        command = Command.START_VIEW
    elif isinstance(message, RequestStartView):
        body = _REQUEST_START_VIEW.pack(message.nonce)
        command = Command.REQUEST_START_VIEW
    elif isinstance(message, RequestPrepares):
        body = _REQUEST_PREPARES.pack(message.op_min, message.op_max)
        command = Command.REQUEST_PREPARES
    elif isinstance(message, RequestSnapshot):
        body = _REQUEST_SNAPSHOT.pack(message.op, message.offset)
        command = Command.REQUEST_SNAPSHOT
    else:
        assert isinstance(message, SnapshotChunk)
        assert len(message.data) <= SNAPSHOT_CHUNK_SIZE_MAX
        body = (
            _SNAPSHOT_CHUNK.pack(
                message.op,
                message.size,
                message.offset,
                message.snapshot_checksum,
                len(message.data),
            )
            + message.data
        )
        command = Command.SNAPSHOT_CHUNK
    return _frame(command, message.replica, message.group, message.view, body)


# Decoding ----------------------------------------------------------------------------------

_PREPARE_COMMANDS: Final = (int(Command.PREPARE), int(Command.REPAIR_PREPARE))


def decode_message(data: bytes | bytearray | memoryview) -> Message:
    """Decode one whole frame; raise MessageError if it is not a valid message."""
    view_bytes = memoryview(data)
    if len(view_bytes) < FRAME_HEADER.size:
        raise MessageError("frame shorter than its header")
    if len(view_bytes) > MESSAGE_SIZE_MAX:
        raise MessageError("frame larger than MESSAGE_SIZE_MAX")
    frame_checksum, size, command_code, replica, group, view = FRAME_HEADER.unpack_from(
        view_bytes, 0
    )
    if size != len(view_bytes):
        raise MessageError("frame size field disagrees with the frame length")
    covered = size
    if command_code in _PREPARE_COMMANDS:
        # The body is checked against the prepare header's body checksum (invariant 1).
        if size < _PREPARE_FRAME_HEAD:
            raise MessageError("prepare frame shorter than its headers")
        covered = _PREPARE_FRAME_HEAD
    if frame_checksum != checksum(view_bytes[CHECKSUM_SIZE:covered]):
        raise MessageError("frame checksum mismatch")
    try:
        command = Command(command_code)
    except ValueError:
        raise MessageError(f"unknown command {command_code}") from None
    body = view_bytes[FRAME_HEADER.size :]
    return _decode_body(command, replica, group, view, body)


def _exact(body: memoryview, layout: struct.Struct) -> tuple[object, ...]:
    if len(body) != layout.size:
        raise MessageError("control message body has the wrong size")
    return layout.unpack_from(body, 0)


def _decode_body(
    command: Command, replica: int, group: int, view: int, body: memoryview
) -> Message:
    if command is Command.PREPARE:
        return _decode_prepare(group, body)
    if command is Command.REPAIR_PREPARE:
        return RepairPrepare(group, replica, view, _decode_prepare(group, body))
    if command is Command.PREPARE_OK:
        op, prepare_checksum = _exact(body, _PREPARE_OK)
        assert isinstance(op, int) and isinstance(prepare_checksum, bytes)
        return PrepareOk(group, replica, view, op, prepare_checksum)
    if command is Command.COMMIT:
        (commit,) = _exact(body, _COMMIT)
        assert isinstance(commit, int)
        return Commit(group, replica, view, commit)
    if command is Command.START_VIEW_CHANGE:
        if len(body) != 0:
            raise MessageError("start_view_change has a body")
        return StartViewChange(group, replica, view)
    if command is Command.DO_VIEW_CHANGE:
        return _decode_do_view_change(replica, group, view, body)
    if command is Command.START_VIEW:
        return _decode_start_view(replica, group, view, body)
    if command is Command.REQUEST_START_VIEW:
        (nonce,) = _exact(body, _REQUEST_START_VIEW)
        assert isinstance(nonce, int)
        return RequestStartView(group, replica, view, nonce)
    if command is Command.REQUEST_PREPARES:
        op_min, op_max = _exact(body, _REQUEST_PREPARES)
        assert isinstance(op_min, int) and isinstance(op_max, int)
        if op_min > op_max:
            raise MessageError("request_prepares range is empty")
        return RequestPrepares(group, replica, view, op_min, op_max)
    if command is Command.REQUEST_SNAPSHOT:
        op, offset = _exact(body, _REQUEST_SNAPSHOT)
        assert isinstance(op, int) and isinstance(offset, int)
        return RequestSnapshot(group, replica, view, op, offset)
    assert command is Command.SNAPSHOT_CHUNK
    if len(body) < _SNAPSHOT_CHUNK.size:
        raise MessageError("truncated snapshot chunk")
    op, size, offset, snapshot_checksum, length = _SNAPSHOT_CHUNK.unpack_from(body, 0)
    if length > SNAPSHOT_CHUNK_SIZE_MAX or len(body) != _SNAPSHOT_CHUNK.size + length:
        raise MessageError("snapshot chunk length is wrong")
    if offset + length > size:
        raise MessageError("snapshot chunk past the end of its snapshot")
    data = bytes(body[_SNAPSHOT_CHUNK.size :])
    return SnapshotChunk(group, replica, view, op, size, offset, snapshot_checksum, data)


def _decode_prepare(group: int, body: memoryview) -> Prepare:
    header = unpack_prepare_header(body)
    payload = bytes(body[PREPARE_HEADER.size :])
    if len(payload) != header.body_size or checksum(payload) != header.body_checksum:
        raise MessageError("prepare body does not match its header")
    if header.group != group:
        raise MessageError("prepare group disagrees with its frame")
    return Prepare(header=header, body=payload)


def _decode_headers(body: memoryview, offset: int, count: int, stride: int) -> list[PrepareHeader]:
    if count > VIEW_HEADERS_MAX:
        raise MessageError("too many headers")
    if len(body) != offset + count * stride:
        raise MessageError("header list has the wrong length")
    return [unpack_prepare_header(body, offset + i * stride) for i in range(count)]


def _check_header_list(headers: list[PrepareHeader], group: int, op_min: int, op: int) -> None:
    previous = -1
    for header in headers:
        if header.group != group:
            raise MessageError("header from another group")
        if not op_min <= header.op <= op or header.op <= previous:
            raise MessageError("headers out of range or out of order")
        previous = header.op


def _decode_do_view_change(replica: int, group: int, view: int, body: memoryview) -> DoViewChange:
    if len(body) < _DO_VIEW_CHANGE.size:
        raise MessageError("truncated do_view_change")
    log_view, op, commit, op_min, count = _DO_VIEW_CHANGE.unpack_from(body, 0)
    stride = PREPARE_HEADER.size + 1
    headers = _decode_headers(body, _DO_VIEW_CHANGE.size, count, stride)
    present: list[bool] = []
    for i in range(count):
        flag = body[_DO_VIEW_CHANGE.size + i * stride + PREPARE_HEADER.size]
        if flag > 1:
            raise MessageError("present flag is not 0 or 1")
        present.append(flag == 1)
    if log_view > view or op_min > op + 1:
        raise MessageError("do_view_change fields are inconsistent")
    _check_header_list(headers, group, op_min, op)
    return DoViewChange(
        group, replica, view, log_view, op, commit, op_min, tuple(headers), tuple(present)
    )


def _decode_start_view(replica: int, group: int, view: int, body: memoryview) -> StartView:
    if len(body) < _START_VIEW.size:
        raise MessageError("truncated start_view")
    op, commit, nonce, count = _START_VIEW.unpack_from(body, 0)
    headers = _decode_headers(body, _START_VIEW.size, count, PREPARE_HEADER.size)
    if commit > op:
        raise MessageError("start_view commit beyond its op")
    _check_header_list(headers, group, 0, op)
    return StartView(group, replica, view, op, commit, nonce, tuple(headers))
