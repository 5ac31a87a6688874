"""Iggy's per-message limits, checked by the server at admission (not only by SDKs):
payloads up to 64,000,000 bytes, user-header blocks up to 100,000 bytes, and header
blocks that decode. What a batch that breaks one gets is Iggy's code."""

from __future__ import annotations

import pytest

from sdk import wire
from sdk.wire import IggyErrorCode, ProtocolError
from sdk.wire.batch import MAX_PAYLOAD_BYTES
from sdk.wire.primitives import MAX_USER_HEADERS_BYTES


def _batch(*messages: wire.OutgoingMessage) -> bytearray:
    return wire.build_batch(list(messages))


def test_a_payload_above_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the limit lowered for the test (SDKs refuse to build such a batch)."""
    at_limit = _batch(wire.OutgoingMessage(1, bytes(1_000)))
    above = _batch(wire.OutgoingMessage(1, bytes(1_001)))
    uniform = _batch(*(wire.OutgoingMessage(i + 1, bytes(1_001)) for i in range(40)))
    monkeypatch.setattr("sdk.wire.batch.MAX_PAYLOAD_BYTES", 1_000)
    wire.verify_batch(at_limit)
    for batch in (above, uniform):
        with pytest.raises(ProtocolError) as refused:
            wire.verify_batch(batch)
        assert refused.value.code is IggyErrorCode.TOO_BIG_MESSAGE_PAYLOAD


def test_the_limits_are_iggys() -> None:
    assert MAX_PAYLOAD_BYTES == 64_000_000 and MAX_USER_HEADERS_BYTES == 100_000


def test_a_user_header_block_above_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the limit lowered for the test (SDKs refuse to build such a batch)."""
    block = wire.encode_user_headers([wire.UserHeader.of("key", "v" * 200)])
    batch = _batch(wire.OutgoingMessage(1, b"p", block))
    monkeypatch.setattr("sdk.wire.batch.MAX_USER_HEADERS_BYTES", len(block) - 1)
    with pytest.raises(ProtocolError) as refused:
        wire.verify_batch(batch)
    assert refused.value.code is IggyErrorCode.TOO_BIG_USER_HEADERS


@pytest.mark.parametrize("count", [1, 40])  # the walk, and batches of uniform frames
def test_a_user_header_block_that_does_not_decode_is_refused(count: int) -> None:
    block = b"\xff" + (1).to_bytes(4, "little") + b"x"  # a field of unknown kind 255
    messages = [wire.OutgoingMessage(i + 1, b"p", block) for i in range(count)]
    with pytest.raises(ProtocolError) as refused:
        wire.verify_batch(_batch(*messages))
    assert refused.value.code is IggyErrorCode.INVALID_HEADER_KIND


def test_well_formed_user_headers_are_taken_in_uniform_batches_too() -> None:
    block = wire.encode_user_headers([wire.UserHeader.of("key", "value")])
    messages = [wire.OutgoingMessage(i + 1, b"payload", block) for i in range(40)]
    verified = wire.verify_batch(_batch(*messages))
    assert verified.header.message_count == 40
