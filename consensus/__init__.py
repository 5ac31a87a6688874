"""Sans-IO Viewstamped Replication.

Vocabulary (one word per idea, used everywhere in this package):

- **group**: one replicated state machine. There is one metadata group and one group per
  partition; every node hosts a replica of every group.
- **replica**: a member of a group, numbered ``0..replica_count-1``.
- **view**: a configuration epoch; the **primary** of view ``v`` in group ``g`` is replica
  ``(v + g) % replica_count``, every other replica is a **backup**.
- **log_view**: the latest view in which the replica's log was in normal status.
- **op**: a position in a group's log; **commit** is the highest committed op.
- **prepare** / **prepare_ok**: the primary's replication message and a backup's ack.
- **start_view_change** / **do_view_change** / **start_view**: the view-change messages.
- **client_id**, **session**, **request**: who sent a request, the commit op of the
  client's register, and the client's request number, which together make retries
  idempotent through the client table.

Nothing in this package reads a clock, touches a socket, or draws randomness except
from an injected ``random.Random``. Raft words (leader, term, entry) are not used here.
"""

from consensus.config import ReplicaConfig
from consensus.events import (
    Action,
    AppendToJournal,
    ClientError,
    ClientRequested,
    Event,
    MessageReceived,
    PrepareSynced,
    PrepareWritten,
    RepairJournal,
    ReplyToClient,
    SendToReplica,
    SyncJournal,
    Ticked,
    TruncateJournal,
    WriteCheckpoint,
    WriteSuperblock,
)
from consensus.messages import Message, MessageError, Prepare, decode_message, encode_message
from consensus.protocols import DurableState, Log, StateMachine
from consensus.replica import Replica, Status

__all__ = [
    "Action",
    "AppendToJournal",
    "ClientError",
    "ClientRequested",
    "DurableState",
    "Event",
    "Log",
    "Message",
    "MessageError",
    "MessageReceived",
    "Prepare",
    "PrepareSynced",
    "PrepareWritten",
    "RepairJournal",
    "Replica",
    "ReplicaConfig",
    "ReplyToClient",
    "SendToReplica",
    "StateMachine",
    "Status",
    "SyncJournal",
    "Ticked",
    "TruncateJournal",
    "WriteCheckpoint",
    "WriteSuperblock",
    "decode_message",
    "encode_message",
]
