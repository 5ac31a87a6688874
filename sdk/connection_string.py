"""Client settings and the ``iggy://`` connection string.

Purpose: one frozen :class:`ClientConfig` that both drivers read, and
:func:`parse_connection_string` for the form the official SDK accepts::

    iggy://user:password@host:port[,host:port...][?option=value&...]
    iggy://TOKEN@host:port[...]         (a personal access token instead of a password)
    iggy+tcp://...                      (the same; TCP is the only transport here)

Several ``host:port`` seeds may be given, comma-separated; the client dials the first
reachable one and learns the rest of the roster from the cluster metadata. As in Iggy, a
credential without a colon is a personal access token. Options are listed in
:data:`CONNECTION_OPTIONS`; durations take ``ms``, ``s`` or ``m`` suffixes (a bare number
is seconds). ``tls=true`` with ``tls_domain`` (the name the server's certificate must
carry; the host dialed when unset) and ``tls_ca_file`` (PEM certificates to trust; the
system's roots when unset) are Iggy's TLS options. Unknown options are refused with
:class:`~sdk.errors.InvalidConnectionString`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qsl, unquote

from sdk.errors import InvalidConnectionString

__all__ = [
    "CONNECTION_OPTIONS",
    "DEFAULT_PORT",
    "ClientConfig",
    "NodeAddress",
    "parse_connection_string",
]

DEFAULT_PORT: Final = 8090
"""Iggy's TCP port."""

_SCHEMES: Final = ("iggy://", "iggy+tcp://")


@dataclass(frozen=True, slots=True, order=True)
class NodeAddress:
    """Where a node listens for clients."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> NodeAddress:
        """``HOST:PORT``, ``HOST`` (port 8090) or ``[IPv6]:PORT``, as in a connection string.

        Raises:
            InvalidConnectionString: an empty host, a bad port or a malformed address.
        """
        return _address(text)

    def __str__(self) -> str:
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Settings of a client (both drivers).

    Attributes:
        seeds: Nodes to dial first; the roster learned from cluster metadata replaces
            them once logged in.
        username: Login user; ``None`` for a client that logs in explicitly.
        password: Login password.
        token: A personal access token to log in with instead of a username and a
            password (LOGIN_REGISTER_WITH_PAT); never both.
        tls: Speak TLS (1.2 or 1.3) to every node and verify its certificate.
        tls_domain: The name the nodes' certificates must carry (server name indication
            and hostname check); ``None`` means the host of the address dialed, as in
            Iggy's SDK.
        tls_ca_file: PEM file of the certificates to trust (a cluster's own CA);
            ``None`` means the system's trusted roots. Setting it implies nothing: give
            ``tls=True`` too.
        request_timeout_s: How long one attempt (dial, send, wait for the reply) may take.
            Longer than a viewstream node's own bound on a request (10 s, after which it
            answers a transient error), so a live node answers before the client gives up
            on the connection (closing it ends the session on that node).
        connect_timeout_s: How long dialing a node may take (within the attempt).
        retry_deadline_s: How long one call may take, retries included. A write that is
            retried within it keeps its request number, so it is applied at most once.
        backoff_min_s: First wait before retrying a node or a transient error.
        backoff_max_s: Longest such wait (the wait doubles up to it, with jitter).
        cluster_discovery: Learn the roster and the metadata primary after login.
        nodelay: Set ``TCP_NODELAY`` on every connection.
        heartbeat_interval_s: How often the async client, used as ``async with``, pings
            each node it holds a connection to that carried nothing for that long (the
            official SDKs' 5 s). A node evicts a consumer group member whose connection
            stays silent for 1.2 of its own heartbeat interval (30 s). 0: never.
        sdk_name: The SDK name sent at login.
        sdk_version: The SDK version sent at login.
    """

    seeds: tuple[NodeAddress, ...] = (NodeAddress("127.0.0.1", DEFAULT_PORT),)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_domain: str | None = None
    tls_ca_file: str | None = None
    request_timeout_s: float = 15.0
    connect_timeout_s: float = 5.0
    retry_deadline_s: float = 30.0
    backoff_min_s: float = 0.05
    backoff_max_s: float = 2.0
    cluster_discovery: bool = True
    nodelay: bool = True
    heartbeat_interval_s: float = 5.0
    sdk_name: str = "viewstream-py"
    sdk_version: str = "0.1.0"

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("at least one seed address is needed")
        for name in ("request_timeout_s", "connect_timeout_s", "retry_deadline_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if not self.heartbeat_interval_s >= 0:
            raise ValueError("heartbeat_interval_s must not be negative")
        if not 0 < self.backoff_min_s <= self.backoff_max_s:
            raise ValueError("need 0 < backoff_min_s <= backoff_max_s")
        if (self.username is None) != (self.password is None):
            raise ValueError("give both username and password, or neither")
        if self.token is not None:
            if self.username is not None:
                raise ValueError("give a token or a username and password, not both")
            if not self.token:
                raise ValueError("the token is empty")
        if not self.tls and (self.tls_domain is not None or self.tls_ca_file is not None):
            raise ValueError("tls_domain and tls_ca_file need tls=True")

    @classmethod
    def one_node(
        cls,
        address: str,
        *,
        username: str | None = None,
        password: str | None = None,
        timeout_s: float | None = None,
    ) -> ClientConfig:
        """Settings that talk to the node at ``address`` (``HOST:PORT``) and only to it.

        Discovery is off, so every call is answered by that node (tools that report one
        node's state, benchmarks pinned to one node). ``timeout_s``, when given, bounds a
        dial, an attempt and a whole call alike.
        """
        config = cls(
            seeds=(NodeAddress.parse(address),),
            username=username,
            password=password,
            cluster_discovery=False,
        )
        if timeout_s is None:
            return config
        return config.replace(
            request_timeout_s=timeout_s, connect_timeout_s=timeout_s, retry_deadline_s=timeout_s
        )

    def replace(self, **changes: object) -> ClientConfig:
        """A copy with some fields changed (``ValueError``/``TypeError`` on bad ones)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


_DURATION: Final = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*(ms|s|m)?\s*$")


def _duration_s(raw: str, key: str) -> float:
    match = _DURATION.match(raw)
    if match is None:
        raise InvalidConnectionString(detail=f"{key}={raw!r} is not a duration")
    value = float(match.group(1))
    unit = match.group(2) or "s"
    seconds = value / 1000 if unit == "ms" else value * 60 if unit == "m" else value
    if seconds <= 0:
        raise InvalidConnectionString(detail=f"{key} must be positive")
    return seconds


def _flag(raw: str, key: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise InvalidConnectionString(detail=f"{key}={raw!r} is not a boolean")


_DURATION_OPTIONS: Final = {
    "request_timeout": "request_timeout_s",
    "connect_timeout": "connect_timeout_s",
    "retry_deadline": "retry_deadline_s",
    "reconnection_interval": "backoff_min_s",
    "reconnection_interval_max": "backoff_max_s",
}
_FLAG_OPTIONS: Final = {
    "cluster_discovery": "cluster_discovery",
    "nodelay": "nodelay",
    "tls": "tls",
}
_TEXT_OPTIONS: Final = {"tls_domain": "tls_domain", "tls_ca_file": "tls_ca_file"}

CONNECTION_OPTIONS: Final = {
    "request_timeout": "request_timeout_s (duration)",
    "connect_timeout": "connect_timeout_s (duration)",
    "retry_deadline": "retry_deadline_s (duration)",
    "reconnection_interval": "backoff_min_s (duration)",
    "reconnection_interval_max": "backoff_max_s (duration)",
    "cluster_discovery": "cluster_discovery (boolean)",
    "nodelay": "nodelay (boolean)",
    "tls": "tls (boolean)",
    "tls_domain": "tls_domain (the certificate's name; the host dialed when empty)",
    "tls_ca_file": "tls_ca_file (path of a PEM file; the system's roots when unset)",
}
"""Query options of a connection string and the setting each one sets."""


def _port(raw: str, text: str) -> int:
    if not raw.isdecimal():
        raise InvalidConnectionString(detail=f"bad port in {text!r}")
    port = int(raw)
    if not 0 < port < 65536:
        raise InvalidConnectionString(detail=f"port {port} out of range")
    return port


def _address(text: str) -> NodeAddress:
    text = text.strip()
    if not text:
        raise InvalidConnectionString(detail="empty host")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise InvalidConnectionString(detail=f"unclosed IPv6 address in {text!r}")
        host = text[1:end]
        rest = text[end + 1 :]
        if not rest:
            return NodeAddress(host, DEFAULT_PORT)
        if not rest.startswith(":"):
            raise InvalidConnectionString(detail=f"bad address {text!r}")
        return NodeAddress(host, _port(rest[1:], text))
    host, colon, port = text.rpartition(":")
    if not colon:
        return NodeAddress(text, DEFAULT_PORT)
    if not host:
        raise InvalidConnectionString(detail=f"empty host in {text!r}")
    return NodeAddress(host, _port(port, text))


def parse_connection_string(text: str, base: ClientConfig | None = None) -> ClientConfig:
    """Parse ``iggy://user:password@host:port[,host:port...][?options]``.

    Args:
        text: The connection string.
        base: Settings to start from (defaults to :class:`ClientConfig` defaults).

    Raises:
        InvalidConnectionString: on any part that does not parse, an unknown or repeated
            option, an empty credential, or a TLS option without ``tls=true``.
    """
    scheme = next((s for s in _SCHEMES if text.startswith(s)), None)
    if scheme is None:
        raise InvalidConnectionString(detail=f"scheme must be one of {', '.join(_SCHEMES)}")
    rest = text[len(scheme) :]
    rest, _, query = rest.partition("?")
    rest = rest.rstrip("/")
    credentials, at, hosts = rest.rpartition("@")
    if not at:
        raise InvalidConnectionString(
            detail="credentials are required: iggy://user:pass@host or iggy://TOKEN@host"
        )
    username, colon, password = credentials.partition(":")
    changes: dict[str, object]
    if colon:
        username, password = unquote(username), unquote(password)
        if not username or not password:
            raise InvalidConnectionString(detail="empty username or password")
        changes = {"username": username, "password": password, "token": None}
    else:
        token = unquote(credentials)
        if not token:
            raise InvalidConnectionString(detail="empty personal access token")
        changes = {"username": None, "password": None, "token": token}
    changes["seeds"] = tuple(_address(part) for part in hosts.split(","))
    config = base if base is not None else ClientConfig()
    durations: dict[str, float] = {}
    settings: dict[str, object] = {}
    seen: set[str] = set()
    for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        if key in seen:
            raise InvalidConnectionString(detail=f"option {key!r} given twice")
        seen.add(key)
        if key in _DURATION_OPTIONS:
            durations[_DURATION_OPTIONS[key]] = _duration_s(value, key)
        elif key in _FLAG_OPTIONS:
            settings[_FLAG_OPTIONS[key]] = _flag(value, key)
        elif key in _TEXT_OPTIONS:
            # Iggy treats an empty tls_domain as unset (the host dialed is checked).
            settings[_TEXT_OPTIONS[key]] = value or None
        else:
            raise InvalidConnectionString(detail=f"unknown option {key!r}")
    backoff_min = durations.get("backoff_min_s", config.backoff_min_s)
    if "backoff_max_s" not in durations and backoff_min > config.backoff_max_s:
        durations["backoff_max_s"] = backoff_min
    changes.update(durations)
    changes.update(settings)
    try:
        return config.replace(**changes)
    except (TypeError, ValueError) as error:
        raise InvalidConnectionString(detail=str(error)) from None
