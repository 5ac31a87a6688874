"""Iggy 0.9's HTTP REST API as an adapter over the node's binary request handling.

Purpose: answer Iggy's HTTP routes (JSON bodies, Iggy's status codes and error body) by
translating each request into the binary command a TCP client would send for it, handing
that frame to the node exactly as a TCP connection does (``Node.handle``, which runs the
node core's ``broker.core.handlers.handle``), and translating the binary reply back into
Iggy's JSON. Permissions, sessions, replication, forwarding to primaries, limits and
error codes are therefore the TCP path's, not a second copy of them.

Invariants:

1. Every route but ``/ping``, the logins and the token refresh needs a valid access
   token (``broker.runtime.http_tokens``); the request then runs in a connection context
   bound to the session the token names, and the node's session check decides as for a
   TCP request (a session that ended answers 401).
2. Requests of one session on this node run one at a time, as on a TCP connection, and
   take request numbers from one counter per session: ``max(last + 1, now in µs)``. The
   clock term keeps numbers rising when the same token is used on another node or after
   a restart, so a request is never taken for a stale one. A retried HTTP request gets a
   new number: it is applied again if the first one was (as in Iggy, HTTP is not
   exactly-once).
3. A binary reply maps to HTTP as Iggy's server maps its errors: not found 404,
   unauthenticated 401, unauthorized 403, transient 503 (with Retry-After), anything else
   400; the body is Iggy's ``{"id", "code", "reason", "field"}``.
4. Bad input (malformed JSON, a wrong type, an unknown strategy, base64 that does not
   decode) is answered 400 before any frame is built; nothing here raises into the
   transport except a bug.
5. The route table is data (``Router.add``): one more route (``GET /metrics``) is one
   more line, with ``public=True`` when it needs no token.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import secrets
import struct
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl, unquote

import trio

from broker.core.connections import ConnectionContext, Response
from broker.core.reconcile import METADATA_GROUP
from broker.runtime.config import Config
from broker.runtime.http_tokens import TokenClaims, TokenError, TokenIssuer
from sdk import wire
from sdk.wire import (
    CommandCode,
    Frame,
    IggyErrorCode,
    ProtocolError,
    ServerRejected,
    SessionEvicted,
)

log = logging.getLogger("viewstream.http")

SESSIONS_KEPT_MAX: Final = 4096
"""Sessions whose request counter and turn this node keeps; the least recently used
idle one is forgotten beyond it (a forgotten counter restarts from the clock)."""
SDK_NAME: Final = "viewstream-http"
"""The SDK name an HTTP login registers with (what GET_ME/GET_CLIENTS show)."""
SDK_VERSION_UNKNOWN: Final = "unknown"
"""The SDK version a login without ``version`` registers with (a name of 1..255 bytes)."""
RETRY_AFTER_S: Final = "1"
EXPIRY_CHECK_INTERVAL_S: Final = 1.0
"""How often the node ends the sessions whose access tokens it issued and that expired."""
EXPIRIES_KEPT_MAX: Final = 8192
"""Sessions whose token expiry this node watches; beyond it the oldest is no longer
watched (its session then ends by logout or by the per-user session bound)."""

_NOT_FOUND_CODES: Final = frozenset(
    {
        20,  # ResourceNotFound
        int(IggyErrorCode.CLIENT_NOT_FOUND),
        int(IggyErrorCode.STREAM_ID_NOT_FOUND),
        int(IggyErrorCode.STREAM_NAME_NOT_FOUND),
        int(IggyErrorCode.TOPIC_ID_NOT_FOUND),
        int(IggyErrorCode.TOPIC_NAME_NOT_FOUND),
        int(IggyErrorCode.PARTITION_NOT_FOUND),
        int(IggyErrorCode.SEGMENT_NOT_FOUND),
        int(IggyErrorCode.CONSUMER_OFFSET_NOT_FOUND),
        int(IggyErrorCode.CONSUMER_GROUP_ID_NOT_FOUND),
        int(IggyErrorCode.CONSUMER_GROUP_NAME_NOT_FOUND),
        int(IggyErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND),
    }
)
_UNAUTHENTICATED_CODES: Final = frozenset(
    {
        int(IggyErrorCode.UNAUTHENTICATED),
        int(IggyErrorCode.INVALID_CREDENTIALS),
        int(IggyErrorCode.INVALID_PERSONAL_ACCESS_TOKEN),
        int(IggyErrorCode.PERSONAL_ACCESS_TOKEN_EXPIRED),
    }
)
_TRANSIENT_CODES: Final = frozenset(
    {int(IggyErrorCode.TRANSIENT_NOT_ACCEPTED), int(IggyErrorCode.TRANSIENT_NOT_COMMITTED)}
)
_COMPRESSION: Final = {1: "none", 2: "gzip"}


def _code_name(code: int) -> str:
    try:
        return IggyErrorCode(code).name.lower()
    except ValueError:
        return "resource_not_found" if code == 20 else "error"


# -- requests and answers ------------------------------------------------------------------


@dataclass(slots=True)
class ApiResponse:
    """An answer: status, body (JSON-able; ``str`` is sent as plain text, ``bytes`` as
    they are; None: no body) and extra headers."""

    status: int
    body: Any = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    media: bytes = b"application/octet-stream"
    """The content type of a ``bytes`` body (sent as it is)."""

    @property
    def content_type(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.media
        return b"text/plain; charset=utf-8" if isinstance(self.body, str) else b"application/json"

    def encode(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body, separators=(",", ":")).encode()


class ApiError(Exception):
    """An answer refusing the request, in Iggy's error body (invariant 3)."""

    def __init__(self, status: int, code: int, name: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.code = code
        self.name = name
        self.reason = reason

    def response(self) -> ApiResponse:
        body = {"id": self.code, "code": self.name, "reason": self.reason, "field": None}
        headers = [(b"retry-after", RETRY_AFTER_S.encode())] if self.status == 503 else []
        return ApiResponse(self.status, body, headers)


def bad_request(reason: str, code: int = int(IggyErrorCode.INVALID_FORMAT)) -> ApiError:
    return ApiError(400, code, _code_name(code), reason)


def unauthenticated(reason: str) -> ApiError:
    return ApiError(401, int(IggyErrorCode.UNAUTHENTICATED), "unauthenticated", reason)


def not_found(reason: str = "resource not found") -> ApiError:
    return ApiError(404, 20, "resource_not_found", reason)


def refusal(code: int) -> ApiError:
    """The HTTP answer to a binary reply's error ``code`` (invariant 3)."""
    if code in _NOT_FOUND_CODES:
        status = 404
    elif code in _UNAUTHENTICATED_CODES:
        status = 401
    elif code == IggyErrorCode.UNAUTHORIZED:
        status = 403
    elif code in _TRANSIENT_CODES:
        status = 503
    else:
        status = 400
    return ApiError(status, code, _code_name(code), f"refused with error {code}")


@dataclass(slots=True)
class ApiRequest:
    """One HTTP request as a route sees it."""

    method: str
    path: str
    query: dict[str, str]
    body: bytes
    address: str
    authorization: str | None
    params: dict[str, str] = field(default_factory=dict)
    claims: TokenClaims | None = None
    """The verified token, once a route that needs one checked it."""
    authenticated: bool = False
    """A valid token came with the request, or the request logged in: its connection
    no longer counts as one that has not logged in (``broker.runtime.http``)."""

    def json(self) -> dict[str, Any]:
        """The body as a JSON object (400 otherwise)."""
        try:
            value = json.loads(self.body or b"null")
        except (ValueError, UnicodeDecodeError) as error:
            raise bad_request(f"the body is not JSON: {error}") from None
        if not isinstance(value, dict):
            raise bad_request("the body must be a JSON object")
        return value


# -- the node as this adapter sees it -------------------------------------------------------


class ApiNode(Protocol):
    """What the HTTP API needs of its node."""

    config: Config

    async def handle(self, context: ConnectionContext, frame: Frame) -> Response: ...

    def cluster_metadata(self) -> wire.ClusterMetadata: ...


@dataclass(slots=True)
class _Session:
    """One session as this node serves it over HTTP: its turn, its request counter and
    its connection context, which keeps what the session was answered with here, so a
    read sees the session's own earlier writes (read-your-writes, per session and node,
    as per TCP connection)."""

    context: ConnectionContext
    turn: trio.Lock = field(default_factory=trio.Lock)
    request: int = 0


class Sessions:
    """The request counters and turns of the sessions used over HTTP here (invariant 2)."""

    def __init__(self, kept_max: int = SESSIONS_KEPT_MAX) -> None:
        self._kept_max = kept_max
        self._sessions: OrderedDict[tuple[int, int], _Session] = OrderedDict()

    def get(self, client_id: int, session: int, address: str) -> _Session:
        key = (client_id, session)
        found = self._sessions.get(key)
        if found is None:
            context = ConnectionContext(address, client_id=client_id, bound_session=session)
            # The register that opened the session is op ``session`` of the metadata
            # group: a node that has not applied it yet waits for it rather than refuse.
            context.saw(METADATA_GROUP, session)
            found = self._sessions[key] = _Session(context)
            self._trim()
        self._sessions.move_to_end(key)
        return found

    def forget(self, client_id: int, session: int) -> None:
        self._sessions.pop((client_id, session), None)

    def _trim(self) -> None:
        while len(self._sessions) > self._kept_max:
            for key, entry in self._sessions.items():
                if not entry.turn.locked():
                    del self._sessions[key]
                    break
            else:
                return  # every kept session is busy: keep them all for now

    def __len__(self) -> int:
        return len(self._sessions)


def next_request(session: _Session, now_us: int) -> int:
    """The session's next request number (invariant 2)."""
    session.request = max(session.request + 1, now_us)
    return session.request


Handler = Callable[["HttpApi", ApiRequest], Awaitable[ApiResponse]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    public: bool


class Router:
    """Routes by method and path; ``{name}`` segments become ``ApiRequest.params``. A
    route that is not ``public`` is answered 401 without a valid token before its handler
    runs."""

    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(self, method: str, path: str, handler: Handler, *, public: bool = False) -> None:
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path.rstrip("/") or "/")
        self.routes.append(Route(method, re.compile(f"^{regex}/?$"), handler, public))

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        """The route of ``method`` at ``path``.

        Raises:
            ApiError: no such path (404) or not that method there (405).
        """
        allowed = False
        for route in self.routes:
            found = route.pattern.match(path)
            if found is None:
                continue
            if route.method == method:
                return route, {k: unquote(v) for k, v in found.groupdict().items()}
            allowed = True
        if allowed:
            raise ApiError(405, 3, "invalid_command", f"{method} is not served at {path}")
        raise not_found(f"no route {path}")


# -- the API ------------------------------------------------------------------------------------


class HttpApi:
    """Iggy's HTTP routes over ``node`` (see the module docstring).

    Args:
        node: The node whose request handling answers.
        tokens: Issues and checks access tokens.
    """

    def __init__(
        self,
        node: ApiNode,
        tokens: TokenIssuer,
        end_session: Callable[[int], Awaitable[object]] | None = None,
        metrics: Callable[[], tuple[bytes, str]] | None = None,
    ) -> None:
        self.node = node
        self.tokens = tokens
        self.metrics = metrics
        """Renders ``GET /metrics`` (body, content type); None: the route answers 404."""
        self.sessions = Sessions()
        self.router = default_router()
        self._end_session = end_session
        self.expiries: dict[int, int] = {}
        """Session -> expiry (unix s) of the latest token issued or refreshed here for it."""

    async def expire_sessions(self) -> None:
        """Forever: end each session whose token, issued or refreshed here, expired
        (through the node's system client, as when a TCP connection closes)."""
        while True:
            await trio.sleep(EXPIRY_CHECK_INTERVAL_S)
            now = int(time.time())
            due = sorted(s for s, expiry in self.expiries.items() if expiry <= now)
            for session in due:
                del self.expiries[session]
                if self._end_session is not None:
                    await self._end_session(session)

    def watch_expiry(self, session: int, expiry: int) -> None:
        self.expiries.pop(session, None)
        self.expiries[session] = expiry
        while len(self.expiries) > EXPIRIES_KEPT_MAX:
            del self.expiries[next(iter(self.expiries))]

    async def answer(self, request: ApiRequest) -> ApiResponse:
        """The answer to one request; never raises for bad input (invariant 4)."""
        try:
            route, params = self.router.match(request.method, request.path)
            request.params = params
            if not route.public:
                request.claims = self.claims(request)  # before the body is looked at
            return await route.handler(self, request)
        except ApiError as error:
            return error.response()

    # -- running a command through the node -------------------------------------------------

    def claims(self, request: ApiRequest) -> TokenClaims:
        """The request's verified token (401 without a valid one)."""
        if request.claims is not None:
            return request.claims
        header = request.authorization
        if header is None:
            raise unauthenticated("no access token (Authorization: Bearer ...)")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthenticated("the Authorization header is not a bearer token")
        try:
            claims = self.tokens.verify(token.strip(), int(time.time()))
        except TokenError as error:
            raise unauthenticated(error.reason) from None
        request.authenticated = True
        return claims

    async def call(
        self, request: ApiRequest, code: CommandCode, body: wire.Buffer
    ) -> wire.ReplyPayload | None:
        """Run command ``code`` with ``body`` in the session of the request's token."""
        claims = self.claims(request)
        session = self.sessions.get(claims.client_id, claims.session, request.address)
        async with session.turn:
            number = next_request(session, time.time_ns() // 1000)
            frame = wire.build_request_frame(
                code, body, client=claims.client_id, session=claims.session, request=number
            )
            reply = await self._run(session.context, frame)
        try:
            return wire.read_reply(code, reply)
        except SessionEvicted as evicted:
            self.sessions.forget(claims.client_id, claims.session)
            raise unauthenticated(f"the session ended ({evicted.reason.name})") from None
        except ServerRejected as rejected:
            raise refusal(rejected.code) from None

    async def _run(self, context: ConnectionContext, frame: bytes | bytearray) -> Frame:
        request_frame = wire.decode_frame(frame, self.node.config.limits.frame_size_bytes_max)
        response = await self.node.handle(context, request_frame)
        data = b"".join(bytes(part) for part in response.parts)
        try:
            return wire.decode_frame(data)
        except ProtocolError as error:  # pragma: no cover - the node answers frames
            raise AssertionError(f"the node answered a malformed frame: {error}") from None

    async def login(self, request: ApiRequest, code: CommandCode, body: bytes) -> ApiResponse:
        """Open a session with a login frame and answer with a token naming it."""
        client_id = secrets.randbits(128) | 1
        context = ConnectionContext(request.address)
        frame = wire.build_request_frame(code, body, client=client_id, session=0, request=0)
        reply = await self._run(context, frame)
        try:
            payload = wire.read_reply(code, reply)
        except SessionEvicted as evicted:
            raise ApiError(
                401,
                int(IggyErrorCode.INVALID_CREDENTIALS),
                "invalid_credentials",
                f"login refused ({evicted.reason.name})",
            ) from None
        except ServerRejected as rejected:
            raise refusal(rejected.code) from None
        if not isinstance(payload, wire.LoginRegisterReply):
            raise ApiError(
                401, int(IggyErrorCode.INVALID_CREDENTIALS), "invalid_credentials", "login refused"
            )
        request.authenticated = True
        return self.identity(payload.user_id, client_id, payload.session)

    def identity(self, user_id: int, client_id: int, session: int) -> ApiResponse:
        token, expiry = self.tokens.issue(user_id, client_id, session, int(time.time()))
        self.watch_expiry(session, expiry)
        body = {"user_id": user_id, "access_token": {"token": token, "expiry": expiry}}
        return ApiResponse(200, body)


# -- JSON helpers ---------------------------------------------------------------------------


def identifier(text: str) -> wire.Identifier:
    """A path or query identifier: numeric if it is a u32 in decimal, else a name."""
    if text.isdigit() and int(text) < 1 << 32:
        return wire.Identifier.numeric(int(text))
    if not text or len(text.encode()) > 255:
        raise bad_request(f"invalid identifier {text!r}", int(IggyErrorCode.INVALID_IDENTIFIER))
    return wire.Identifier.named(text)


def _field(data: Mapping[str, Any], name: str, kind: type, default: Any = ...) -> Any:
    value = data.get(name, default)
    if value is ...:
        raise bad_request(f"missing field {name!r}")
    if value is None and default is None:
        return None
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise bad_request(f"field {name!r} must be an integer")
    if kind is str and not isinstance(value, str):
        raise bad_request(f"field {name!r} must be a string")
    if kind is bool and not isinstance(value, bool):
        raise bad_request(f"field {name!r} must be true or false")
    if kind is int and not 0 <= value < 1 << 64:
        raise bad_request(f"field {name!r} is out of range")
    return value


def _query_int(query: Mapping[str, str], name: str, default: int | None) -> int | None:
    text = query.get(name)
    if text is None or text == "":
        return default
    if not text.isdigit() or int(text) >= 1 << 64:
        raise bad_request(f"query parameter {name!r} must be an unsigned integer")
    return int(text)


def _query_bool(query: Mapping[str, str], name: str) -> bool:
    text = query.get(name, "false").lower()
    if text not in {"true", "false", "1", "0", ""}:
        raise bad_request(f"query parameter {name!r} must be true or false")
    return text in {"true", "1"}


def _b64decode(text: Any, what: str) -> bytes:
    if not isinstance(text, str):
        raise bad_request(f"{what} must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request(f"{what} is not valid base64") from None


def _b64(data: wire.Buffer) -> str:
    return base64.b64encode(bytes(data)).decode()


def _options(data: Mapping[str, Any]) -> tuple[wire.OptionEntry, ...]:
    raw = data.get("options") or {}
    if not isinstance(raw, dict):
        raise bad_request("field 'options' must be an object of strings")
    entries = []
    for key in sorted(raw):
        value = raw[key]
        if not isinstance(value, str):
            raise bad_request(f"option {key!r} must be a string")
        entries.append(wire.OptionEntry.of(key, value, wire.HeaderKind.STRING))
    return tuple(entries)


def stream_json(info: wire.StreamInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "created_at": info.created_at,
        "name": info.name,
        "size": info.size_bytes,
        "messages_count": info.messages_count,
        "topics_count": info.topics_count,
    }


def topic_json(info: wire.TopicInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "created_at": info.created_at,
        "name": info.name,
        "size": info.size_bytes,
        "message_expiry": info.message_expiry,
        "compression_algorithm": _COMPRESSION.get(info.compression_algorithm, "none"),
        "max_topic_size": info.max_topic_size,
        "messages_count": info.messages_count,
        "partitions_count": info.partitions_count,
    }


def partition_json(info: wire.PartitionInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "created_at": info.created_at,
        "segments_count": info.segments_count,
        "current_offset": info.current_offset,
        "size": info.size_bytes,
        "messages_count": info.messages_count,
    }


def group_json(info: wire.ConsumerGroupInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "name": info.name,
        "partitions_count": info.partitions_count,
        "members_count": info.members_count,
    }


def header_field_json(kind: wire.HeaderKind, value: bytes) -> dict[str, Any]:
    return {"kind": kind.name.lower(), "value": _b64(value)}


def user_headers_json(block: wire.Buffer) -> list[dict[str, Any]] | str:
    """Iggy's JSON of a message's user headers: entries, or base64 of what does not parse."""
    if not len(block):
        return []
    try:
        headers = wire.decode_user_headers(block)
    except ProtocolError:
        return _b64(block)
    return [
        {
            "key": header_field_json(header.key_kind, header.key),
            "value": header_field_json(header.value_kind, header.value),
        }
        for header in headers
    ]


def user_headers_from_json(value: Any) -> bytes:
    """The wire block of a message's ``user_headers`` (entries or base64 of the block)."""
    if value is None:
        return b""
    if isinstance(value, str):
        return _b64decode(value, "user_headers")
    if not isinstance(value, list):
        raise bad_request("user_headers must be a list of entries or a base64 string")
    headers = []
    for entry in value:
        if not isinstance(entry, dict):
            raise bad_request("a user header must be an object with key and value")
        parts = []
        for side in ("key", "value"):
            item = entry.get(side)
            if not isinstance(item, dict):
                raise bad_request(f"a user header's {side} must be an object")
            kind_text = item.get("kind")
            try:
                kind = wire.HeaderKind[str(kind_text).upper()]
            except KeyError:
                raise bad_request(f"unknown header kind {kind_text!r}") from None
            parts.append((kind, _b64decode(item.get("value"), f"a user header's {side}")))
        (key_kind, key), (value_kind, raw) = parts
        headers.append(wire.UserHeader(key_kind, key, value_kind, raw))
    try:
        return wire.encode_user_headers(headers)
    except ValueError as error:
        raise bad_request(str(error), int(IggyErrorCode.TOO_BIG_USER_HEADERS)) from None


def _partitioning(data: Any) -> wire.Partitioning:
    if data is None:
        return wire.Balanced()
    if not isinstance(data, dict):
        raise bad_request("partitioning must be an object")
    kind = data.get("kind", "balanced")
    value = _b64decode(data.get("value", ""), "partitioning.value")
    if kind == "balanced":
        return wire.Balanced()
    if kind == "partition_id":
        if len(value) != 4:
            raise bad_request("partition_id partitioning carries 4 bytes")
        return wire.PartitionId(int.from_bytes(value, "little"))
    if kind == "messages_key":
        if not 1 <= len(value) <= 255:
            raise bad_request(
                "a messages key is 1 to 255 bytes", int(IggyErrorCode.INVALID_KEY_VALUE_LENGTH)
            )
        return wire.MessagesKey(value)
    raise bad_request(f"unknown partitioning kind {kind!r}")


_POLLING_KINDS: Final = {kind.name.lower(): kind for kind in wire.PollingKind}


def _polled_message(message: Any) -> dict[str, Any]:
    payload = bytes(message.payload)
    headers = bytes(message.user_headers)
    return {
        "header": {
            "checksum": message.checksum,
            "id": message.id,
            "offset": message.offset,
            "timestamp": message.timestamp,
            "origin_timestamp": message.origin_timestamp,
            "user_headers_length": len(headers),
            "payload_length": len(payload),
            "reserved": 0,
        },
        "payload": _b64(payload),
        "user_headers": user_headers_json(headers),
    }


# -- the routes -----------------------------------------------------------------------------


async def ping(api: HttpApi, request: ApiRequest) -> ApiResponse:
    del api, request
    return ApiResponse(200, "pong")


async def get_metrics(api: HttpApi, request: ApiRequest) -> ApiResponse:
    """Prometheus' scrape, public as in Iggy (its JWT check skips ``/metrics``)."""
    del request
    if api.metrics is None:
        return ApiResponse(404)
    body, content_type = api.metrics()
    return ApiResponse(200, body, media=content_type.encode())


def _version(data: Mapping[str, Any]) -> str:
    """The client's version as a login names it (Iggy's optional ``version``)."""
    version = data.get("version")
    return version if isinstance(version, str) and version else SDK_VERSION_UNKNOWN


async def login_user(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    payload = wire.LoginRegister(
        username=_field(data, "username", str),
        password=_field(data, "password", str),
        sdk_name=SDK_NAME,
        sdk_version=_version(data),
        protocol_version=wire.PROTOCOL_VERSION,
        context=str(data.get("context") or ""),
    )
    try:
        body = payload.encode()
    except (ValueError, ProtocolError) as error:
        code = int(IggyErrorCode.INVALID_CREDENTIALS)
        raise bad_request(f"invalid login: {error}", code) from None
    return await api.login(request, CommandCode.LOGIN_REGISTER, body)


async def login_with_token(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    payload = wire.LoginRegisterWithPat(
        token=_field(data, "token", str),
        sdk_name=SDK_NAME,
        sdk_version=_version(data),
        protocol_version=wire.PROTOCOL_VERSION,
        context="",
    )
    try:
        body = payload.encode()
    except (ValueError, ProtocolError) as error:
        raise bad_request(f"invalid token login: {error}") from None
    return await api.login(request, CommandCode.LOGIN_REGISTER_WITH_PAT, body)


async def refresh_token(api: HttpApi, request: ApiRequest) -> ApiResponse:
    """A new token for the session of a valid one (the old one stays valid until it
    expires, as in Iggy 0.9's stateless refresh)."""
    data = request.json()
    token = _field(data, "token", str)
    try:
        claims = api.tokens.verify(token, int(time.time()))
    except TokenError as error:
        raise unauthenticated(error.reason) from None
    # The session must still live: a GET_ME in it says so, through the node's check.
    probe = ApiRequest("GET", "/", {}, b"", request.address, f"Bearer {token}")
    await api.call(probe, CommandCode.GET_ME, b"")
    return api.identity(claims.user_id, claims.client_id, claims.session)


async def logout_user(api: HttpApi, request: ApiRequest) -> ApiResponse:
    claims = api.claims(request)
    await api.call(request, CommandCode.LOGOUT_USER, b"")
    api.sessions.forget(claims.client_id, claims.session)
    api.expiries.pop(claims.session, None)
    return ApiResponse(204)


async def get_stats(api: HttpApi, request: ApiRequest) -> ApiResponse:
    stats = await api.call(request, CommandCode.GET_STATS, b"")
    assert isinstance(stats, wire.Stats)
    body = {
        "process_id": stats.process_id,
        "cpu_usage": stats.cpu_usage,
        "total_cpu_usage": stats.total_cpu_usage,
        "memory_usage": stats.memory_usage,
        "total_memory": stats.total_memory,
        "available_memory": stats.available_memory,
        "run_time": stats.run_time,
        "start_time": stats.start_time,
        "read_bytes": stats.read_bytes,
        "written_bytes": stats.written_bytes,
        "messages_size_bytes": stats.messages_size_bytes,
        "streams_count": stats.streams_count,
        "topics_count": stats.topics_count,
        "partitions_count": stats.partitions_count,
        "segments_count": stats.segments_count,
        "messages_count": stats.messages_count,
        "clients_count": stats.clients_count,
        "consumer_groups_count": stats.consumer_groups_count,
        "hostname": stats.hostname,
        "os_name": stats.os_name,
        "os_version": stats.os_version,
        "kernel_version": stats.kernel_version,
        "iggy_server_version": stats.iggy_server_version,
        "iggy_server_semver": stats.iggy_server_semver,
        "cache_metrics": {},
        "threads_count": stats.threads_count,
        "free_disk_space": stats.free_disk_space,
        "total_disk_space": stats.total_disk_space,
    }
    return ApiResponse(200, body)


async def get_cluster_metadata(api: HttpApi, request: ApiRequest) -> ApiResponse:
    metadata = await api.call(request, CommandCode.GET_CLUSTER_METADATA, b"")
    assert isinstance(metadata, wire.ClusterMetadata)
    nodes = [
        {
            "name": node.name,
            "ip": node.ip,
            "endpoints": {
                "tcp": node.tcp_port,
                "quic": node.quic_port,
                "http": node.http_port,
                "websocket": node.websocket_port,
            },
            "role": node.role.name.lower(),
            "status": node.status.name.lower(),
        }
        for node in metadata.nodes
    ]
    return ApiResponse(200, {"name": metadata.name, "nodes": nodes})


async def get_streams(api: HttpApi, request: ApiRequest) -> ApiResponse:
    streams = await api.call(request, CommandCode.GET_STREAMS, b"")
    assert isinstance(streams, wire.Streams)
    return ApiResponse(200, [stream_json(info) for info in streams.streams])


def _stream_details(details: wire.StreamDetails) -> dict[str, Any]:
    body = stream_json(details.stream)
    body["topics"] = [topic_json(topic) for topic in details.topics]
    return body


async def get_stream(api: HttpApi, request: ApiRequest) -> ApiResponse:
    ref = wire.StreamRef(identifier(request.params["stream_id"]))
    details = await api.call(request, CommandCode.GET_STREAM, ref.encode())
    if details is None:
        raise not_found("stream not found")
    assert isinstance(details, wire.StreamDetails)
    return ApiResponse(200, _stream_details(details))


async def create_stream(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    payload = wire.CreateStream(_field(data, "name", str), _options(data))
    details = await api.call(request, CommandCode.CREATE_STREAM, _encode(payload))
    assert isinstance(details, wire.StreamDetails)
    return ApiResponse(200, _stream_details(details))


async def update_stream(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    stream = identifier(request.params["stream_id"])
    payload = wire.UpdateStream(stream, _field(data, "name", str), _options(data))
    await api.call(request, CommandCode.UPDATE_STREAM, _encode(payload))
    return ApiResponse(204)


async def delete_stream(api: HttpApi, request: ApiRequest) -> ApiResponse:
    ref = wire.StreamRef(identifier(request.params["stream_id"]))
    await api.call(request, CommandCode.DELETE_STREAM, ref.encode())
    return ApiResponse(204)


async def purge_stream(api: HttpApi, request: ApiRequest) -> ApiResponse:
    ref = wire.StreamRef(identifier(request.params["stream_id"]))
    await api.call(request, CommandCode.PURGE_STREAM, ref.encode())
    return ApiResponse(204)


def _topic_ref(request: ApiRequest) -> wire.TopicRef:
    return wire.TopicRef(
        identifier(request.params["stream_id"]), identifier(request.params["topic_id"])
    )


def _topic_details(details: wire.TopicDetails) -> dict[str, Any]:
    body = topic_json(details.topic)
    body["partitions"] = [partition_json(p) for p in details.partitions]
    return body


async def get_topics(api: HttpApi, request: ApiRequest) -> ApiResponse:
    ref = wire.StreamRef(identifier(request.params["stream_id"]))
    topics = await api.call(request, CommandCode.GET_TOPICS, ref.encode())
    if topics is None:
        raise not_found("stream not found")
    assert isinstance(topics, wire.Topics)
    return ApiResponse(200, [topic_json(info) for info in topics.topics])


async def get_topic(api: HttpApi, request: ApiRequest) -> ApiResponse:
    details = await api.call(request, CommandCode.GET_TOPIC, _topic_ref(request).encode())
    if details is None:
        raise not_found("topic not found")
    assert isinstance(details, wire.TopicDetails)
    return ApiResponse(200, _topic_details(details))


def _topic_options(data: Mapping[str, Any], *, create: bool) -> tuple[wire.OptionEntry, ...]:
    """CREATE_TOPIC's / UPDATE_TOPIC's options from Iggy's JSON fields and ``options``."""
    entries = {entry.key: entry for entry in _options(data)}
    compression = data.get("compression_algorithm")
    if compression is not None:
        if not isinstance(compression, str):
            raise bad_request("compression_algorithm must be a string")
        entries["compression_algorithm"] = wire.OptionEntry.of(
            "compression_algorithm", compression.lower(), wire.HeaderKind.STRING
        )
    for name in ("message_expiry", "max_topic_size"):
        value = _field(data, name, int, None)
        if value:  # 0 is Iggy's "server default": the option is not sent
            entries[name] = wire.OptionEntry.of(name, value, wire.HeaderKind.UINT64)
    if create:
        for name in ("durability", "consumer_offset_durability"):
            entries.setdefault(name, wire.OptionEntry.of(name, "replicated"))
    return tuple(entries[key] for key in sorted(entries))


async def create_topic(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    payload = wire.CreateTopic(
        identifier(request.params["stream_id"]),
        _field(data, "partitions_count", int),
        _field(data, "name", str),
        _topic_options(data, create=True),
    )
    details = await api.call(request, CommandCode.CREATE_TOPIC, _encode(payload))
    assert isinstance(details, wire.TopicDetails)
    return ApiResponse(200, _topic_details(details))


async def update_topic(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    ref = _topic_ref(request)
    payload = wire.UpdateTopic(
        ref.stream_id, ref.topic_id, _field(data, "name", str), _topic_options(data, create=False)
    )
    await api.call(request, CommandCode.UPDATE_TOPIC, _encode(payload))
    return ApiResponse(204)


async def delete_topic(api: HttpApi, request: ApiRequest) -> ApiResponse:
    await api.call(request, CommandCode.DELETE_TOPIC, _topic_ref(request).encode())
    return ApiResponse(204)


async def purge_topic(api: HttpApi, request: ApiRequest) -> ApiResponse:
    await api.call(request, CommandCode.PURGE_TOPIC, _topic_ref(request).encode())
    return ApiResponse(204)


async def create_partitions(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    ref = _topic_ref(request)
    payload = wire.PartitionsChange(
        ref.stream_id, ref.topic_id, _field(data, "partitions_count", int)
    )
    await api.call(request, CommandCode.CREATE_PARTITIONS, _encode(payload))
    return ApiResponse(200)


async def delete_partitions(api: HttpApi, request: ApiRequest) -> ApiResponse:
    ref = _topic_ref(request)
    count = _query_int(request.query, "partitions_count", None)
    if count is None:
        raise bad_request("query parameter 'partitions_count' is required")
    payload = wire.PartitionsChange(ref.stream_id, ref.topic_id, count)
    await api.call(request, CommandCode.DELETE_PARTITIONS, _encode(payload))
    return ApiResponse(204)


async def flush_unsaved_buffer(api: HttpApi, request: ApiRequest) -> ApiResponse:
    """Iggy's flush route: FLUSH_UNSAVED_BUFFER through the node's handling, which answers
    it as Iggy 0.9 does over TCP (FeatureUnavailable: messages are written as they
    commit), so HTTP and TCP clients get the same answer."""
    partition = request.params["partition_id"]
    fsync = request.params["fsync"].lower()
    if not partition.isdigit() or int(partition) >= 1 << 32:
        raise bad_request("the partition id must be a u32")
    if fsync not in ("true", "false"):
        raise bad_request("fsync must be true or false")
    body = _topic_ref(request).encode() + _FLUSH_TAIL.pack(int(partition), fsync == "true")
    await api.call(request, CommandCode.FLUSH_UNSAVED_BUFFER, body)
    return ApiResponse(200)


_FLUSH_TAIL: Final = struct.Struct("<IB")  # partition id, fsync flag


async def delete_segments(api: HttpApi, request: ApiRequest) -> ApiResponse:
    ref = _topic_ref(request)
    partition = request.params["partition_id"]
    if not partition.isdigit() or int(partition) >= 1 << 32:
        raise bad_request("the partition id must be a u32")
    count = _query_int(request.query, "segments_count", None)
    if count is None:
        raise bad_request("query parameter 'segments_count' is required")
    payload = wire.DeleteSegments(ref.stream_id, ref.topic_id, int(partition), count)
    await api.call(request, CommandCode.DELETE_SEGMENTS, _encode(payload))
    return ApiResponse(204)


async def send_messages(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    ref = _topic_ref(request)
    partitioning = _partitioning(data.get("partitioning"))
    raw = data.get("messages")
    if not isinstance(raw, list) or not raw:
        code = int(IggyErrorCode.INVALID_MESSAGES_COUNT)
        raise bad_request("messages must be a non-empty list", code)
    messages: list[wire.OutgoingMessage] = []
    for entry in raw:
        if not isinstance(entry, dict):
            raise bad_request("a message must be an object with id and payload")
        message_id = _field(entry, "id", int, 0)
        if not 0 <= message_id < 1 << 128:
            raise bad_request("a message id is a u128")
        payload = _b64decode(entry.get("payload"), "a message payload")
        headers = user_headers_from_json(entry.get("user_headers"))
        messages.append(wire.OutgoingMessage(message_id, payload, headers))
    try:
        body = wire.build_send_messages(ref.stream_id, ref.topic_id, partitioning, messages)
    except (ValueError, ProtocolError) as error:
        code = getattr(error, "code", None) or int(IggyErrorCode.INVALID_FORMAT)
        raise bad_request(f"the messages do not make a batch: {error}", int(code)) from None
    reply = await api.call(request, CommandCode.SEND_MESSAGES, body)
    confirmations: list[dict[str, Any]] = []
    if isinstance(reply, wire.SendMessagesReply):
        confirmations = [
            {
                "stream_id": c.stream_id,
                "topic_id": c.topic_id,
                "partition_id": c.partition_id,
                "base_offset": c.base_offset,
            }
            for c in reply.confirmations
        ]
    return ApiResponse(201, {"confirmations": confirmations})


def _consumer(query: Mapping[str, str]) -> wire.Consumer:
    # Iggy's HTTP consumer is always a single consumer (its kind is not in the query).
    text = query.get("consumer_id") or "0"
    return wire.Consumer(wire.ConsumerKind.CONSUMER, identifier(text))


async def poll_messages(api: HttpApi, request: ApiRequest) -> ApiResponse:
    ref = _topic_ref(request)
    query = request.query
    kind_text = query.get("kind", "offset").lower()
    kind = _POLLING_KINDS.get(kind_text)
    if kind is None:
        raise bad_request(f"unknown polling kind {kind_text!r}")
    partition = _query_int(query, "partition_id", 0)  # Iggy's HTTP default: partition 0
    if partition is not None and partition >= 1 << 32:
        raise bad_request("partition_id is a u32")
    count = _query_int(query, "count", 10)
    assert count is not None
    if count >= 1 << 32:
        raise bad_request("count is a u32")
    payload = wire.PollMessages(
        consumer=_consumer(query),
        stream_id=ref.stream_id,
        topic_id=ref.topic_id,
        partition_id=partition,
        strategy=wire.PollingStrategy(kind, _query_int(query, "value", 0) or 0),
        count=count,
        auto_commit=_query_bool(query, "auto_commit"),
    )
    reply = await api.call(request, CommandCode.POLL_MESSAGES, _encode(payload))
    assert isinstance(reply, wire.PollMessagesReply)
    messages: list[dict[str, Any]] = []
    for record in reply.records:
        _, batch = wire.read_batch(record)
        messages.extend(_polled_message(message) for message in batch)
    body = {
        "partition_id": reply.partition_id,
        "current_offset": reply.current_offset,
        "count": len(messages),
        "messages": messages,
    }
    return ApiResponse(200, body)


async def get_consumer_offset(api: HttpApi, request: ApiRequest) -> ApiResponse:
    ref = _topic_ref(request)
    payload = wire.GetConsumerOffset(
        _consumer(request.query),
        ref.stream_id,
        ref.topic_id,
        _query_int(request.query, "partition_id", None),
    )
    info = await api.call(request, CommandCode.GET_CONSUMER_OFFSET, _encode(payload))
    if info is None:
        raise not_found("consumer offset not found")
    assert isinstance(info, wire.ConsumerOffsetInfo)
    body = {
        "partition_id": info.partition_id,
        "current_offset": info.current_offset,
        "stored_offset": info.stored_offset,
    }
    return ApiResponse(200, body)


async def store_consumer_offset(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    ref = _topic_ref(request)
    consumer_id = data.get("consumer_id", 0)
    payload = wire.StoreConsumerOffset(
        _consumer({"consumer_id": str(consumer_id)}),
        ref.stream_id,
        ref.topic_id,
        _field(data, "partition_id", int, None),
        _field(data, "offset", int),
        wire.AckLevel.QUORUM,
    )
    await api.call(request, CommandCode.STORE_CONSUMER_OFFSET, _encode(payload))
    return ApiResponse(204)


async def delete_consumer_offset(api: HttpApi, request: ApiRequest) -> ApiResponse:
    ref = _topic_ref(request)
    payload = wire.DeleteConsumerOffset(
        _consumer({"consumer_id": request.params["consumer_id"]}),
        ref.stream_id,
        ref.topic_id,
        _query_int(request.query, "partition_id", None),
        wire.AckLevel.QUORUM,
    )
    await api.call(request, CommandCode.DELETE_CONSUMER_OFFSET, _encode(payload))
    return ApiResponse(204)


def _group_details(details: wire.ConsumerGroupDetails) -> dict[str, Any]:
    body = group_json(details.group)
    body["members"] = [
        {
            "id": member.id,
            "partitions_count": len(member.partitions),
            "partitions": list(member.partitions),
        }
        for member in details.members
    ]
    return body


async def get_consumer_groups(api: HttpApi, request: ApiRequest) -> ApiResponse:
    groups = await api.call(request, CommandCode.GET_CONSUMER_GROUPS, _topic_ref(request).encode())
    if groups is None:
        raise not_found("topic not found")
    assert isinstance(groups, wire.ConsumerGroups)
    return ApiResponse(200, [group_json(group) for group in groups.groups])


def _group_ref(request: ApiRequest) -> wire.GroupRef:
    ref = _topic_ref(request)
    return wire.GroupRef(ref.stream_id, ref.topic_id, identifier(request.params["group_id"]))


async def get_consumer_group(api: HttpApi, request: ApiRequest) -> ApiResponse:
    details = await api.call(request, CommandCode.GET_CONSUMER_GROUP, _group_ref(request).encode())
    if details is None:
        raise not_found("consumer group not found")
    assert isinstance(details, wire.ConsumerGroupDetails)
    return ApiResponse(200, _group_details(details))


async def create_consumer_group(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    ref = _topic_ref(request)
    payload = wire.CreateConsumerGroup(ref.stream_id, ref.topic_id, _field(data, "name", str))
    details = await api.call(request, CommandCode.CREATE_CONSUMER_GROUP, _encode(payload))
    assert isinstance(details, wire.ConsumerGroupDetails)
    return ApiResponse(200, _group_details(details))


async def delete_consumer_group(api: HttpApi, request: ApiRequest) -> ApiResponse:
    await api.call(request, CommandCode.DELETE_CONSUMER_GROUP, _group_ref(request).encode())
    return ApiResponse(204)


# -- users, tokens, clients, options -------------------------------------------------------

_TRANSPORTS: Final = {1: "tcp", 2: "quic", 3: "http", 4: "ws"}
_USER_STATUS: Final = {status.name.lower(): status for status in wire.UserStatus}
_GLOBAL_FIELDS: Final = (
    "manage_servers",
    "read_servers",
    "manage_users",
    "read_users",
    "manage_streams",
    "read_streams",
    "manage_topics",
    "read_topics",
    "poll_messages",
    "send_messages",
)
_STREAM_FIELDS: Final = (
    "manage_stream",
    "read_stream",
    "manage_topics",
    "read_topics",
    "poll_messages",
    "send_messages",
)
_TOPIC_FIELDS: Final = ("manage_topic", "read_topic", "poll_messages", "send_messages")


def permissions_json(permissions: wire.Permissions | None) -> dict[str, Any] | None:
    if permissions is None:
        return None
    streams: dict[str, Any] = {}
    for stream in permissions.streams:
        entry: dict[str, Any] = {name: getattr(stream, name) for name in _STREAM_FIELDS}
        entry["topics"] = {
            str(topic.topic_id): {name: getattr(topic, name) for name in _TOPIC_FIELDS}
            for topic in stream.topics
        } or None
        streams[str(stream.stream_id)] = entry
    return {
        "global": {name: getattr(permissions.global_, name) for name in _GLOBAL_FIELDS},
        "streams": streams or None,
    }


def _flags(data: Any, names: tuple[str, ...], what: str) -> dict[str, bool]:
    if not isinstance(data, dict):
        raise bad_request(f"{what} must be an object")
    return {name: bool(_field(data, name, bool, False)) for name in names}


def _numbered(data: Any, what: str) -> list[tuple[int, Any]]:
    if data is None:
        return []
    if not isinstance(data, dict):
        raise bad_request(f"{what} must be an object keyed by id")
    entries = []
    for key, value in data.items():
        if not str(key).isdigit() or int(key) >= 1 << 32:
            raise bad_request(f"{what} keys are u32 ids")
        entries.append((int(key), value))
    return sorted(entries, key=lambda entry: entry[0])


def permissions_from_json(data: Any) -> wire.Permissions | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise bad_request("permissions must be an object")
    global_ = wire.GlobalPermissions(**_flags(data.get("global", {}), _GLOBAL_FIELDS, "global"))
    streams = []
    for stream_id, stream in _numbered(data.get("streams"), "streams"):
        topics = tuple(
            wire.TopicPermissions(topic_id, **_flags(topic, _TOPIC_FIELDS, "a topic"))
            for topic_id, topic in _numbered(
                stream.get("topics") if isinstance(stream, dict) else None, "topics"
            )
        )
        flags = _flags(stream, _STREAM_FIELDS, "a stream")
        streams.append(wire.StreamPermissions(stream_id, **flags, topics=topics))
    return wire.Permissions(global_, tuple(streams))


def user_json(info: wire.UserInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "created_at": info.created_at,
        "status": info.status.name.lower(),
        "username": info.username,
    }


def _status(data: Mapping[str, Any], default: wire.UserStatus | None) -> wire.UserStatus | None:
    text = data.get("status")
    if text is None:
        return default
    status = _USER_STATUS.get(str(text).lower())
    if status is None:
        raise bad_request(f"unknown user status {text!r}", int(IggyErrorCode.INVALID_USER_STATUS))
    return status


def _user_ref(request: ApiRequest) -> wire.UserRef:
    return wire.UserRef(identifier(request.params["user_id"]))


def _user_details(details: wire.UserDetails) -> dict[str, Any]:
    body = user_json(details.user)
    body["permissions"] = permissions_json(details.permissions)
    return body


async def get_users(api: HttpApi, request: ApiRequest) -> ApiResponse:
    users = await api.call(request, CommandCode.GET_USERS, b"")
    assert isinstance(users, wire.Users)
    return ApiResponse(200, [user_json(user) for user in users.users])


async def get_user(api: HttpApi, request: ApiRequest) -> ApiResponse:
    details = await api.call(request, CommandCode.GET_USER, _user_ref(request).encode())
    if details is None:
        raise not_found("user not found")
    assert isinstance(details, wire.UserDetails)
    return ApiResponse(200, _user_details(details))


async def create_user(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    payload = wire.CreateUser(
        username=_field(data, "username", str),
        password=_field(data, "password", str),
        status=_status(data, wire.UserStatus.ACTIVE) or wire.UserStatus.ACTIVE,
        permissions=permissions_from_json(data.get("permissions")),
        options=_options(data),
    )
    details = await api.call(request, CommandCode.CREATE_USER, _encode(payload))
    assert isinstance(details, wire.UserDetails)
    return ApiResponse(200, _user_details(details))


async def update_user(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    payload = wire.UpdateUser(
        _user_ref(request).user_id,
        _field(data, "username", str, None),
        _status(data, None),
        _options(data),
    )
    await api.call(request, CommandCode.UPDATE_USER, _encode(payload))
    return ApiResponse(204)


async def delete_user(api: HttpApi, request: ApiRequest) -> ApiResponse:
    await api.call(request, CommandCode.DELETE_USER, _user_ref(request).encode())
    return ApiResponse(204)


async def change_password(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    payload = wire.ChangePassword(
        _user_ref(request).user_id,
        _field(data, "current_password", str),
        _field(data, "new_password", str),
    )
    await api.call(request, CommandCode.CHANGE_PASSWORD, _encode(payload))
    return ApiResponse(204)


async def update_permissions(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    payload = wire.UpdatePermissions(
        _user_ref(request).user_id, permissions_from_json(data.get("permissions"))
    )
    await api.call(request, CommandCode.UPDATE_PERMISSIONS, _encode(payload))
    return ApiResponse(204)


async def get_tokens(api: HttpApi, request: ApiRequest) -> ApiResponse:
    tokens = await api.call(request, CommandCode.GET_PERSONAL_ACCESS_TOKENS, b"")
    assert isinstance(tokens, wire.PersonalAccessTokens)
    body = [{"name": token.name, "expiry_at": token.expiry_at or None} for token in tokens.tokens]
    return ApiResponse(200, body)


async def create_token(api: HttpApi, request: ApiRequest) -> ApiResponse:
    data = request.json()
    expiry = _field(data, "expiry", int, 0)
    payload = wire.CreatePersonalAccessToken(_field(data, "name", str), expiry)
    raw = await api.call(request, CommandCode.CREATE_PERSONAL_ACCESS_TOKEN, _encode(payload))
    assert isinstance(raw, wire.RawPersonalAccessToken)
    return ApiResponse(200, {"token": raw.token})


async def delete_token(api: HttpApi, request: ApiRequest) -> ApiResponse:
    payload = wire.PersonalAccessTokenRef(request.params["name"])
    await api.call(request, CommandCode.DELETE_PERSONAL_ACCESS_TOKEN, _encode(payload))
    return ApiResponse(204)


def client_json(info: wire.ClientInfo) -> dict[str, Any]:
    return {
        "client_id": info.client_id,
        "user_id": None if info.user_id == wire.CLIENT_NO_USER else info.user_id,
        "address": info.address,
        "transport": _TRANSPORTS.get(info.transport, str(info.transport)),
        "consumer_groups_count": info.consumer_groups_count,
    }


async def get_clients(api: HttpApi, request: ApiRequest) -> ApiResponse:
    clients = await api.call(request, CommandCode.GET_CLIENTS, b"")
    assert isinstance(clients, wire.Clients)
    return ApiResponse(200, [client_json(client) for client in clients.clients])


async def get_client(api: HttpApi, request: ApiRequest) -> ApiResponse:
    text = request.params["client_id"]
    if not text.isdigit() or int(text) >= 1 << 32:
        raise bad_request("a client id is a u32", int(IggyErrorCode.INVALID_CLIENT_ID))
    info = await api.call(request, CommandCode.GET_CLIENT, _encode(wire.ClientRef(int(text))))
    if info is None:
        raise not_found("client not found")
    assert isinstance(info, wire.ClientInfoDetails)
    body = {
        "client_id": info.client_id,
        "user_id": None if info.user_id == wire.CLIENT_NO_USER else info.user_id,
        "address": info.address,
        "transport": _TRANSPORTS.get(info.transport, str(info.transport)),
        "consumer_groups_count": len(info.consumer_groups),
        "consumer_groups": [
            {"stream_id": g.stream_id, "topic_id": g.topic_id, "group_id": g.group_id}
            for g in info.consumer_groups
        ],
    }
    return ApiResponse(200, body)


_SCOPES: Final = {scope.name.lower(): scope for scope in wire.OptionsScope}


async def describe_options(api: HttpApi, request: ApiRequest) -> ApiResponse:
    scope = _SCOPES.get(request.params["scope"].lower())
    if scope is None:
        raise bad_request(f"unknown options scope {request.params['scope']!r}")
    catalog = await api.call(
        request, CommandCode.DESCRIBE_OPTIONS, _encode(wire.DescribeOptions(int(scope)))
    )
    assert isinstance(catalog, wire.OptionsCatalog)
    body = []
    for entry in catalog.entries:
        try:
            kind = wire.HeaderKind(entry.kind).name.lower()
        except ValueError:
            kind = str(entry.kind)
        body.append(
            {
                "key": entry.key,
                "kind": kind,
                "default_value": list(entry.default_value),
                "description": entry.description,
            }
        )
    return ApiResponse(200, body)


_SNAPSHOT_COMPRESSIONS: Final = {
    value.name.lower().replace("_", ""): value for value in wire.SnapshotCompression
}
_SNAPSHOT_SECTIONS: Final = {
    value.name.lower().replace("_", ""): value for value in wire.SnapshotSection
}


def _snapshot_name(text: Any, table: Mapping[str, Any], what: str) -> Any:
    """Iggy's serde names (``FilesystemOverview``) or snake case (``filesystem_overview``)."""
    key = str(text).replace("_", "").lower()
    if key not in table:
        raise bad_request(f"unknown {what} {text!r}")
    return table[key]


async def get_snapshot(api: HttpApi, request: ApiRequest) -> ApiResponse:
    """``POST /snapshot``: the node's diagnostics zip (GET_SNAPSHOT_FILE)."""
    data = request.json()
    compression = _snapshot_name(
        data.get("compression", "Deflated"), _SNAPSHOT_COMPRESSIONS, "compression"
    )
    types = data.get("snapshot_types", ["All"])
    if not isinstance(types, list):
        raise bad_request("snapshot_types must be a list")
    sections = tuple(int(_snapshot_name(t, _SNAPSHOT_SECTIONS, "snapshot type")) for t in types)
    payload = wire.GetSnapshot(int(compression), sections)
    archive = await api.call(request, CommandCode.GET_SNAPSHOT_FILE, _encode(payload))
    assert isinstance(archive, wire.SnapshotArchive)
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime())
    disposition = f'attachment; filename="viewstream_snapshot_{stamp}.zip"'.encode()
    return ApiResponse(
        200, archive.data, [(b"content-disposition", disposition)], media=b"application/zip"
    )


def _encode(payload: Any) -> bytes:
    """A request payload's bytes; a value the codec refuses is the client's bad input."""
    try:
        body: bytes = payload.encode()
    except ProtocolError as error:
        raise bad_request(error.reason, int(error.code or IggyErrorCode.INVALID_FORMAT)) from None
    except (ValueError, OverflowError) as error:
        raise bad_request(str(error)) from None
    return body


def default_router() -> Router:
    """Every route served (invariant 5)."""
    router = Router()
    add = router.add
    add("GET", "/ping", ping, public=True)
    add("GET", "/metrics", get_metrics, public=True)
    add("POST", "/users/login", login_user, public=True)
    add("POST", "/users/refresh-token", refresh_token, public=True)
    add("POST", "/personal-access-tokens/login", login_with_token, public=True)
    add("DELETE", "/users/logout", logout_user)
    add("GET", "/stats", get_stats)
    add("GET", "/cluster/metadata", get_cluster_metadata)
    add("GET", "/clients", get_clients)
    add("GET", "/clients/{client_id}", get_client)
    add("GET", "/options/{scope}", describe_options)
    add("POST", "/snapshot", get_snapshot)
    add("GET", "/users", get_users)
    add("POST", "/users", create_user)
    add("GET", "/users/{user_id}", get_user)
    add("PUT", "/users/{user_id}", update_user)
    add("DELETE", "/users/{user_id}", delete_user)
    add("PUT", "/users/{user_id}/password", change_password)
    add("PUT", "/users/{user_id}/permissions", update_permissions)
    add("GET", "/personal-access-tokens", get_tokens)
    add("POST", "/personal-access-tokens", create_token)
    add("DELETE", "/personal-access-tokens/{name}", delete_token)
    add("GET", "/streams", get_streams)
    add("POST", "/streams", create_stream)
    add("GET", "/streams/{stream_id}", get_stream)
    add("PUT", "/streams/{stream_id}", update_stream)
    add("DELETE", "/streams/{stream_id}", delete_stream)
    add("DELETE", "/streams/{stream_id}/purge", purge_stream)
    add("GET", "/streams/{stream_id}/topics", get_topics)
    add("POST", "/streams/{stream_id}/topics", create_topic)
    add("GET", "/streams/{stream_id}/topics/{topic_id}", get_topic)
    add("PUT", "/streams/{stream_id}/topics/{topic_id}", update_topic)
    add("DELETE", "/streams/{stream_id}/topics/{topic_id}", delete_topic)
    add("DELETE", "/streams/{stream_id}/topics/{topic_id}/purge", purge_topic)
    add("POST", "/streams/{stream_id}/topics/{topic_id}/partitions", create_partitions)
    add("DELETE", "/streams/{stream_id}/topics/{topic_id}/partitions", delete_partitions)
    add(
        "DELETE",
        "/streams/{stream_id}/topics/{topic_id}/partitions/{partition_id}",
        delete_segments,
    )
    add("GET", "/streams/{stream_id}/topics/{topic_id}/messages", poll_messages)
    add("POST", "/streams/{stream_id}/topics/{topic_id}/messages", send_messages)
    add(
        "GET",
        "/streams/{stream_id}/topics/{topic_id}/messages/flush/{partition_id}/{fsync}",
        flush_unsaved_buffer,
    )
    add("GET", "/streams/{stream_id}/topics/{topic_id}/consumer-offsets", get_consumer_offset)
    add("PUT", "/streams/{stream_id}/topics/{topic_id}/consumer-offsets", store_consumer_offset)
    add(
        "DELETE",
        "/streams/{stream_id}/topics/{topic_id}/consumer-offsets/{consumer_id}",
        delete_consumer_offset,
    )
    add("GET", "/streams/{stream_id}/topics/{topic_id}/consumer-groups", get_consumer_groups)
    add("POST", "/streams/{stream_id}/topics/{topic_id}/consumer-groups", create_consumer_group)
    add(
        "GET",
        "/streams/{stream_id}/topics/{topic_id}/consumer-groups/{group_id}",
        get_consumer_group,
    )
    add(
        "DELETE",
        "/streams/{stream_id}/topics/{topic_id}/consumer-groups/{group_id}",
        delete_consumer_group,
    )
    return router


def parse_query(text: str) -> dict[str, str]:
    """A URL query as a dict (the last value of a repeated key wins)."""
    return dict(parse_qsl(text, keep_blank_values=True))
