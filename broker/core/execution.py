"""Carrying out a replica's actions: what each means for the node, and what is left to IO.

Purpose: ``Replica.step`` returns actions in the order the host must carry them out (the
host contract of ``consensus.protocols``). Both hosts, the runtime's on real files and the
simulator's over a simulated disk, do the same with most of them: a message goes to the
peer's link, a reply to the request that waits for it, an appended prepare is made known
to the group's requests, a truncation cancels the report of a write it took back, and a
repair that made the log whole again means the partition's index must be rebuilt. That is
decided here, once. What is left is storage work (append, sync, truncate, superblock,
repair, checkpoint), which :meth:`Execution.run` hands to its host one action at a time
and in order; the host performs each (at once, in a worker thread, or with simulated
latency) before it asks for the next.

Invariants:

1. Every action is carried out once, in the replica's order: storage work is handed out
   in order, and nothing that follows it (a message, a reply, the next work) happens
   before the host asked for the next action, that is before the work was done. So a
   superblock is durable before the message that announces its view leaves.
2. A prepare is made known to the group's requests (``GroupRequests.prepared``) only once
   the host appended it; a reply goes to ``GroupRequests.replied`` with the replica's
   commit and view at that point of the step.
3. ``written`` is the newest prepare appended by the step and not cut by a later
   truncation of the same step: the one whose ``PrepareWritten`` a host that writes in
   step order reports.
4. Pure: no IO of its own, no clock; the host's callbacks are the only way out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from broker.core.groups import GroupRequests
from consensus.events import (
    Action,
    AppendToJournal,
    PrepareWritten,
    RepairJournal,
    ReplyToClient,
    SendToReplica,
    SyncJournal,
    TruncateJournal,
    WriteCheckpoint,
    WriteSuperblock,
)
from consensus.messages import Message, Prepare
from consensus.replica import Replica

StorageWork = (
    AppendToJournal
    | SyncJournal
    | TruncateJournal
    | WriteSuperblock
    | RepairJournal
    | WriteCheckpoint
)
"""The actions only the host's storage can carry out."""


class Execution:
    """One step's actions, carried out for one hosted group (see the module docstring)."""

    __slots__ = ("_replica", "_requests", "_send", "written")

    def __init__(
        self,
        replica: Replica,
        requests: GroupRequests,
        send: Callable[[int, Message], None],
    ) -> None:
        self._replica = replica
        self._requests = requests
        self._send = send
        self.written: Prepare | None = None

    def run(self, actions: Sequence[Action]) -> Iterator[StorageWork]:
        """Carry out ``actions``; yield each piece of storage work for the host to perform
        before it asks for the next."""
        replica = self._replica
        requests = self._requests
        for action in actions:
            if isinstance(action, SendToReplica):
                self._send(action.replica, action.message)
            elif isinstance(action, ReplyToClient):
                requests.replied(action, commit=replica.commit_max, view=replica.view)
            else:
                yield action
                if isinstance(action, AppendToJournal):
                    self.written = action.prepare
                    requests.prepared(action.prepare.header, primary=replica.is_primary)
                elif isinstance(action, TruncateJournal):
                    written = self.written
                    if written is not None and written.op > action.after_op:
                        self.written = None

    def written_event(self) -> PrepareWritten | None:
        """The ``PrepareWritten`` that reports the step's appends, if any is left."""
        written = self.written
        if written is None:
            return None
        return PrepareWritten(written.op, written.checksum)
