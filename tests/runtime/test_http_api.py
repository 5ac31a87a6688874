"""The HTTP API's pure parts: tokens, request numbers, routing, error mapping and JSON."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
import trio
from pydantic import SecretStr

from broker.core.connections import ConnectionContext, Response
from broker.runtime.config import Config
from broker.runtime.http_api import (
    ApiError,
    ApiRequest,
    HttpApi,
    Router,
    Sessions,
    next_request,
    permissions_from_json,
    permissions_json,
    refusal,
    user_headers_from_json,
    user_headers_json,
)
from broker.runtime.http_tokens import TokenError, TokenIssuer, derive_key, token_key
from sdk import wire

KEY = derive_key("unit-test token secret")


def test_a_token_verifies_with_its_key_until_it_expires() -> None:
    issuer = TokenIssuer(KEY, expiry_s=60)
    token, expiry = issuer.issue(user_id=3, client_id=(1 << 127) + 5, session=42, now_s=1000)
    assert expiry == 1060
    claims = issuer.verify(token, now_s=1059)
    assert (claims.user_id, claims.client_id, claims.session) == (3, (1 << 127) + 5, 42)
    with pytest.raises(TokenError, match="expired"):
        issuer.verify(token, now_s=1060)
    with pytest.raises(TokenError):
        TokenIssuer(derive_key("another secret"), 60).verify(token, now_s=1000)


def test_a_token_with_tampered_or_missing_claims_is_refused() -> None:
    issuer = TokenIssuer(KEY, expiry_s=60)
    token, _ = issuer.issue(user_id=1, client_id=7, session=9, now_s=1000)
    header, _payload, signature = token.split(".")
    tampered = jwt.encode({"uid": 0, "cid": "7", "sid": 9, "sub": "0", "exp": 2000}, b"k" * 32)
    with pytest.raises(TokenError):
        issuer.verify(f"{header}.{tampered.split('.')[1]}.{signature}", now_s=1000)
    missing = jwt.encode({"uid": 1, "sub": "1", "exp": 2000, "cid": "7"}, KEY)
    with pytest.raises(TokenError):
        issuer.verify(missing, now_s=1000)
    zero_client = jwt.encode({"uid": 1, "sub": "1", "exp": 2000, "cid": "0", "sid": 9}, KEY)
    with pytest.raises(TokenError, match="range"):
        issuer.verify(zero_client, now_s=1000)
    with pytest.raises(TokenError):
        issuer.verify("not-a-token", now_s=1000)


def test_the_token_key_derives_from_the_cluster_secret_unless_its_own_is_set() -> None:
    secret = SecretStr("a cluster secret of enough length")
    one = Config(cluster_secret=secret)
    two = Config(cluster_secret=secret, replica=0)
    assert token_key(one) == token_key(two) == derive_key(secret.get_secret_value())
    assert token_key(one) != secret.get_secret_value().encode()
    own = Config(cluster_secret=secret, http_token_secret=SecretStr("its own token secret"))
    assert token_key(own) == derive_key("its own token secret")
    assert token_key(Config()) != token_key(Config())  # drawn at start


def test_request_numbers_rise_and_follow_the_clock() -> None:
    session = Sessions().get(7, 9, "a")
    assert next_request(session, now_us=100) == 100
    assert next_request(session, now_us=100) == 101  # same microsecond: still rises
    assert next_request(session, now_us=50) == 102  # the clock went back: still rises
    assert next_request(session, now_us=500) == 500
    # The session's context waits for the register that opened it (op 9).
    assert session.context.must_see(0) == 9
    assert session.context.bound_session == 9 and session.context.client_id == 7


def test_sessions_forget_the_least_recently_used_idle_one_beyond_their_bound() -> None:
    sessions = Sessions(kept_max=2)
    first = sessions.get(1, 1, "a")
    sessions.get(2, 2, "a")
    sessions.get(1, 1, "a")  # used again: now the most recent
    sessions.get(3, 3, "a")
    assert len(sessions) == 2
    assert sessions.get(1, 1, "a") is first


def test_the_router_matches_paths_and_methods() -> None:
    async def handler(api: HttpApi, request: ApiRequest) -> Any:
        raise AssertionError

    router = Router()
    router.add("GET", "/streams/{stream_id}/topics/{topic_id}", handler)
    _route, params = router.match("GET", "/streams/a%20b/topics/7/")
    assert params == {"stream_id": "a b", "topic_id": "7"}
    with pytest.raises(ApiError) as wrong_method:
        router.match("DELETE", "/streams/s/topics/t")
    assert wrong_method.value.status == 405
    with pytest.raises(ApiError) as unknown:
        router.match("GET", "/streams/s/topics/t/other")
    assert unknown.value.status == 404


@pytest.mark.parametrize(
    ("code", "status"),
    [(1009, 404), (2011, 404), (3021, 404), (40, 401), (41, 403), (58, 503), (1012, 400)],
)
def test_a_binary_error_code_maps_to_iggys_status(code: int, status: int) -> None:
    answer = refusal(code).response()
    assert answer.status == status
    assert answer.body["id"] == code
    assert (b"retry-after", b"1") in answer.headers if status == 503 else not answer.headers


def test_permissions_round_trip_through_iggys_json() -> None:
    permissions = wire.Permissions(
        wire.GlobalPermissions(True, False, True, False, True, False, True, False, True, False),
        (
            wire.StreamPermissions(
                3,
                True,
                True,
                False,
                False,
                True,
                True,
                (wire.TopicPermissions(1, True, False, True, False),),
            ),
            wire.StreamPermissions(5, False, True, False, True, False, True, ()),
        ),
    )
    as_json = permissions_json(permissions)
    assert as_json is not None
    assert as_json["streams"]["3"]["topics"]["1"]["manage_topic"] is True
    assert as_json["streams"]["5"]["topics"] is None
    assert permissions_from_json(as_json) == permissions
    assert permissions_from_json(None) is None and permissions_json(None) is None
    with pytest.raises(ApiError):
        permissions_from_json({"streams": {"not a number": {}}})


def test_user_headers_round_trip_through_iggys_json() -> None:
    block = wire.encode_user_headers(
        [
            wire.UserHeader(wire.HeaderKind.STRING, b"k", wire.HeaderKind.UINT32, b"\x01\0\0\0"),
            wire.UserHeader(wire.HeaderKind.RAW, b"r", wire.HeaderKind.BOOL, b"\x01"),
        ]
    )
    entries = user_headers_json(block)
    assert isinstance(entries, list)
    assert entries[0]["key"] == {"kind": "string", "value": "aw=="}
    assert user_headers_from_json(entries) == block
    assert user_headers_json(b"") == []
    with pytest.raises(ApiError):
        user_headers_from_json([{"key": {"kind": "nonsense", "value": ""}}])


class _FakeNode:
    """Answers every frame with a canned reply, and records what it was given."""

    def __init__(self, reply: bytes = b"", status: int = 0) -> None:
        self.config = Config()
        self.frames: list[tuple[ConnectionContext, wire.RequestHeader]] = []
        self._reply = reply
        self._status = status

    async def handle(self, context: ConnectionContext, frame: wire.Frame) -> Response:
        header = frame.request_header()
        self.frames.append((context, header))
        reply = wire.build_reply_frame(header, self._reply, status=self._status)
        return Response([reply])

    def cluster_metadata(self) -> wire.ClusterMetadata:
        raise AssertionError


def _api(node: _FakeNode) -> tuple[HttpApi, str]:
    tokens = TokenIssuer(KEY, expiry_s=60)
    token, _ = tokens.issue(user_id=1, client_id=77, session=5, now_s=int(time.time()))
    return HttpApi(node, tokens), token


def _request(method: str, path: str, token: str | None, body: bytes = b"") -> ApiRequest:
    authorization = None if token is None else f"Bearer {token}"
    return ApiRequest(method, path, {}, body, "127.0.0.1:1", authorization)


def test_a_request_runs_as_the_binary_command_in_the_tokens_session() -> None:
    streams = wire.Streams(())
    node = _FakeNode(streams.encode())
    api, token = _api(node)

    async def scenario() -> Any:
        first = await api.answer(_request("GET", "/streams", token))
        second = await api.answer(_request("GET", "/streams", token))
        return first, second

    first, second = trio.run(scenario)
    assert first.status == second.status == 200 and first.body == []
    (context_1, header_1), (context_2, header_2) = node.frames
    assert header_1.code == wire.CommandCode.GET_STREAMS
    assert (header_1.client, header_1.session) == (77, 5)
    assert context_1 is context_2  # one context per session: read-your-writes
    assert header_2.request > header_1.request


def test_refusals_and_bad_input_never_reach_the_node() -> None:
    node = _FakeNode(status=int(wire.IggyErrorCode.STREAM_NAME_ALREADY_EXISTS))
    api, token = _api(node)

    async def scenario() -> list[Any]:
        return [
            await api.answer(_request("GET", "/streams", None)),
            await api.answer(_request("POST", "/streams", None, b"{oops")),
            await api.answer(_request("GET", "/streams", "Bearer-less")),
            await api.answer(_request("POST", "/streams", token, b"{oops")),
            await api.answer(_request("POST", "/streams", token, b'{"name": 1}')),
            await api.answer(_request("POST", "/streams", token, b'{"name": "s"}')),
        ]

    answers = trio.run(scenario)
    # Without a token the body is never looked at: 401, not 400.
    assert [a.status for a in answers] == [401, 401, 401, 400, 400, 400]
    assert answers[-1].body["id"] == 1012
    assert len(node.frames) == 1  # only the well-formed create reached the node


def test_the_http_address_defaults_to_port_3000_and_empty_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VIEWSTREAM_HTTP_ADDRESS", raising=False)
    assert Config().http_address == "127.0.0.1:3000"
    assert Config(http_address="").http_address == ""
    monkeypatch.setenv("VIEWSTREAM_HTTP_ADDRESS", "127.0.0.1:3100")
    assert Config().http_address == "127.0.0.1:3100"
    with pytest.raises(ValueError, match="HOST:PORT"):
        Config(http_address="nowhere")
    with pytest.raises(ValueError, match="http_addresses lists 2 nodes"):
        Config(http_addresses=["127.0.0.1:1", "127.0.0.1:2"])
    with pytest.raises(ValueError, match="http_token_secret"):
        Config(http_token_secret=SecretStr("short"))
