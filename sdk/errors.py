"""Typed exceptions of the SDK, each carrying an Apache Iggy error code.

Purpose: every failure a caller can see is an :class:`IggyError` whose ``code`` is the
number Iggy uses for it (a reply status, a result-section entry, an eviction mapped to
its code, or one of Iggy's client-side codes for transport failures), so callers can
``except`` by class or switch on the number.

Invariants:

1. :func:`error_for_code` returns the most specific class registered for a code and a
   plain :class:`IggyError` for codes it does not name; ``error.code`` is always the code
   it was given.
2. ``retryable`` is a class attribute: ``True`` only for failures that the same request
   may still overcome (57, 58, lost connections, timeouts). The client already retried
   those until its deadline before raising them.
3. An eviction becomes the error of the code its reason maps to, with ``eviction`` set to
   the reason; reasons without a specific code become :class:`SessionEvicted`.
"""

from __future__ import annotations

from typing import ClassVar, Final

from sdk.wire import EvictionReason, IggyErrorCode

__all__ = [
    "AlreadyExists",
    "ClientClosed",
    "ConnectionFailed",
    "ConsumerGroupAlreadyExists",
    "ConsumerGroupMemberNotFound",
    "ConsumerGroupNotFound",
    "ConsumerOffsetNotFound",
    "Disconnected",
    "FeatureUnavailable",
    "IggyError",
    "IncompatibleProtocol",
    "InvalidCommand",
    "InvalidConnectionString",
    "InvalidCredentials",
    "InvalidTlsCertificate",
    "InvalidFormat",
    "NotFound",
    "PartitionNotFound",
    "ProducerBufferFull",
    "ProducerClosed",
    "ProducerSendError",
    "RequestAlreadyApplied",
    "RequestTimeout",
    "SessionEvicted",
    "StorageFull",
    "StreamAlreadyExists",
    "StreamNotFound",
    "TopicAlreadyExists",
    "TopicNotFound",
    "TransientError",
    "TransientNotAccepted",
    "TransientNotCommitted",
    "Unauthenticated",
    "Unauthorized",
    "UserInactive",
    "error_for_code",
    "error_for_eviction",
]

# Iggy's client-side codes (``core/common/src/error/iggy_error.rs``) that the wire codec
# does not name because a server never sends them.
DISCONNECTED_CODE: Final = 8
CANNOT_ESTABLISH_CONNECTION_CODE: Final = 9
CLIENT_SHUTDOWN_CODE: Final = 63
TASK_TIMEOUT_CODE: Final = 12001
INVALID_CONNECTION_STRING_CODE: Final = 8000
INVALID_TLS_CERTIFICATE_PATH_CODE: Final = 65
INVALID_TLS_CERTIFICATE_CODE: Final = 66
BACKGROUND_SEND_BUFFER_FULL_CODE: Final = 4053
PRODUCER_SEND_FAILED_CODE: Final = 4056
PRODUCER_CLOSED_CODE: Final = 4057


def _code_name(code: int) -> str:
    try:
        return IggyErrorCode(code).name.lower()
    except ValueError:
        return {
            DISCONNECTED_CODE: "disconnected",
            CANNOT_ESTABLISH_CONNECTION_CODE: "cannot_establish_connection",
            CLIENT_SHUTDOWN_CODE: "client_shutdown",
            TASK_TIMEOUT_CODE: "task_timeout",
            INVALID_CONNECTION_STRING_CODE: "invalid_connection_string",
            BACKGROUND_SEND_BUFFER_FULL_CODE: "background_send_buffer_full",
            PRODUCER_SEND_FAILED_CODE: "producer_send_failed",
            PRODUCER_CLOSED_CODE: "producer_closed",
        }.get(code, "unknown")


class IggyError(Exception):
    """A failure with an Apache Iggy error code.

    Attributes:
        code: The Iggy error code (``int``, so codes this SDK does not name still reach
            the caller).
        detail: Extra words for logs, possibly empty.
        eviction: The eviction reason when the server ended the session, else ``None``.
        retryable: Whether the same request could still succeed later; the client has
            already retried such failures until its deadline before raising them.
    """

    retryable: ClassVar[bool] = False
    default_code: ClassVar[int] = IggyErrorCode.ERROR

    def __init__(
        self,
        code: int | None = None,
        detail: str = "",
        *,
        eviction: EvictionReason | None = None,
    ) -> None:
        self.code = int(self.default_code if code is None else code)
        self.detail = detail
        self.eviction = eviction
        text = f"{_code_name(self.code)} ({self.code})"
        if eviction is not None:
            text += f", session evicted: {eviction.name.lower()}"
        if detail:
            text += f": {detail}"
        super().__init__(text)

    @property
    def name(self) -> str:
        """Iggy's snake-case name of the code (``"unknown"`` for codes not named here)."""
        return _code_name(self.code)


class TransientError(IggyError):
    """The cluster could not take the request right now; the same request may succeed."""

    retryable = True


class TransientNotCommitted(TransientError):
    """57: the outcome is unknown; replay with the same client, session and request."""

    default_code = IggyErrorCode.TRANSIENT_NOT_COMMITTED


class TransientNotAccepted(TransientError):
    """58: the request was definitely not admitted (the node is not the primary of the
    request's group, or is changing view); retry, on any node."""

    default_code = IggyErrorCode.TRANSIENT_NOT_ACCEPTED


class RequestAlreadyApplied(IggyError):
    """59: the request was applied earlier but its cached reply has aged out.

    The effect happened exactly once; only the reply is lost.

    Attributes:
        after_retry: The SDK had retried the request (so the earlier, applied attempt
            was its own).
    """

    default_code = IggyErrorCode.REQUEST_ALREADY_APPLIED

    def __init__(
        self,
        code: int | None = None,
        detail: str = "",
        *,
        eviction: EvictionReason | None = None,
        after_retry: bool = False,
    ) -> None:
        super().__init__(code, detail, eviction=eviction)
        self.after_retry = after_retry


class Unauthenticated(IggyError):
    """40: the request needs a logged-in session."""

    default_code = IggyErrorCode.UNAUTHENTICATED


class Unauthorized(IggyError):
    """41: the user lacks the permission."""

    default_code = IggyErrorCode.UNAUTHORIZED


class InvalidCredentials(IggyError):
    """42: wrong username or password."""

    default_code = IggyErrorCode.INVALID_CREDENTIALS


class UserInactive(IggyError):
    """47: the user exists but is inactive."""

    default_code = IggyErrorCode.USER_INACTIVE


class InvalidCommand(IggyError):
    """3: the server does not know or accept the command."""

    default_code = IggyErrorCode.INVALID_COMMAND


class InvalidFormat(IggyError):
    """4: bytes that do not decode (a malformed reply, or a refused request body)."""

    default_code = IggyErrorCode.INVALID_FORMAT


class FeatureUnavailable(IggyError):
    """5: the server does not offer this feature."""

    default_code = IggyErrorCode.FEATURE_UNAVAILABLE


class StorageFull(IggyError):
    """4010: the node has no room for new messages (over its disk budget, or short of free
    space); nothing was appended. Reads still work; try again once space is freed."""

    default_code = IggyErrorCode.CANNOT_APPEND_MESSAGE
    outcome_unknown = False


class NotFound(IggyError):
    """Something named by the request does not exist."""


class StreamNotFound(NotFound):
    """1009 / 1010: no stream with that id or name."""

    default_code = IggyErrorCode.STREAM_ID_NOT_FOUND


class TopicNotFound(NotFound):
    """2010 / 2011: no topic with that id or name."""

    default_code = IggyErrorCode.TOPIC_ID_NOT_FOUND


class PartitionNotFound(NotFound):
    """3007: no such partition (or the topic has none, 3008)."""

    default_code = IggyErrorCode.PARTITION_NOT_FOUND


class ConsumerGroupNotFound(NotFound):
    """5000 / 5003: no consumer group with that id or name."""

    default_code = IggyErrorCode.CONSUMER_GROUP_ID_NOT_FOUND


class ConsumerGroupMemberNotFound(NotFound):
    """5006: this session is not a member of the consumer group."""

    default_code = IggyErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND


class ConsumerOffsetNotFound(NotFound):
    """3021: no offset stored for this consumer and partition."""

    default_code = IggyErrorCode.CONSUMER_OFFSET_NOT_FOUND


class AlreadyExists(IggyError):
    """Something the request creates already exists."""


class StreamAlreadyExists(AlreadyExists):
    """1012: a stream with that name exists."""

    default_code = IggyErrorCode.STREAM_NAME_ALREADY_EXISTS


class TopicAlreadyExists(AlreadyExists):
    """2013: a topic with that name exists in the stream."""

    default_code = IggyErrorCode.TOPIC_NAME_ALREADY_EXISTS


class ConsumerGroupAlreadyExists(AlreadyExists):
    """5004: a consumer group with that name exists on the topic."""

    default_code = IggyErrorCode.CONSUMER_GROUP_NAME_ALREADY_EXISTS


class SessionEvicted(IggyError):
    """The server ended the session (an eviction frame) for a reason without a more
    specific error; ``eviction`` says why.

    Attributes:
        outcome_unknown: The session ended while a write was in doubt (an earlier attempt
            may have been applied). The SDK does not re-send such a write under a new
            session, since the cluster could then apply it twice.
    """

    default_code = IggyErrorCode.INVALID_SESSION

    def __init__(
        self,
        code: int | None = None,
        detail: str = "",
        *,
        eviction: EvictionReason | None = None,
        outcome_unknown: bool = False,
    ) -> None:
        super().__init__(code, detail, eviction=eviction)
        self.outcome_unknown = outcome_unknown


class IncompatibleProtocol(IggyError):
    """14003: the server does not accept our protocol version.

    Attributes:
        server_protocol_version: The server's packed protocol version.
        server_protocol_version_min: The oldest packed version it accepts.
    """

    default_code = IggyErrorCode.INCOMPATIBLE_PROTOCOL_VERSION

    def __init__(
        self,
        code: int | None = None,
        detail: str = "",
        *,
        eviction: EvictionReason | None = None,
        server_protocol_version: int = 0,
        server_protocol_version_min: int = 0,
    ) -> None:
        super().__init__(code, detail, eviction=eviction)
        self.server_protocol_version = server_protocol_version
        self.server_protocol_version_min = server_protocol_version_min


class ConnectionFailed(IggyError):
    """9: no node could be reached (every dial failed until the deadline)."""

    retryable = True
    default_code = CANNOT_ESTABLISH_CONNECTION_CODE


class Disconnected(IggyError):
    """8: connections kept failing mid-request until the deadline.

    Attributes:
        outcome_unknown: A replicated request may or may not have been applied.
    """

    retryable = True
    default_code = DISCONNECTED_CODE

    def __init__(self, code: int | None = None, detail: str = "", *, outcome_unknown: bool) -> None:
        super().__init__(code, detail)
        self.outcome_unknown = outcome_unknown


class RequestTimeout(IggyError):
    """12001: the call ran out of time (every attempt timed out or failed).

    Attributes:
        outcome_unknown: A replicated request may or may not have been applied; calling
            again is a new request, so only the SDK's own retries were exactly-once.
    """

    retryable = True
    default_code = TASK_TIMEOUT_CODE

    def __init__(self, code: int | None = None, detail: str = "", *, outcome_unknown: bool) -> None:
        super().__init__(code, detail)
        self.outcome_unknown = outcome_unknown


class ClientClosed(IggyError):
    """63: the client was closed."""

    default_code = CLIENT_SHUTDOWN_CODE


class InvalidConnectionString(IggyError, ValueError):
    """8000: the connection string does not parse."""

    default_code = INVALID_CONNECTION_STRING_CODE


class InvalidTlsCertificate(IggyError, ValueError):
    """65 or 66: the CA file of the TLS settings is missing (65,
    ``InvalidTlsCertificatePath``) or holds no certificate this client can use (66,
    ``InvalidTlsCertificate``); raised when the client is made, before any dial."""

    default_code = INVALID_TLS_CERTIFICATE_CODE


class ProducerBufferFull(IggyError):
    """4053: the producer's buffer is full and the backpressure mode said not to wait
    (or the wait timed out)."""

    default_code = BACKGROUND_SEND_BUFFER_FULL_CODE


class ProducerClosed(IggyError):
    """4057: the producer is closed."""

    default_code = PRODUCER_CLOSED_CODE


class ProducerSendError(IggyError):
    """4056: some batches could not be delivered.

    Attributes:
        failures: ``(partition_id, message_count, cause)`` of each failed batch.
    """

    default_code = PRODUCER_SEND_FAILED_CODE

    def __init__(self, failures: list[tuple[int, int, IggyError]]) -> None:
        count = sum(item[1] for item in failures)
        first = failures[0][2] if failures else None
        super().__init__(None, f"{len(failures)} batches ({count} messages) failed; first: {first}")
        self.failures = failures


_CLASS_BY_CODE: Final[dict[int, type[IggyError]]] = {
    IggyErrorCode.INVALID_COMMAND: InvalidCommand,
    IggyErrorCode.INVALID_FORMAT: InvalidFormat,
    IggyErrorCode.FEATURE_UNAVAILABLE: FeatureUnavailable,
    IggyErrorCode.CANNOT_APPEND_MESSAGE: StorageFull,
    IggyErrorCode.UNAUTHENTICATED: Unauthenticated,
    IggyErrorCode.UNAUTHORIZED: Unauthorized,
    IggyErrorCode.INVALID_CREDENTIALS: InvalidCredentials,
    IggyErrorCode.USER_INACTIVE: UserInactive,
    IggyErrorCode.TRANSIENT_NOT_COMMITTED: TransientNotCommitted,
    IggyErrorCode.TRANSIENT_NOT_ACCEPTED: TransientNotAccepted,
    IggyErrorCode.REQUEST_ALREADY_APPLIED: RequestAlreadyApplied,
    IggyErrorCode.STREAM_ID_NOT_FOUND: StreamNotFound,
    IggyErrorCode.STREAM_NAME_NOT_FOUND: StreamNotFound,
    IggyErrorCode.STREAM_NAME_ALREADY_EXISTS: StreamAlreadyExists,
    IggyErrorCode.TOPIC_ID_NOT_FOUND: TopicNotFound,
    IggyErrorCode.TOPIC_NAME_NOT_FOUND: TopicNotFound,
    IggyErrorCode.TOPIC_NAME_ALREADY_EXISTS: TopicAlreadyExists,
    IggyErrorCode.PARTITION_NOT_FOUND: PartitionNotFound,
    IggyErrorCode.NO_PARTITIONS: PartitionNotFound,
    IggyErrorCode.CONSUMER_OFFSET_NOT_FOUND: ConsumerOffsetNotFound,
    IggyErrorCode.CONSUMER_GROUP_ID_NOT_FOUND: ConsumerGroupNotFound,
    IggyErrorCode.CONSUMER_GROUP_NAME_NOT_FOUND: ConsumerGroupNotFound,
    IggyErrorCode.CONSUMER_GROUP_NAME_ALREADY_EXISTS: ConsumerGroupAlreadyExists,
    IggyErrorCode.CONSUMER_GROUP_MEMBER_NOT_FOUND: ConsumerGroupMemberNotFound,
    IggyErrorCode.INVALID_SESSION: SessionEvicted,
    IggyErrorCode.STALE_CLIENT: SessionEvicted,
    IggyErrorCode.INCOMPATIBLE_PROTOCOL_VERSION: IncompatibleProtocol,
}

# Evictions whose reason names a failure Iggy also has an error code for.
_CODE_BY_EVICTION: Final[dict[EvictionReason, int]] = {
    EvictionReason.INVALID_CREDENTIALS: IggyErrorCode.INVALID_CREDENTIALS,
    EvictionReason.INVALID_TOKEN: IggyErrorCode.INVALID_CREDENTIALS,
    EvictionReason.USER_INACTIVE: IggyErrorCode.USER_INACTIVE,
    EvictionReason.INCOMPATIBLE_PROTOCOL: IggyErrorCode.INCOMPATIBLE_PROTOCOL_VERSION,
    EvictionReason.MALFORMED_LOGIN: IggyErrorCode.INVALID_FORMAT,
    EvictionReason.INVALID_REQUEST_OPERATION: IggyErrorCode.INVALID_COMMAND,
    EvictionReason.INVALID_REQUEST_BODY: IggyErrorCode.INVALID_FORMAT,
    EvictionReason.INVALID_REQUEST_BODY_SIZE: IggyErrorCode.INVALID_FORMAT,
    EvictionReason.STALE_CLIENT: IggyErrorCode.STALE_CLIENT,
}


def error_for_code(code: int, detail: str = "") -> IggyError:
    """The typed error for an Iggy error code (a plain :class:`IggyError` if unnamed)."""
    cls = _CLASS_BY_CODE.get(code, IggyError)
    return cls(code, detail)


def error_for_eviction(
    reason: EvictionReason,
    server_protocol_version: int = 0,
    server_protocol_version_min: int = 0,
) -> IggyError:
    """The typed error for an eviction frame: the error of the code its reason maps to,
    or :class:`SessionEvicted` (14001), with ``eviction`` set to the reason."""
    code = _CODE_BY_EVICTION.get(reason, IggyErrorCode.INVALID_SESSION)
    if code == IggyErrorCode.INCOMPATIBLE_PROTOCOL_VERSION:
        return IncompatibleProtocol(
            code,
            eviction=reason,
            server_protocol_version=server_protocol_version,
            server_protocol_version_min=server_protocol_version_min,
        )
    cls = _CLASS_BY_CODE.get(code, IggyError)
    if code == IggyErrorCode.STALE_CLIENT:
        cls = SessionEvicted
    return cls(code, eviction=reason)
