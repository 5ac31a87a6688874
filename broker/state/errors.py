"""Iggy error codes the state machines answer with, and the typed error that carries one.

A state machine rejects a command by raising :class:`StateError` inside its own code and
turning it into a rejection result at its public boundary; nothing outside this package
sees the exception. The codes are Apache Iggy's ``IggyError`` discriminants, so a client
SDK decodes our rejections into its own error types unchanged. A read that finds nothing
answers with :data:`NOT_FOUND`, an empty body, where Iggy does.

Invariants:

1. Every code here has the numeric value Iggy gives it; a gap in Iggy's table is a retired
   code and is never reused here. The one code Iggy lacks (``TOO_MANY_CONSUMER_OFFSETS``)
   says so where it is defined.
2. A rejection never leaves partial effects: commands validate everything first and mutate
   only after every check has passed.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class ErrorCode(IntEnum):
    """Iggy error codes (``core/common/src/error/iggy_error.rs``) used by the state machines."""

    ERROR = 1
    INVALID_COMMAND = 3
    INVALID_FORMAT = 4
    FEATURE_UNAVAILABLE = 5
    INVALID_IDENTIFIER = 6
    RESOURCE_NOT_FOUND = 20
    UNAUTHENTICATED = 40
    UNAUTHORIZED = 41
    INVALID_CREDENTIALS = 42
    INVALID_USERNAME = 43
    INVALID_PASSWORD = 44
    INVALID_USER_STATUS = 45
    USER_ALREADY_EXISTS = 46
    USER_INACTIVE = 47
    CANNOT_DELETE_USER = 48
    CANNOT_CHANGE_PERMISSIONS = 49
    INVALID_PERSONAL_ACCESS_TOKEN_NAME = 50
    PERSONAL_ACCESS_TOKEN_ALREADY_EXISTS = 51
    PERSONAL_ACCESS_TOKENS_LIMIT_REACHED = 52
    INVALID_PERSONAL_ACCESS_TOKEN = 53
    INVALID_PERSONAL_ACCESS_TOKEN_EXPIRY = 56
    USERS_LIMIT_REACHED = 55
    CLIENT_NOT_FOUND = 100
    STREAM_ID_NOT_FOUND = 1009
    STREAM_NAME_NOT_FOUND = 1010
    STREAM_NAME_ALREADY_EXISTS = 1012
    INVALID_STREAM_NAME = 1013
    INVALID_TOPIC_SIZE = 1019
    TOO_MANY_STREAMS = 1020
    TOPIC_ID_NOT_FOUND = 2010
    TOPIC_NAME_NOT_FOUND = 2011
    TOPIC_NAME_ALREADY_EXISTS = 2013
    INVALID_TOPIC_NAME = 2014
    TOO_MANY_PARTITIONS = 2015
    INVALID_PARTITIONS_COUNT = 2019
    TOO_MANY_TOPICS = 2021
    PARTITIONS_LIMIT_REACHED = 2022
    PARTITION_NOT_FOUND = 3007
    NO_PARTITIONS = 3008
    CONSUMER_OFFSET_NOT_FOUND = 3021
    # Not in Iggy 0.9's table (it bounds no offset table): ours, the next code of Iggy's
    # consumer-offset block (3020..3023). Iggy's SDKs decode it as their generic Error.
    TOO_MANY_CONSUMER_OFFSETS = 3024
    INVALID_SEGMENT_SIZE = 4002
    INVALID_MESSAGES_COUNT = 4009
    TOO_BIG_USER_HEADERS = 4017
    INVALID_HEADER_KEY = 4018
    INVALID_HEADER_VALUE = 4019
    TOO_BIG_MESSAGE_PAYLOAD = 4022
    TOO_MANY_MESSAGES = 4023
    INVALID_MESSAGE_CHECKSUM = 4027
    INVALID_KEY_VALUE_LENGTH = 4028
    INVALID_BATCH_CHECKSUM = 4039
    INVALID_HEADER_KIND = 4040
    UNSUPPORTED_OPTION_KEY = 4041
    INVALID_OPTION_VALUE = 4042
    INVALID_OFFSET = 4100
    INVALID_RESERVED_FIELD = 4101
    CONSUMER_GROUP_ID_NOT_FOUND = 5000
    CONSUMER_GROUP_NAME_NOT_FOUND = 5003
    CONSUMER_GROUP_NAME_ALREADY_EXISTS = 5004
    INVALID_CONSUMER_GROUP_NAME = 5005
    CONSUMER_GROUP_MEMBER_NOT_FOUND = 5006
    CONSUMER_GROUP_PARTITION_NOT_OWNED = 5009
    SNAPSHOT_FILE_COMPLETION_FAILED = 9000


class StateError(Exception):
    """A command was rejected; ``code`` is the Iggy error code the client will see."""

    def __init__(self, code: ErrorCode, detail: str = "") -> None:
        super().__init__(f"{code.name} ({int(code)}){': ' + detail if detail else ''}")
        self.code = code
        self.detail = detail


NOT_FOUND: Final = b""
"""The reply body of a read whose object does not exist, where Iggy answers so (metadata
and partition reads alike)."""
