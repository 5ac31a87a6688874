"""verify_batch's fast path: the same verdict as the plain per-message walk, always.

``verify_batch`` proves batches of uniform frames valid in bulk, and leaves every other
batch and every rejection to the walk. These tests hold it to a verbatim copy of the
walk-only implementation it replaced: for any input both return equal ``VerifiedBatch``
values, or both raise ``ProtocolError`` with the same code and reason.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from typing import Final

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk.wire import Buffer, IggyErrorCode, ProtocolError
from sdk.wire.batch import (
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    MAX_PAYLOAD_BYTES,
    MESSAGE_HEADER_SIZE,
    BatchHeader,
    OutgoingMessage,
    VerifiedBatch,
    batch_checksum,
    build_batch,
    verify_batch,
)
from sdk.wire.primitives import (
    MAX_USER_HEADERS_BYTES,
    UserHeader,
    decode_user_headers,
    encode_user_headers,
)

# --- The implementation before the fast paths, copied verbatim but for the names. ---

_REFERENCE_MESSAGE_CHECK: Final = struct.Struct("<Q16xIIIIQ")
_REFERENCE_RESERVED_ZERO: Final = bytes(BATCH_HEADER_SIZE - 52)


def _reference_check_header(view: memoryview) -> BatchHeader:
    if len(view) < BATCH_HEADER_SIZE:
        raise ProtocolError(f"batch of {len(view)} bytes cannot hold its header")
    if view[52:BATCH_HEADER_SIZE] != _REFERENCE_RESERVED_ZERO:
        raise ProtocolError(
            "batch header reserved bytes are not zero", IggyErrorCode.INVALID_RESERVED_FIELD
        )
    header = BatchHeader(*BATCH_HEADER.unpack_from(view, 0))
    if header.batch_length < BATCH_HEADER_SIZE:
        raise ProtocolError(f"batch length {header.batch_length} below the header size")
    if header.message_count > (header.batch_length - BATCH_HEADER_SIZE) // MESSAGE_HEADER_SIZE:
        raise ProtocolError(
            f"{header.message_count} messages cannot fit {header.batch_length} bytes",
            IggyErrorCode.INVALID_MESSAGES_COUNT,
        )
    return header


def _reference_verify_batch(batch: Buffer, *, first_offset_delta: int | None = 0) -> VerifiedBatch:
    view = memoryview(batch)  # as_byte_view, inlined
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    header = _reference_check_header(view)
    size = len(view)
    if header.batch_length != size:
        raise ProtocolError(f"batch length {header.batch_length} but {size} bytes given")
    count = header.message_count
    if count == 0:
        raise ProtocolError("empty batch", IggyErrorCode.INVALID_MESSAGES_COUNT)
    unpack = _REFERENCE_MESSAGE_CHECK.unpack_from
    digest = xxhash.xxh3_64_intdigest
    checksums = [0] * count
    position = BATCH_HEADER_SIZE
    expected_delta = first_offset_delta
    for index in range(count):
        if size - position < MESSAGE_HEADER_SIZE:
            raise ProtocolError(f"message {index} header truncated")
        checksum, offset_delta, _, headers_size, payload_size, reserved = unpack(view, position)
        end = position + MESSAGE_HEADER_SIZE + payload_size + headers_size
        if end > size:
            raise ProtocolError(
                f"message {index} runs past the batch", IggyErrorCode.INVALID_MESSAGE_PAYLOAD_LENGTH
            )
        if reserved:
            raise ProtocolError(
                f"message {index} reserved bytes are not zero",
                IggyErrorCode.INVALID_RESERVED_FIELD,
            )
        if payload_size > MAX_PAYLOAD_BYTES:
            raise ProtocolError("payload", IggyErrorCode.TOO_BIG_MESSAGE_PAYLOAD)
        if headers_size > MAX_USER_HEADERS_BYTES:
            raise ProtocolError("user headers", IggyErrorCode.TOO_BIG_USER_HEADERS)
        if headers_size:
            decode_user_headers(view[end - headers_size : end])
        if expected_delta is None:
            expected_delta = offset_delta
        elif offset_delta != expected_delta:
            raise ProtocolError(
                f"message {index} has offset delta {offset_delta}, expected {expected_delta}",
                IggyErrorCode.INVALID_OFFSET,
            )
        if digest(view[position + 8 : end]) != checksum:
            raise ProtocolError(
                f"message {index} checksum mismatch", IggyErrorCode.INVALID_MESSAGE_CHECKSUM
            )
        checksums[index] = checksum
        expected_delta += 1
        position = end
    if position != size:
        raise ProtocolError(
            f"{size - position} bytes after the last message",
            IggyErrorCode.INVALID_MESSAGES_COUNT,
        )
    packed = struct.pack(f"<{count}Q", *checksums)
    if batch_checksum(view, packed) != header.batch_checksum:
        raise ProtocolError("batch checksum mismatch", IggyErrorCode.INVALID_BATCH_CHECKSUM)
    return VerifiedBatch(header, packed)


# --- Comparison. ---

Outcome = VerifiedBatch | tuple[IggyErrorCode, str]
Verify = Callable[..., VerifiedBatch]
Fault = Callable[[bytearray, int], None]


def _outcome(verify: Verify, batch: Buffer, first_offset_delta: int | None) -> Outcome:
    """The batch verified, or the code and reason of the refusal."""
    try:
        verified = verify(batch, first_offset_delta=first_offset_delta)
    except ProtocolError as refused:
        assert type(refused) is ProtocolError
        assert refused.eviction is None
        return refused.code, refused.reason
    return verified


def _assert_same_verdict(batch: Buffer, first_offset_delta: int | None) -> Outcome:
    expected = _outcome(_reference_verify_batch, batch, first_offset_delta)
    assert _outcome(verify_batch, batch, first_offset_delta) == expected
    return expected


# --- Batches. ---

# Counts around the fast paths' thresholds (16 messages; chunks of 1, 2, 4 ... 64).
COUNTS: Final = st.one_of(
    st.integers(1, 20),
    st.sampled_from([15, 16, 17, 63, 64, 65, 127, 128, 129]),
    st.integers(16, 200),
)
# Frame bodies around the copy threshold (2048-byte frames, so 2000-byte bodies).
BODIES: Final = st.one_of(
    st.integers(0, 40), st.integers(0, 3000), st.sampled_from([1999, 2000, 2001])
)


_HEADER_MIN: Final = 12  # one string header "k": two fields of kind, u32 length, data
_HEADER_MAX: Final = 11 + 255  # its value at the longest a field may be


def valid_headers(rng: random.Random, size: int) -> bytes:
    """A well-formed user-header block of exactly ``size`` bytes (0 or at least 12)."""
    assert size == 0 or size >= _HEADER_MIN
    headers = []
    remaining = size
    while remaining:
        take = min(remaining, _HEADER_MAX)
        if 0 < remaining - take < _HEADER_MIN:
            take = remaining - _HEADER_MIN
        value = "".join(rng.choice("abcxyz") for _ in range(take - 11))
        headers.append(UserHeader.of("k", value))
        remaining -= take
    block = encode_user_headers(headers)
    assert len(block) == size
    return block


@st.composite
def batches(draw: st.DrawFn) -> bytearray:
    """A valid batch: uniform frames (one split or many), or frames of random sizes."""
    count = draw(COUNTS)
    shape = draw(st.sampled_from(["uniform", "uniform", "uniform-split", "random"]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    body = draw(BODIES)
    if count * body > 200_000:
        body = 200_000 // count
    messages = []
    for index in range(count):
        if shape == "uniform":
            headers_size = body // 4
        elif shape == "uniform-split":
            headers_size = rng.randint(0, body)
        else:
            headers_size = rng.choice((0, 12, 40))
        if headers_size < _HEADER_MIN:
            headers_size = 0  # no well-formed block is that short
        payload_size = body - headers_size if shape != "random" else rng.randint(0, body)
        messages.append(
            OutgoingMessage(
                rng.getrandbits(128),
                rng.randbytes(payload_size),
                valid_headers(rng, headers_size),
                1_700_000_000_000_000 + index * rng.randint(0, 1000),
            )
        )
    return build_batch(messages)


def _frames(batch: bytearray) -> list[int]:
    """Where the frames of ``batch`` start, following their declared lengths while they
    stay inside the buffer."""
    starts = []
    position = BATCH_HEADER_SIZE
    while len(batch) - position >= MESSAGE_HEADER_SIZE:
        starts.append(position)
        headers_size, payload_size = struct.unpack_from("<II", batch, position + 32)
        position += MESSAGE_HEADER_SIZE + headers_size + payload_size
    return starts


def _reseal(batch: bytearray) -> None:
    """Recompute every checksum a corruption broke, so it is the corruption itself, not a
    checksum, that verification meets first."""
    checksums = b""
    for start in _frames(batch):
        headers_size, payload_size = struct.unpack_from("<II", batch, start + 32)
        end = start + MESSAGE_HEADER_SIZE + headers_size + payload_size
        if end <= len(batch):
            digest = xxhash.xxh3_64_intdigest(bytes(batch[start + 8 : end]))
            struct.pack_into("<Q", batch, start, digest)
        checksums += bytes(batch[start : start + 8])
    if len(batch) >= 52:
        fields = bytes(batch[0:40]) + bytes(batch[48:52])
        struct.pack_into("<Q", batch, 40, xxhash.xxh3_64_intdigest(fields + checksums))


# Message header fields a corruption may set: (offset in the header, struct format).
MESSAGE_FIELDS: Final = [(24, "<I"), (28, "<I"), (32, "<I"), (36, "<I"), (40, "<Q"), (44, "<B")]
# Batch header fields: batch_length, message_count, a reserved byte.
BATCH_FIELDS: Final = [(32, "<Q"), (48, "<I"), (52, "<B"), (255, "<B")]


@st.composite
def corrupted(draw: st.DrawFn) -> bytearray:
    """A valid batch after one to three corruptions, checksums resealed or not."""
    batch = draw(batches())
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(
            st.sampled_from(
                ["flip", "message-field", "batch-field", "truncate", "extend", "deltas"]
            )
        )
        if kind == "flip" and batch:
            batch[draw(st.integers(0, len(batch) - 1))] ^= draw(st.integers(1, 255))
        elif kind == "message-field" and _frames(batch):
            start = draw(st.sampled_from(_frames(batch)))
            offset, form = draw(st.sampled_from(MESSAGE_FIELDS))
            old = struct.unpack_from(form, batch, start + offset)[0]
            limit = 2 ** (8 * struct.calcsize(form)) - 1
            new = draw(st.one_of(st.integers(0, limit), st.sampled_from([old - 1, old + 1])))
            struct.pack_into(form, batch, start + offset, min(max(new, 0), limit))
        elif kind == "batch-field" and len(batch) >= BATCH_HEADER_SIZE:
            offset, form = draw(st.sampled_from(BATCH_FIELDS))
            old = struct.unpack_from(form, batch, offset)[0]
            limit = 2 ** (8 * struct.calcsize(form)) - 1
            new = draw(st.one_of(st.integers(0, limit), st.integers(old - 3, old + 3)))
            struct.pack_into(form, batch, offset, min(max(new, 0), limit))
        elif kind == "truncate":
            del batch[draw(st.integers(0, len(batch))) :]
        elif kind == "extend":
            batch += draw(st.binary(min_size=1, max_size=100))
            if len(batch) >= BATCH_HEADER_SIZE and draw(st.booleans()):
                struct.pack_into("<Q", batch, 32, len(batch))
        elif kind == "deltas":
            first = draw(st.integers(0, 2**32 - 1 - len(batch)))
            for index, start in enumerate(_frames(batch)):
                struct.pack_into("<I", batch, start + 24, first + index)
    if draw(st.booleans()):
        _reseal(batch)
    return batch


FIRST_DELTAS: Final = st.one_of(
    st.none(), st.just(0), st.integers(0, 3), st.integers(0, 2**32 - 1), st.integers(-5, -1)
)
SETTINGS: Final = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(
    batch=batches(),
    first_offset_delta=FIRST_DELTAS,
    kind=st.sampled_from([bytearray, bytes, memoryview]),
)
def test_valid_batches_get_the_reference_verdict(
    batch: bytearray, first_offset_delta: int | None, kind: Callable[[bytearray], Buffer]
) -> None:
    verdict = _assert_same_verdict(kind(batch), first_offset_delta)
    if first_offset_delta in (None, 0):
        assert isinstance(verdict, VerifiedBatch)


@SETTINGS
@given(batch=corrupted(), first_offset_delta=FIRST_DELTAS, data=st.data())
def test_corrupted_batches_get_the_reference_verdict(
    batch: bytearray, first_offset_delta: int | None, data: st.DataObject
) -> None:
    _assert_same_verdict(batch, first_offset_delta)
    # The first message's own delta makes a resealed delta shift acceptable again.
    if len(batch) >= BATCH_HEADER_SIZE + MESSAGE_HEADER_SIZE:
        own_first = struct.unpack_from("<I", batch, BATCH_HEADER_SIZE + 24)[0]
        _assert_same_verdict(batch, data.draw(st.sampled_from([own_first, own_first + 1])))


def _uniform_batch(count: int, body: int) -> bytearray:
    rng = random.Random(count * 7919 + body)
    return build_batch(
        [OutgoingMessage(index, rng.randbytes(body), b"", 1000 + index) for index in range(count)]
    )


def _set_reserved(batch: bytearray, start: int) -> None:
    batch[start + 47] = 1


def _set_delta(batch: bytearray, start: int) -> None:
    struct.pack_into("<I", batch, start + 24, 99)


def _flip_payload(batch: bytearray, start: int) -> None:
    batch[start + MESSAGE_HEADER_SIZE] ^= 0x40


def _move_length(batch: bytearray, start: int) -> None:
    # One byte of payload declared as user headers: same frame size, another split.
    headers_size, payload_size = struct.unpack_from("<II", batch, start + 32)
    struct.pack_into("<II", batch, start + 32, headers_size + 1, payload_size - 1)


@pytest.mark.parametrize("body", [100, 2000, 2001, 5000])
@pytest.mark.parametrize("count", [16, 64, 100])
@pytest.mark.parametrize("fault", [_set_reserved, _set_delta, _flip_payload, _move_length])
@pytest.mark.parametrize("where", ["late", "everywhere"])
@pytest.mark.parametrize("reseal", [False, True])
def test_uniform_batches_with_a_fault_get_the_reference_verdict(
    body: int, count: int, fault: Fault, where: str, reseal: bool
) -> None:
    # Faults the bulk path must see in a batch it would otherwise take: in one late
    # message, or in every message alike (so that all frames still look the same).
    batch = _uniform_batch(count, body)
    assert isinstance(_assert_same_verdict(batch, 0), VerifiedBatch)
    frame = MESSAGE_HEADER_SIZE + body
    for index in [count - 2] if where == "late" else range(count):
        fault(batch, BATCH_HEADER_SIZE + index * frame)
    if reseal:
        _reseal(batch)
    _assert_same_verdict(batch, 0)
    _assert_same_verdict(batch, None)


@pytest.mark.parametrize("body", [100, 5000])
@pytest.mark.parametrize("shortfall", [1, 8])
def test_frames_declaring_less_than_their_share_get_the_reference_verdict(
    body: int, shortfall: int
) -> None:
    # Every frame declares the same lengths but too few bytes, and every checksum is
    # sealed over the whole evenly split frame: only the length check tells the bulk
    # path that the walk would find the frames elsewhere.
    count = 32
    batch = _uniform_batch(count, body)
    frame = MESSAGE_HEADER_SIZE + body
    checksums = b""
    for start in range(BATCH_HEADER_SIZE, len(batch), frame):
        struct.pack_into("<I", batch, start + 36, body - shortfall)
        digest = xxhash.xxh3_64_intdigest(bytes(batch[start + 8 : start + frame]))
        struct.pack_into("<Q", batch, start, digest)
        checksums += bytes(batch[start : start + 8])
    fields = bytes(batch[0:40]) + bytes(batch[48:52])
    struct.pack_into("<Q", batch, 40, xxhash.xxh3_64_intdigest(fields + checksums))
    assert not isinstance(_assert_same_verdict(batch, 0), VerifiedBatch)


def _never_called(*_: object) -> None:
    raise AssertionError("a valid batch reached a slower path")


@pytest.mark.parametrize("body", [100, 2000, 5000])
def test_valid_uniform_batches_are_proven_in_bulk(
    body: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The speed contract: the walk does not run for these.
    monkeypatch.setattr("sdk.wire.batch._walk_checksums", _never_called)
    for count in (16, 17, 64, 65, 250):
        verify_batch(_uniform_batch(count, body))
