"""Sans-IO codec of the Apache Iggy 0.9 client protocol (protocol version 0.11).

Purpose: everything needed to speak Iggy's TCP binary protocol without doing IO: the
256-byte request, reply and eviction headers, an incremental frame decoder, the
message batch (build, verify, stamp, read, slice), and typed payloads for every
supported command. The broker and the SDK both sit on it; it imports only the
standard library and ``xxhash``.

Invariants:

1. Remote bytes that violate the protocol raise :class:`ProtocolError` (never
   ``IndexError``, ``struct.error``, ``UnicodeDecodeError`` or ``ValueError``); an
   incomplete frame is :data:`NEED_MORE_BYTES`, not an error.
2. Every payload round-trips: ``X.decode(x.encode()) == x`` and a successful decode
   re-encodes to the identical bytes.
3. Payload bytes are copied once, into the frame buffer they arrive in or the batch
   they are built into; parsing, verifying, stamping, reading and slicing use
   ``memoryview`` slices of that buffer.
4. Server policy (which request headers are admissible, whether a batch verifies)
   is in separate functions, so the client uses the same parsers.
5. The server reads a request as Iggy's server does: every field validated, then any
   bytes after the last field ignored (``CommandSpec.decode_request``,
   ``read_request``), except where the last field runs to the end of the body (an
   options block, a send's batch). Replies, and every payload's own ``decode``, are
   strict: the client never accepts bytes it did not expect.

Theory of operation, both directions of one connection::

    client                                           server
    build_request_frame(code, payload.encode())  ->  FrameDecoder.feed / next_frame
                                                     read_request(frame)
                                                     validate_request_header(header)
                                                     verify_send_messages + stamp_batch
    FrameDecoder.feed / next_frame              <-   build_reply_frame(header,
    read_reply(code, frame)                            encode_reply_body(op, payload))

Modules: ``codes`` (numbers), ``header`` (256-byte headers), ``framing`` (frame
decoder and builders), ``primitives`` (shared encodings), ``batch`` (message batch),
``system``, ``metadata``, ``messages`` and ``users`` (payloads), ``commands`` (registry,
result framing, whole-frame reading), ``errors``.
"""

from sdk.wire._buffer import Buffer
from sdk.wire._payload import Empty
from sdk.wire.batch import (
    BATCH_HEADER_SIZE,
    MAX_PAYLOAD_BYTES,
    MAX_TIMESTAMP_DELTA_US,
    MESSAGE_HEADER_SIZE,
    BatchHeader,
    BatchMessage,
    BatchSlice,
    OutgoingMessage,
    VerifiedBatch,
    batch_checksum,
    build_batch,
    iter_batch_records,
    read_batch,
    slice_batch,
    stamp_batch,
    stamped_batch,
    verify_batch,
)
from sdk.wire.codes import (
    PROTOCOL_VERSION,
    PROTOCOL_VERSION_MIN,
    RUNTIME_STATS_CODE,
    Command,
    CommandCode,
    EvictionReason,
    IggyErrorCode,
    Operation,
    code_for_operation,
    format_protocol_version,
    is_protocol_compatible,
    operation_for_code,
    pack_protocol_version,
    unpack_protocol_version,
)
from sdk.wire.commands import (
    COMMANDS,
    RESULT_OK,
    CommandSpec,
    ReplyPayload,
    RequestPayload,
    encode_reply_body,
    is_result_framed,
    read_reply,
    read_request,
    request_command_code,
    result_ok,
    result_rejected,
    split_result,
)
from sdk.wire.errors import (
    NEED_MORE_BYTES,
    NeedMoreBytes,
    ProtocolError,
    ServerRejected,
    SessionEvicted,
)
from sdk.wire.framing import (
    Frame,
    FrameDecoder,
    build_eviction_frame,
    build_reply_frame,
    build_reply_frame_parts,
    build_request_frame,
    decode_frame,
    request_checksum,
)
from sdk.wire.header import (
    FRAME_SIZE_MAX,
    HEADER_SIZE,
    EvictionHeader,
    ReplyHeader,
    RequestHeader,
    validate_request_header,
)
from sdk.wire.messages import (
    ConsumerOffsetInfo,
    DeleteConsumerOffset,
    GetConsumerOffset,
    PollMessages,
    PollMessagesReply,
    SendConfirmation,
    SendMessages,
    SendMessagesReply,
    StoreConsumerOffset,
    build_send_messages,
    poll_reply_parts,
    verify_send_messages,
)
from sdk.wire.metadata import (
    ConsumerGroupAssignment,
    ConsumerGroupDetails,
    ConsumerGroupInfo,
    ConsumerGroupMember,
    ConsumerGroups,
    CreateConsumerGroup,
    CreateStream,
    CreateTopic,
    GroupRef,
    PartitionInfo,
    PartitionsChange,
    StreamDetails,
    StreamInfo,
    StreamRef,
    Streams,
    TopicDetails,
    TopicInfo,
    TopicRef,
    Topics,
    UpdateStream,
    UpdateTopic,
)
from sdk.wire.primitives import (
    AckLevel,
    Balanced,
    Consumer,
    ConsumerKind,
    HeaderKind,
    Identifier,
    MessagesKey,
    OptionEntry,
    PartitionId,
    Partitioning,
    PollingKind,
    PollingStrategy,
    UserHeader,
    decode_header_value,
    decode_user_headers,
    encode_header_value,
    encode_user_headers,
)
from sdk.wire.system import (
    CacheMetric,
    ClientConsumerGroup,
    ClientInfoDetails,
    ClusterMetadata,
    ClusterNode,
    ClusterNodeRole,
    ClusterNodeStatus,
    ConsumerSessionAttachment,
    LoginRegister,
    LoginRegisterReply,
    PollRoute,
    Stats,
)
from sdk.wire.users import (
    ChangePassword,
    CreateUser,
    GlobalPermissions,
    Permissions,
    StreamPermissions,
    TopicPermissions,
    UpdatePermissions,
    UpdateUser,
    UserDetails,
    UserInfo,
    UserRef,
    Users,
    UserStatus,
    decode_permissions,
    encode_permissions,
)

__all__ = [
    # numbers
    "Command",
    "CommandCode",
    "EvictionReason",
    "IggyErrorCode",
    "Operation",
    "PROTOCOL_VERSION",
    "PROTOCOL_VERSION_MIN",
    "RUNTIME_STATS_CODE",
    "code_for_operation",
    "format_protocol_version",
    "is_protocol_compatible",
    "operation_for_code",
    "pack_protocol_version",
    "unpack_protocol_version",
    # errors
    "NEED_MORE_BYTES",
    "NeedMoreBytes",
    "ProtocolError",
    "ServerRejected",
    "SessionEvicted",
    # headers and frames
    "Buffer",
    "EvictionHeader",
    "FRAME_SIZE_MAX",
    "Frame",
    "FrameDecoder",
    "HEADER_SIZE",
    "ReplyHeader",
    "RequestHeader",
    "build_eviction_frame",
    "build_reply_frame",
    "build_reply_frame_parts",
    "build_request_frame",
    "decode_frame",
    "request_checksum",
    "validate_request_header",
    # shared encodings
    "AckLevel",
    "Balanced",
    "Consumer",
    "ConsumerKind",
    "HeaderKind",
    "Identifier",
    "MessagesKey",
    "OptionEntry",
    "PartitionId",
    "Partitioning",
    "PollingKind",
    "PollingStrategy",
    "UserHeader",
    "decode_header_value",
    "decode_user_headers",
    "encode_header_value",
    "encode_user_headers",
    # message batch
    "BATCH_HEADER_SIZE",
    "BatchHeader",
    "BatchMessage",
    "BatchSlice",
    "MAX_PAYLOAD_BYTES",
    "MAX_TIMESTAMP_DELTA_US",
    "MESSAGE_HEADER_SIZE",
    "OutgoingMessage",
    "VerifiedBatch",
    "batch_checksum",
    "build_batch",
    "iter_batch_records",
    "read_batch",
    "slice_batch",
    "stamp_batch",
    "stamped_batch",
    "verify_batch",
    # payloads
    "CacheMetric",
    "ChangePassword",
    "ClientConsumerGroup",
    "ClientInfoDetails",
    "ClusterMetadata",
    "ClusterNode",
    "ClusterNodeRole",
    "ClusterNodeStatus",
    "ConsumerGroupAssignment",
    "ConsumerGroupDetails",
    "ConsumerGroupInfo",
    "ConsumerGroupMember",
    "ConsumerGroups",
    "ConsumerOffsetInfo",
    "ConsumerSessionAttachment",
    "CreateConsumerGroup",
    "CreateStream",
    "CreateTopic",
    "CreateUser",
    "DeleteConsumerOffset",
    "Empty",
    "GetConsumerOffset",
    "GlobalPermissions",
    "GroupRef",
    "LoginRegister",
    "LoginRegisterReply",
    "PartitionInfo",
    "PartitionsChange",
    "Permissions",
    "PollMessages",
    "PollMessagesReply",
    "PollRoute",
    "SendConfirmation",
    "SendMessages",
    "SendMessagesReply",
    "Stats",
    "StoreConsumerOffset",
    "StreamDetails",
    "StreamInfo",
    "StreamPermissions",
    "StreamRef",
    "Streams",
    "TopicDetails",
    "TopicInfo",
    "TopicPermissions",
    "TopicRef",
    "Topics",
    "UpdatePermissions",
    "UpdateStream",
    "UpdateTopic",
    "UpdateUser",
    "UserDetails",
    "UserInfo",
    "UserRef",
    "UserStatus",
    "Users",
    "build_send_messages",
    "decode_permissions",
    "encode_permissions",
    "poll_reply_parts",
    "verify_send_messages",
    # registry and whole frames
    "COMMANDS",
    "CommandSpec",
    "RESULT_OK",
    "ReplyPayload",
    "RequestPayload",
    "encode_reply_body",
    "is_result_framed",
    "read_reply",
    "read_request",
    "request_command_code",
    "result_ok",
    "result_rejected",
    "split_result",
]
