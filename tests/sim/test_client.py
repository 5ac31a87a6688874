"""The simulated client's session: what it takes for the loss of its session, and what not.

A client repeats the login that opened its session on a connection that refused it as not
logged in (40), beside its outstanding request; the answer to that repeat says whether the
session still lives, and the client must act on it, since it answers no request of its own.
"""

from __future__ import annotations

import random

import pytest

from sdk.wire.codes import CommandCode
from sim.client import TRANSIENT, Client, Kind, Pending, Role
from sim.network import ClientReply, ClientRequest
from sim.options import Options

CLIENT_ID = 77
SESSION = 40
LOGIN_REQUEST = 9
PENDING_REQUEST = 12


class _Reporter:
    def __init__(self) -> None:
        self.abandoned: list[Pending] = []

    def on_reply(self, client: Client, pending: Pending, reply: ClientReply) -> None: ...

    def on_abandoned(self, client: Client, pending: Pending) -> None:
        self.abandoned.append(pending)


def _logged_in() -> tuple[Client, _Reporter, Pending]:
    """A consumer logged in under ``LOGIN_REQUEST`` (session ``SESSION``) with an offset
    store outstanding."""
    reporter = _Reporter()
    client = Client(
        0, 1000, CLIENT_ID, Role.CONSUMER, Options.from_seed(0), random.Random(0), reporter
    )
    client.session = SESSION
    client.login = ClientRequest(CLIENT_ID, 0, LOGIN_REQUEST, CommandCode.LOGIN_REGISTER, b"")
    client.step = 7
    client.request_next = PENDING_REQUEST + 1
    request = ClientRequest(
        CLIENT_ID, SESSION, PENDING_REQUEST, CommandCode.STORE_CONSUMER_OFFSET, b""
    )
    pending = Pending(Kind.STORE_OFFSET, (0, 0), request, 0)
    client.pending = pending
    return client, reporter, pending


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (ClientReply(CLIENT_ID, LOGIN_REQUEST, 0, 0, b"", "session_evicted"), "told so"),
        (ClientReply(CLIENT_ID, LOGIN_REQUEST, SESSION + 9, 0, b"\0" * 8), "a new session"),
    ],
)
def test_a_repeated_login_that_finds_the_session_gone_abandons_and_logs_in_again(
    reply: ClientReply, why: str
) -> None:
    client, reporter, pending = _logged_in()
    client.on_reply(100, 1, reply)
    assert reporter.abandoned == [pending], why
    assert client.pending is None and client.abandoned == 1
    assert (client.session, client.login, client.step) == (0, None, 3)  # log in again


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (ClientReply(CLIENT_ID, LOGIN_REQUEST, SESSION, 0, b"\0" * 8), "the same session"),
        (ClientReply(CLIENT_ID, LOGIN_REQUEST, 0, TRANSIENT, b""), "refused for now"),
        (ClientReply(CLIENT_ID, LOGIN_REQUEST - 1, 0, 0, b"", "session_evicted"), "older"),
    ],
)
def test_a_repeated_login_that_finds_the_session_alive_keeps_the_request(
    reply: ClientReply, why: str
) -> None:
    client, reporter, pending = _logged_in()
    client.on_reply(100, 1, reply)
    assert reporter.abandoned == [] and client.pending is pending, why
    assert client.session == SESSION and client.login is not None


def test_a_session_error_to_the_outstanding_request_abandons_it_and_logs_in_again() -> None:
    client, reporter, pending = _logged_in()
    client.on_reply(100, 1, ClientReply(CLIENT_ID, PENDING_REQUEST, 0, 0, b"", "no_session"))
    assert reporter.abandoned == [pending] and client.pending is None
    assert (client.session, client.login, client.step) == (0, None, 3)
