"""The incremental frame decoder and the frame builders."""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.wire import (
    COMMANDS,
    FRAME_SIZE_MAX,
    HEADER_SIZE,
    NEED_MORE_BYTES,
    Buffer,
    Command,
    CommandCode,
    EvictionReason,
    Frame,
    FrameDecoder,
    IggyErrorCode,
    Operation,
    ProtocolError,
    ReplyHeader,
    RequestHeader,
    build_eviction_frame,
    build_reply_frame,
    build_reply_frame_parts,
    build_request_frame,
    decode_frame,
    request_checksum,
)
from sdk.wire.framing import CHUNK_COALESCE_BYTES
from tests.wire.strategies import REPLIES, REQUESTS, U64, U128

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """A valid frame of any shape a client connection carries."""
    code = draw(st.sampled_from(sorted(COMMANDS)))
    client = draw(U128.filter(bool))
    shape = draw(st.sampled_from(["request", "reply", "eviction"]))
    if shape == "eviction":
        reason = draw(
            st.sampled_from([r for r in EvictionReason if r is not EvictionReason.RESERVED])
        )
        return build_eviction_frame(client, reason)
    body = draw(REQUESTS[code]).encode()
    request = build_request_frame(code, body, client=client, session=draw(U64), request=draw(U64))
    if shape == "request":
        return bytes(request)
    header = RequestHeader.unpack_from(request)
    return bytes(build_reply_frame(header, draw(REPLIES[code]).encode(), op=draw(U64)))


def _drain(decoder: FrameDecoder) -> list[Frame]:
    out = []
    while (frame := decoder.next_frame()) is not NEED_MORE_BYTES:
        out.append(frame)
    return out


@SETTINGS
@given(frame=frames())
def test_every_truncation_of_a_valid_frame_needs_more_bytes(frame: bytes) -> None:
    for end in range(len(frame)):
        decoder = FrameDecoder()
        decoder.feed(frame[:end])
        assert decoder.next_frame() is NEED_MORE_BYTES
        assert decoder.pending_bytes == end
        decoder.feed(frame[end:])
        whole = decoder.next_frame()
        assert isinstance(whole, Frame)
        assert bytes(whole.data) == frame
        assert decoder.next_frame() is NEED_MORE_BYTES


@SETTINGS
@given(stream=st.lists(frames(), min_size=1, max_size=4), data=st.data())
def test_frames_split_at_arbitrary_points_come_out_whole_and_in_order(
    stream: list[bytes], data: st.DataObject
) -> None:
    joined = b"".join(stream)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(joined)), max_size=6)))
    decoder = FrameDecoder()
    received: list[Frame] = []
    start = 0
    for cut in [*cuts, len(joined)]:
        decoder.feed(joined[start:cut])
        received.extend(_drain(decoder))
        start = cut
    assert [bytes(frame.data) for frame in received] == stream
    assert [frame.command for frame in received] == [Command(raw[60]) for raw in stream]


def _header_with(size: int, command: int = Command.REQUEST) -> bytes:
    header = bytearray(HEADER_SIZE)
    struct.pack_into("<I", header, 48, size)
    header[60] = command
    return bytes(header)


@pytest.mark.parametrize("size", [FRAME_SIZE_MAX + 1, 0xFFFF_FFFF])
def test_declared_size_above_maximum_is_refused_as_soon_as_the_size_field_arrives(
    size: int,
) -> None:
    decoder = FrameDecoder()
    header = _header_with(size)
    decoder.feed(header[:51])  # one byte short of the size field
    assert decoder.next_frame() is NEED_MORE_BYTES
    with pytest.raises(ProtocolError) as refused:
        decoder.feed(header[51:] + b"\x00" * 1000)
    assert refused.value.code is IggyErrorCode.INVALID_COMMAND
    assert refused.value.eviction is EvictionReason.INVALID_REQUEST_BODY_SIZE
    # Nothing of the body was taken in: the decoder is poisoned and holds nothing.
    assert decoder.pending_bytes == 0
    with pytest.raises(ProtocolError):
        decoder.next_frame()
    with pytest.raises(ProtocolError):
        decoder.feed(b"more")


def test_declared_size_above_a_configured_maximum_is_refused() -> None:
    decoder = FrameDecoder(frame_size_max=4096)
    decoder.feed(_header_with(4096))  # exactly the maximum is fine
    assert decoder.next_frame() is NEED_MORE_BYTES
    other = FrameDecoder(frame_size_max=4096)
    with pytest.raises(ProtocolError):
        other.feed(_header_with(4097)[:52])


@pytest.mark.parametrize("size", [0, 1, HEADER_SIZE - 1])
def test_declared_size_below_the_header_is_refused(size: int) -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(_header_with(size)[:52])


def test_unknown_command_is_refused_when_the_header_completes_before_the_body() -> None:
    decoder = FrameDecoder()
    header = _header_with(HEADER_SIZE + 100, command=99)
    decoder.feed(header[:-1])
    assert decoder.next_frame() is NEED_MORE_BYTES
    with pytest.raises(ProtocolError):
        decoder.feed(header[-1:])


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.binary(max_size=300), max_size=4))
def test_random_bytes_yield_frames_or_need_more_bytes_or_protocol_error(
    chunks: list[bytes],
) -> None:
    decoder = FrameDecoder()
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            for frame in _drain(decoder):
                assert len(frame.data) >= HEADER_SIZE
    except ProtocolError:
        pass


def test_frame_body_is_a_view_of_the_frame_buffer_not_a_copy() -> None:
    frame_bytes = build_request_frame(CommandCode.PING, b"abc", client=7, session=0, request=1)
    decoder = FrameDecoder()
    decoder.feed(frame_bytes)
    frame = decoder.next_frame()
    assert isinstance(frame, Frame)
    assert frame.body.obj is frame.data.obj
    frame.body[0] = ord("X")  # the owner may write in place (batch stamping does)
    assert bytes(frame.data[HEADER_SIZE:]) == b"Xbc"
    assert frame_bytes[HEADER_SIZE:] == b"abc"  # the transport's bytes are not aliased


def test_decode_frame_accepts_exactly_one_frame_without_copying() -> None:
    raw = bytes(build_request_frame(CommandCode.PING, b"", client=1, session=0, request=1))
    frame = decode_frame(raw)
    assert frame.data.obj is raw
    assert frame.command is Command.REQUEST
    with pytest.raises(ProtocolError):
        decode_frame(raw + b"\x00")
    with pytest.raises(ProtocolError):
        decode_frame(raw[:-1])
    with pytest.raises(ProtocolError):
        decode_frame(raw[:100])


def test_ping_request_frame_carries_its_code_in_bytes_196_to_200() -> None:
    # The first frame the official SDK sends on connect (reference, top note).
    frame = build_request_frame(CommandCode.PING, b"", client=0xABCDEF, session=0, request=1)
    assert len(frame) == HEADER_SIZE
    assert struct.unpack_from("<I", frame, 48)[0] == HEADER_SIZE
    assert frame[60] == Command.REQUEST
    assert frame[176] == Operation.NON_REPLICATED
    assert struct.unpack_from("<I", frame, 196)[0] == 1
    assert struct.unpack_from("<Q", frame, 168)[0] == 1
    assert int.from_bytes(frame[128:144], "little") == 0xABCDEF
    assert frame[144:160] == bytes(16)  # reads are not checksum-stamped
    assert bytes(frame[:48]) == bytes(48)


def test_register_frame_forces_session_and_request_to_zero_and_stamps_the_body() -> None:
    body = b"\x00\x2c\x00\x00login"
    frame = build_request_frame(CommandCode.LOGIN_REGISTER, body, client=5, session=9, request=9)
    header = RequestHeader.unpack_from(frame)
    assert header.operation is Operation.REGISTER
    assert (header.session, header.request, header.code) == (0, 0, 0)
    assert header.request_checksum == xxhash.xxh3_64_intdigest(body)


def test_logout_checksum_is_xxh3_of_the_empty_body() -> None:
    # docs/protocol.md 1.1: XXH3-64 of zero bytes.
    assert request_checksum(b"") == 0x2D06800538D394C2
    frame = build_request_frame(CommandCode.LOGOUT_USER, b"", client=5, session=3, request=4)
    assert RequestHeader.unpack_from(frame).request_checksum == 0x2D06800538D394C2


def test_send_frame_is_not_checksum_stamped() -> None:
    frame = build_request_frame(
        CommandCode.SEND_MESSAGES, b"x" * 300, client=5, session=3, request=4
    )
    header = RequestHeader.unpack_from(frame)
    assert header.operation is Operation.SEND_MESSAGES
    assert header.request_checksum == 0
    assert header.code == 0


def test_reply_frame_echoes_the_request() -> None:
    request = RequestHeader.unpack_from(
        build_request_frame(CommandCode.CREATE_STREAM, b"\x02s1", client=77, session=5, request=6)
    )
    reply = decode_frame(build_reply_frame(request, b"\x00" * 4, op=12, commit=12, replica=2))
    header = reply.reply_header()
    assert (header.client, header.request, header.operation) == (77, 6, Operation.CREATE_STREAM)
    assert header.request_checksum == request.request_checksum
    assert (header.op, header.commit, header.replica, header.status) == (12, 12, 2, 0)
    assert bytes(reply.body) == b"\x00" * 4


@SETTINGS
@given(
    st.sampled_from(sorted(COMMANDS)),
    U128.filter(bool),
    U64,
    U64,
    U64,
    st.integers(0, 0xFFFF_FFFF),
    st.integers(0, 0xFFFF_FFFF),
    st.integers(0, 0xFF),
    st.binary(max_size=64),
)
def test_reply_frame_header_is_the_reply_header_encoding(
    code: CommandCode,
    client: int,
    request_number: int,
    timestamp: int,
    op: int,
    status: int,
    view: int,
    replica: int,
    body: bytes,
) -> None:
    """The reply header packed at once holds exactly the fields a ``ReplyHeader`` built
    from the request would."""
    request = RequestHeader.unpack_from(
        build_request_frame(
            code, b"body", client=client, session=1, request=request_number, timestamp=timestamp
        )
    )
    body = b"" if status else body
    frame = build_reply_frame(
        request, body, status=status, op=op, commit=op, view=view, replica=replica
    )
    expected = ReplyHeader(
        size=HEADER_SIZE + len(body),
        client=request.client,
        request=request.request,
        operation=request.operation,
        status=status,
        op=op,
        commit=op,
        timestamp=request.timestamp,
        request_checksum=request.request_checksum,
        view=view,
        replica=replica,
    ).pack()
    assert bytes(frame) == expected + body
    parts = build_reply_frame_parts(request, [body], op=op, commit=op, view=view, replica=replica)
    if not status:
        assert bytes(parts[0]) == expected


def test_reply_frame_parts_concatenate_to_the_same_frame() -> None:
    request = RequestHeader.unpack_from(
        build_request_frame(CommandCode.POLL_MESSAGES, b"q", client=3, session=1, request=1)
    )
    body_parts: list[Buffer] = [b"abc", memoryview(b"defg"), bytearray(b"h")]
    parts = build_reply_frame_parts(request, body_parts, op=0)
    assert parts[1:] == body_parts
    assert bytes(b"".join(parts)) == bytes(build_reply_frame(request, b"abcdefgh"))


def test_eviction_frame_is_header_only_with_reason_at_byte_255() -> None:
    frame = build_eviction_frame(
        9,
        EvictionReason.INCOMPATIBLE_PROTOCOL,
        server_protocol_version=0x3003,
        server_protocol_version_min=0x3000,
    )
    assert len(frame) == HEADER_SIZE
    assert frame[60] == Command.EVICTION
    assert frame[255] == EvictionReason.INCOMPATIBLE_PROTOCOL
    assert struct.unpack_from("<II", frame, 144) == (0x3003, 0x3000)
    assert decode_frame(frame).eviction_header().client == 9


# -- memory follows the bytes received ----------------------------------------------------


def _traced_peak(action: Callable[[], object]) -> int:
    """Peak bytes Python allocated while ``action`` ran (``tracemalloc``)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        action()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_header_declaring_the_largest_frame_holds_only_the_bytes_received() -> None:
    decoder = FrameDecoder()
    header = _header_with(FRAME_SIZE_MAX)
    body = b"\x01" * 10_000

    def feed() -> None:
        decoder.feed(header)
        decoder.feed(body)

    peak = _traced_peak(feed)
    assert decoder.next_frame() is NEED_MORE_BYTES
    assert decoder.pending_bytes == HEADER_SIZE + len(body)
    # Buffers for what arrived (and a little slack), not for the 64 MiB declared.
    assert peak < 2 * (HEADER_SIZE + len(body)) + 4096, peak


def test_a_trickle_of_one_byte_reads_costs_bytes_not_an_object_per_read() -> None:
    decoder = FrameDecoder()
    decoder.feed(_header_with(FRAME_SIZE_MAX))
    received = 200_000
    one = b"\x02"

    def trickle() -> None:
        for _ in range(received):
            decoder.feed(one)

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        trickle()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert decoder.pending_bytes == HEADER_SIZE + received
    assert held < received * 1.25 + CHUNK_COALESCE_BYTES, held


LARGE_BODY = bytes(range(256)) * 1200  # 300 KiB: several coalesce units


@pytest.mark.parametrize("piece", [1000, CHUNK_COALESCE_BYTES - 1, 100_000, 256 * 1024])
@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_large_frame_in_pieces_comes_out_whole_and_owns_its_bytes(
    piece: int, kind: Callable[[bytearray], Buffer]
) -> None:
    frame_bytes = bytes(
        build_request_frame(CommandCode.SEND_MESSAGES, LARGE_BODY, client=3, session=1, request=2)
    )
    # Two frames back to back, so pieces straddle a frame boundary.
    stream = frame_bytes + frame_bytes
    decoder = FrameDecoder()
    fed: list[Buffer] = []
    received: list[Frame] = []
    for start in range(0, len(stream), piece):
        chunk = kind(bytearray(stream[start : start + piece]))
        fed.append(chunk)
        decoder.feed(chunk)
        received.extend(_drain(decoder))
    for chunk in fed:  # the transport reuses its buffers: the frames must not change
        if not isinstance(chunk, bytes):
            memoryview(chunk)[:] = b"\xee" * len(chunk)
    assert [bytes(frame.data) for frame in received] == [frame_bytes, frame_bytes]
    assert all(isinstance(frame.data.obj, bytearray) for frame in received)
    assert decoder.pending_bytes == 0


# -- holding a frame at its header ---------------------------------------------------------


def _size_of(header: memoryview) -> int:
    return int(struct.unpack_from("<I", header, 48)[0])


def _held(decoder: FrameDecoder) -> bytes | None:
    """``held_header`` read afresh (mypy would keep an earlier comparison's narrowing)."""
    return decoder.held_header


def test_refused_header_is_held_before_any_body_byte_and_can_be_resumed() -> None:
    frame_bytes = build_request_frame(
        CommandCode.PING, b"body" * 100, client=1, session=0, request=1
    )
    seen: list[int] = []

    def admit(header: memoryview) -> bool:
        seen.append(_size_of(header))
        return False

    decoder = FrameDecoder(admit=admit)
    decoder.feed(frame_bytes + frame_bytes[:10])
    assert seen == [len(frame_bytes)]
    assert decoder.held_header == bytes(frame_bytes[:HEADER_SIZE])
    assert decoder.pending_bytes == HEADER_SIZE  # nothing of the body taken in
    assert decoder.next_frame() is NEED_MORE_BYTES
    with pytest.raises(AssertionError):
        decoder.feed(b"more")  # the caller decides first
    decoder.resume()
    frame = decoder.next_frame()
    assert isinstance(frame, Frame)
    assert bytes(frame.data) == frame_bytes
    assert _held(decoder) is None
    assert (
        decoder.pending_bytes == 10
    )  # the next frame's start, from the bytes after the held header


def test_skipped_frame_never_comes_out_and_framing_continues_after_it() -> None:
    big = build_request_frame(CommandCode.PING, b"x" * 5000, client=1, session=5, request=1)
    small = build_request_frame(CommandCode.PING, b"", client=1, session=0, request=2)
    decoder = FrameDecoder(admit=lambda header: _size_of(header) <= HEADER_SIZE)
    decoder.feed(big[:1000])
    assert decoder.held_header is not None
    decoder.skip()
    assert decoder.pending_bytes == 1000
    decoder.feed(big[1000:] + small)
    out = _drain(decoder)
    assert [bytes(frame.data) for frame in out] == [bytes(small)]
    assert decoder.pending_bytes == 0


@SETTINGS
@given(stream=st.lists(frames(), min_size=1, max_size=5), data=st.data())
def test_held_frames_come_out_resumed_or_not_at_all_when_skipped(
    stream: list[bytes], data: st.DataObject
) -> None:
    joined = b"".join(stream)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(joined)), max_size=6)))
    holds = data.draw(st.lists(st.booleans(), min_size=len(stream), max_size=len(stream)))
    skips = data.draw(st.lists(st.booleans(), min_size=len(stream), max_size=len(stream)))
    asked = iter(range(len(stream)))
    held: list[int] = []

    def admit(header: memoryview) -> bool:
        index = next(asked)
        if holds[index]:
            held.append(index)
            return False
        return True

    decoder = FrameDecoder(admit=admit)
    received: list[bytes] = []
    start = 0
    for cut in [*cuts, len(joined)]:
        decoder.feed(joined[start:cut])
        start = cut
        received.extend(bytes(frame.data) for frame in _drain(decoder))
        while decoder.held_header is not None:
            index = held[-1]
            assert decoder.held_header == stream[index][:HEADER_SIZE]
            if skips[index]:
                decoder.skip()
            else:
                decoder.resume()
            received.extend(bytes(frame.data) for frame in _drain(decoder))
    expected = [raw for i, raw in enumerate(stream) if not (holds[i] and skips[i])]
    assert received == expected
    assert decoder.pending_bytes == 0
