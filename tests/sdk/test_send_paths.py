"""What a send puts on the wire, by the kind of messages handed over: ``Message`` values,
plain payloads, the zero-copy ``send_payloads``; and that each is retried byte for byte."""

from __future__ import annotations

import random

import pytest

from sdk._protocol import ClientCore, ExchangeTimedOut, Step
from sdk.types import Message
from sdk.wire import (
    BatchMessage,
    CommandCode,
    SendConfirmation,
    SendMessages,
    SendMessagesReply,
    read_batch,
    verify_batch,
)
from tests.sdk.script import Scripted, Sent, Trace, drive, make_core, ok, send_partition

NOW_US = 1_700_000_000_000_000  # make_core's wall clock


def confirmed(sent: Sent) -> bytes:
    return ok(sent, SendMessagesReply((SendConfirmation(1, 0, send_partition(sent), 0),)))


def sent_messages(core: ClientCore, step: Step[list[SendConfirmation]]) -> list[BatchMessage]:
    trace = Trace()
    drive(core, step, Scripted({CommandCode.SEND_MESSAGES: confirmed}), trace=trace)
    payload = trace.sent[-1].payload
    assert isinstance(payload, SendMessages)
    return read_batch(payload.batch)[1]


def test_messages_keep_their_ids_timestamps_and_headers_and_get_the_rest() -> None:
    core, _ = make_core()
    batch: list[Message | bytes | str] = [
        Message(b"a"),
        Message(b"b", id=5, origin_timestamp=NOW_US - 10),
        "c",
        b"d",
        Message(b"e", headers={"k": "v"}),
    ]
    got = sent_messages(core, core.send_messages(1, 0, batch, 0))
    assert [bytes(m.payload) for m in got] == [b"a", b"b", b"c", b"d", b"e"]
    assert got[1].id == 5 and all(m.id != 0 for m in got)
    assert len({m.id for m in got}) == 5
    assert [m.origin_timestamp for m in got] == [NOW_US, NOW_US - 10, NOW_US, NOW_US, NOW_US]
    assert bytes(got[4].user_headers) == Message(b"e", headers={"k": "v"}).encoded_headers()
    assert all(bytes(m.user_headers) == b"" for m in got[:4])


def test_plain_payloads_and_messages_without_ids_get_the_same_ids_from_the_same_seed() -> None:
    # Packed minting (every id missing) and per-id minting (some given) draw alike.
    payloads = [b"x" * 10] * 3
    first, _ = make_core(seed=9)
    second, _ = make_core(seed=9)
    third, _ = make_core(seed=9)
    plain = sent_messages(first, first.send_messages(1, 0, payloads, 0))
    values = sent_messages(second, second.send_messages(1, 0, [Message(p) for p in payloads], 0))
    mixed = sent_messages(
        third,
        third.send_messages(
            1, 0, [Message(b"x" * 10), Message(b"x" * 10), Message(b"x" * 10, id=3)], 0
        ),
    )
    assert [m.id for m in plain] == [m.id for m in values]
    assert [m.id for m in mixed][:2] == [m.id for m in plain][:2]
    assert mixed[2].id == 3


def test_a_zero_id_in_the_draw_is_drawn_again() -> None:
    class ZeroFirst(random.Random):
        def __init__(self) -> None:
            super().__init__(3)
            self.wide_draws = 0

        def getrandbits(self, k: int, /) -> int:
            if k > 128 and self.wide_draws == 0:
                self.wide_draws += 1
                return 1 << 128  # first id 0, second id 1
            return super().getrandbits(k)

    core, _ = make_core()
    core._rng = ZeroFirst()
    got = sent_messages(core, core.send_payloads(1, 0, [b"a", b"b"], 0))
    assert got[0].id != 0 and got[1].id == 1


def test_send_payloads_sends_views_and_bytearrays_with_the_ids_and_timestamp_given() -> None:
    core, _ = make_core()
    backing = bytearray(b"0123456789")
    payloads: list[bytes | bytearray | memoryview] = [
        memoryview(backing)[0:4],
        bytearray(b"abcd"),
        b"wxyz",
    ]
    got = sent_messages(
        core, core.send_payloads(1, 0, payloads, 0, ids=[7, 0, 9], origin_timestamp=123)
    )
    assert [bytes(m.payload) for m in got] == [b"0123", b"abcd", b"wxyz"]
    assert got[0].id == 7 and got[1].id not in (0, 7, 9) and got[2].id == 9
    assert {m.origin_timestamp for m in got} == {123}
    backing[0:4] = b"----"  # the call copied the payload; the SDK keeps no view
    assert bytes(got[0].payload) == b"0123"


def test_send_payloads_stamps_the_wall_clock_and_mints_every_id_by_default() -> None:
    core, _ = make_core()
    got = sent_messages(core, core.send_payloads(1, 0, [b"p"] * 40, 0))
    assert {m.origin_timestamp for m in got} == {NOW_US}
    assert len({m.id for m in got}) == 40 and 0 not in {m.id for m in got}


def test_send_payloads_refuses_what_it_cannot_send_before_any_exchange() -> None:
    core, _ = make_core()
    for step, match in (
        (core.send_payloads(1, 0, [], 0), "at least one"),
        (core.send_payloads(1, 0, [b"a", b"b"], 0, ids=[1]), "ids"),
        (core.send_payloads(1, 0, [b"a"], 0, ids=[1 << 128]), "128 bits"),
        (core.send_payloads(1, 0, [b"a"], 0, ids=[-1]), "128 bits"),
        (core.send_payloads(1, 0, [b"a"], 0, origin_timestamp=-1), "negative"),
    ):
        trace = Trace()
        with pytest.raises(ValueError, match=match):
            drive(core, step, Scripted(), trace=trace)
        assert trace.sent == []


def test_a_timed_out_send_payloads_is_resent_byte_identical_under_the_same_number() -> None:
    core, clock = make_core()
    attempts: list[Sent] = []

    def send(sent: Sent) -> bytes | ExchangeTimedOut:
        attempts.append(sent)
        if len(attempts) < 3:
            return ExchangeTimedOut(sent.address)
        return confirmed(sent)

    payloads = [memoryview(b"payload-%d" % i) for i in range(30)]
    result = drive(
        core,
        core.send_payloads(1, 0, payloads, 0),
        Scripted({CommandCode.SEND_MESSAGES: send}),
        clock=clock,
    )
    assert result == [SendConfirmation(1, 0, 0, 0)]
    assert len(attempts) == 3
    assert len({a.frame for a in attempts}) == 1
    assert len({a.header.request for a in attempts}) == 1


def test_a_second_send_of_the_same_shape_is_built_into_the_first_ones_frame() -> None:
    core, _ = make_core()
    script = Scripted({CommandCode.SEND_MESSAGES: confirmed})

    def send(step: Step[list[SendConfirmation]]) -> list[tuple[int, bytes]]:
        trace = Trace()
        drive(core, step, script, trace=trace)
        payload = trace.sent[-1].payload
        assert isinstance(payload, SendMessages)
        verify_batch(payload.batch)  # both checksum levels, as the frame went out
        return [(m.id, bytes(m.payload)) for m in read_batch(payload.batch)[1]]

    first = send(core.send_messages(1, 0, [b"a" * 10] * 4, 0))
    spare = core._spare_frame
    assert spare is not None
    second = send(core.send_payloads(1, 0, [b"b" * 10] * 4, 0))
    assert core._spare_frame is spare  # rewritten, not replaced
    assert [p for _, p in first] == [b"a" * 10] * 4
    assert [p for _, p in second] == [b"b" * 10] * 4
    assert not {i for i, _ in first} & {i for i, _ in second}
    # A send of another shape gets a frame of its own.
    send(core.send_messages(1, 0, [b"c" * 11] * 4, 0))
    assert core._spare_frame is not spare
