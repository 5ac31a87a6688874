"""The node's own client (``broker.core.system``): numbering, registering, the retry rule."""

from __future__ import annotations

from broker.core.groups import Refused, Replied, SessionLost
from broker.core.identity import internal_checksum, register_checksum
from broker.core.sessions import SYSTEM_USER_ID
from broker.core.system import ATTEMPTS_MAX, SystemClient
from broker.state.codec import decode_command
from broker.state.metadata import Register
from consensus.events import ClientError
from sdk.wire import IggyErrorCode


def _replied(op: int) -> Replied:
    return Replied(op=op, commit=op, view=0, body=b"")


def test_the_register_opens_a_session_of_no_user() -> None:
    client = SystemClient(client_id=77)
    call = client.register()
    assert (call.client_id, call.session, call.request) == (77, 0, 0)
    assert call.checksum == register_checksum(SYSTEM_USER_ID)
    command = decode_command(call.operation, call.body)
    assert command == Register(77, SYSTEM_USER_ID)
    assert not client.registered(Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
    assert client.session == 0
    assert client.registered(_replied(12)) and client.session == 12


def test_request_numbers_grow_past_the_last_and_the_clock() -> None:
    client = SystemClient(client_id=77, session=12)
    first = client.call(9, b"a", now_us=1_000)
    second = client.call(9, b"a", now_us=10)  # the clock went back: the number does not
    third = client.call(9, b"b", now_us=5_000)
    assert [first.request, second.request, third.request] == [1_000, 1_001, 5_000]
    assert first.session == 12 and first.checksum == internal_checksum(b"a")


def test_a_lost_session_is_registered_again_once_then_the_outcome_stands() -> None:
    client = SystemClient(client_id=77, session=12)
    lost = SessionLost(ClientError.NO_SESSION)
    assert ATTEMPTS_MAX == 2
    assert not client.answered(lost, attempt=1) and client.session == 0
    client.registered(_replied(30))
    assert client.answered(lost, attempt=2) and client.session == 0  # final, and forgotten
    client.registered(_replied(31))
    assert client.answered(_replied(40), attempt=1) and client.session == 31
    refused = Refused(IggyErrorCode.TRANSIENT_NOT_COMMITTED)
    assert client.answered(refused, attempt=1) and client.session == 31
