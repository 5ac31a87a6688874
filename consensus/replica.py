"""The sans-IO VSR replica of one group: ``Replica.step(event) -> list[Action]``.

Purpose: Viewstamped Replication Revisited (Liskov & Cowling 2012) with the fixes real
systems made: durable view and log_view, a client table of committed replies only, a
restarted replica that does not vote or ack until it has rejoined, and truncation of
uncommitted ops only on a proof that they never committed.

Invariants (checked at the end of every ``step`` by ``_check_invariants``):

1. ``log_view <= view``; durable view and log_view never exceed the in-memory ones, and
   status normal means ``log_view == view``.
2. ``commit_min <= journal_verified_op <= journal_op``: every applied op is in the
   journal, the journal is a hash chain, and ops up to ``journal_verified_op`` are known to
   belong to the current log.
3. ``commit_min <= commit_max``; the primary in normal status has at most
   ``pipeline_prepares_max`` ops above ``commit_max``.
4. Ops are applied in op order, each once, and never above ``commit_max``.
5. A PrepareOk for op n in view v is sent only when every op up to n is durable in the
   journal and log_view v is durable.
6. The client table holds committed requests only and at most ``clients_max`` entries.

Theory of operation.

*Normal case (§4.1).* The primary of view v in group g is replica ``(v + g) % n``. It turns
a client request into a prepare (op, view, commit, parent checksum, timestamp), appends it
to its journal and sends it to every backup (star replication). A backup accepts prepares
of its view, appends them in op order (a gap is repaired from the primary) and acknowledges
the highest op that is durable: written, or synced when the group is ``persisted``. The
primary commits the contiguous prefix of ops acknowledged by a majority (its own durable
copy included), applies them, replies, and tells backups through the commit number of the
next prepare, or with a Commit as soon as the commit catches up with the head of its log
(no prepare left in flight would carry it; one per backup, ahead of the replies), or an
idle Commit heartbeat. Backups apply up to the commit number only.

*View change (§4.2).* A backup that hears nothing from its primary moves to view v + 1 and
sends StartViewChange; a majority of them sends DoViewChange to the new primary, with the
sender's log_view, op, commit and the headers of the top of its log. The new primary takes
the log of the DoViewChange with the highest log_view, then the highest op (§4.2 step 3),
keeps every op that may have committed, truncates from the lowest op that a *nack quorum*
proves never committed (a replica nacks a header it does not hold durably: it cannot have
acknowledged it), repairs missing prepares from peers, makes log_view durable and sends
StartView. Backups install it: keep the journal up to the point where it agrees with the
new log (checked by hash chain), truncate above, repair the rest. View and log_view are
written to the superblock before any message that reveals them.

*Restart (§4.3 replaced).* We keep everything on disk, so the paper's Recovery protocol is
replaced by TigerBeetle-style RequestStartView with a nonce, drawn from the injected PRNG
at each start. A restarted replica is ``recovering``: it neither votes nor acks, it asks
every peer for the current view and accepts only a StartView that echoes its nonce (or is
for a view above its durable one), so a StartView sent before the crash cannot roll it
back to a log shorter than what it acknowledged. One answer from the primary is enough,
unlike the paper's f + 1, because the durable view already stops the replica from joining
an older view, which is what the paper's quorum protects against. A replica whose log is
trustworthy (the group is ``persisted``, so it acked only synced prepares, and recovery
found no corruption, neither in the journal nor cut at its head (``Log.head_faulty``, the
head that TigerBeetle's ``recovering_head`` does not trust); or the group has one replica)
may also vote in a view change after its requests go unanswered, so a whole cluster can
restart. An untrusted replica (corruption, or a ``replicated`` group) may have lost
acknowledged prepares and waits for a live primary: if more than f replicas of such a
group restart together, the group stops rather than lose committed ops. Damage found at a
restart is made durable (``DurableState.log_damaged``) before the journal is cut at it,
and stays so until the replica has installed a view's log durably: the cut erases the
damage, and a replica that restarts again before it has rejoined must not meet a whole
looking journal and vote with a log that lacks what it acknowledged.

*Repair and state transfer (§5.2).* Missing prepares are requested by op range in chunks
of ``repair_chunk_max`` and verified by checksum against the known header, or against the
parent checksum of the next op. A replica more than ``repair_ops_max`` behind the commit,
or whose repair makes no progress, fetches a snapshot (state machine and client table) in
chunks and resumes from its op; state transfer never changes the view.

The four decisions a simulator may break on purpose each live in one method:
``_canonical_do_view_change`` (which log a new primary takes), ``_ackable_op`` (when a
backup may send PrepareOk), ``_commit_client_reply`` (where the client table is updated)
and ``_apply_op_max`` (how far a replica may apply).
"""

from __future__ import annotations

import enum
import random
import struct
from dataclasses import dataclass, field, replace
from typing import Final

from consensus.client_table import ClientTable, SessionLive, Verdict
from consensus.config import (
    REPLICAS_MAX,
    TICKS_IDLE,
    ReplicaConfig,
    Timeout,
    quorum_nack,
    quorum_replication,
    quorum_view_change,
)
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
from consensus.messages import (
    PREPARE_HEADER,
    VIEW_HEADERS_MAX,
    Commit,
    DoViewChange,
    Message,
    MessageError,
    Prepare,
    PrepareHeader,
    PrepareOk,
    RepairPrepare,
    RequestPrepares,
    RequestSnapshot,
    RequestStartView,
    SnapshotChunk,
    StartView,
    StartViewChange,
    checksum,
    make_prepare_header,
    root_header,
    unpack_prepare_header,
)
from consensus.protocols import DurableState, Log, RequestRejected, StateMachine

# magic, op, log_op_min, client table size, state machine size
_SNAPSHOT_HEADER: Final = struct.Struct("<4sQQIQ")
assert _SNAPSHOT_HEADER.size == 32
_SNAPSHOT_MAGIC: Final = b"VSS3"  # VSS3: with log_op_min; 152-byte headers, VCT3 tables
_SNAPSHOT_HEADER_V2: Final = struct.Struct("<4sQIQ")  # magic, op, table size, sm size
_SNAPSHOT_MAGIC_V2: Final = b"VSS2"  # read only: log_op_min 1 (every op the log holds)


_VERDICT_ERRORS: Final = {
    Verdict.NO_SESSION: ClientError.NO_SESSION,
    Verdict.SESSION_EVICTED: ClientError.SESSION_EVICTED,
    Verdict.REQUEST_MISMATCH: ClientError.REQUEST_MISMATCH,
}
"""The verdicts a client is told of with an error reply (nothing was applied)."""


class Status(enum.Enum):
    NORMAL = "normal"
    VIEW_CHANGE = "view_change"
    RECOVERING = "recovering"


@dataclass(slots=True)
class _StateTransfer:
    """A snapshot being fetched chunk by chunk from one peer."""

    peer: int
    op: int = 0
    size: int = 0
    snapshot_checksum: bytes = b""
    data: bytearray = field(default_factory=bytearray)


def encode_snapshot(
    op: int, header: PrepareHeader, table: bytes, state: bytes, *, log_op_min: int
) -> bytes:
    """The state after op ``op``: its header (the chain anchor), the oldest op whose record
    the log must keep beside it (``StateMachine.log_op_min``), client table, state machine."""
    assert header.op == op
    assert 1 <= log_op_min <= op + 1
    return (
        _SNAPSHOT_HEADER.pack(_SNAPSHOT_MAGIC, op, log_op_min, len(table), len(state))
        + header.pack()
        + table
        + state
    )


def decode_snapshot(data: bytes) -> tuple[int, PrepareHeader, bytes, bytes, int]:
    """Inverse of ``encode_snapshot``: (op, header, table, state, log_op_min); a VSS2
    snapshot, which does not say, has log_op_min 1. MessageError if the bytes are not a
    snapshot."""
    if len(data) < _SNAPSHOT_HEADER_V2.size + PREPARE_HEADER.size:
        raise MessageError("truncated snapshot")
    if data[:4] == _SNAPSHOT_MAGIC_V2:
        _, op, table_size, state_size = _SNAPSHOT_HEADER_V2.unpack_from(data, 0)
        log_op_min = 1
        offset = _SNAPSHOT_HEADER_V2.size
    else:
        if len(data) < _SNAPSHOT_HEADER.size + PREPARE_HEADER.size:
            raise MessageError("truncated snapshot")
        magic, op, log_op_min, table_size, state_size = _SNAPSHOT_HEADER.unpack_from(data, 0)
        if magic != _SNAPSHOT_MAGIC or not 1 <= log_op_min <= op + 1:
            raise MessageError("snapshot magic or log_op_min is wrong")
        offset = _SNAPSHOT_HEADER.size
    header = unpack_prepare_header(data, offset)
    offset += PREPARE_HEADER.size
    if header.op != op:
        raise MessageError("snapshot op is wrong")
    if len(data) != offset + table_size + state_size:
        raise MessageError("snapshot length is wrong")
    table = data[offset : offset + table_size]
    state = data[offset + table_size :]
    return op, header, table, state, log_op_min


class Replica:
    """One replica of one VSR group; see the module docstring."""

    def __init__(
        self,
        group: int,
        replica: int,
        replica_count: int,
        log: Log,
        state_machine: StateMachine,
        prng: random.Random,
        *,
        persisted: bool = False,
        durable: DurableState | None = None,
        checkpoint: bytes | None = None,
        register_operation: int | None = None,
        session_live: SessionLive | None = None,
        config: ReplicaConfig | None = None,
    ) -> None:
        """Create a replica.

        Args:
            group: the group id; the primary of view v is ``(v + group) % replica_count``.
            replica: this replica's index, ``0 <= replica < replica_count``.
            replica_count: the number of replicas in the group (1 to REPLICAS_MAX).
            log: the journal, read by the replica, written by the host through actions.
            state_machine: the application, fed committed prepares in op order.
            prng: the only source of randomness (nonces, timeout jitter, peer choice).
            persisted: acknowledge a prepare only once synced, not merely written.
            durable: the superblock read at start; None for a freshly formatted replica,
                which starts in view 0, normal. Anything else is a restart.
            checkpoint: the snapshot of the last ``WriteCheckpoint`` (restart only).
            register_operation: the operation code of Register, set for the metadata group
                (whose committed registers create sessions); None for partition groups.
            session_live: whether the state machine still holds session ``session`` for
                ``client_id`` (metadata group only): a register that repeats the one that
                opened a session is answered from the client table while it lives and
                runs again once it ended. None: sessions end only when superseded.
            config: bounds and timeouts; defaults to the named constants.
        """
        assert 1 <= replica_count <= REPLICAS_MAX
        assert 0 <= replica < replica_count
        assert group >= 0
        self.group = group
        self.replica = replica
        self.replica_count = replica_count
        self.persisted = persisted
        self.register_operation = register_operation
        self.config = config if config is not None else ReplicaConfig()
        self._log = log
        self._state_machine = state_machine
        self._prng = prng
        self._actions: list[Action] = []
        # Whether a whole step ran since construction (a restart leaves actions and state
        # for the first step to hand over; see ``ticks_idle``).
        self._stepped = False

        self.client_table = ClientTable(
            self.config.clients_max,
            registers_sessions=register_operation is not None,
            session_live=session_live,
        )
        root = root_header(group)
        self.status = Status.NORMAL
        self.view = 0
        self.log_view = 0
        self.commit_min = 0  # applied up to here
        self.commit_max = 0  # known committed up to here
        self.op = 0  # head of the current log
        self.checkpoint_op = 0
        self.durable = DurableState(view=0, log_view=0, commit=0, checkpoint=0)
        # Headers of the current log (canonical for log_view) for ops >= commit_min.
        self._headers: dict[int, PrepareHeader] = {0: root}
        # Headers of the journal for ops in [commit_min, journal_op] (a hash chain).
        self._journal: dict[int, PrepareHeader] = {0: root}
        self.journal_op = 0
        self.journal_verified_op = 0
        # Prepare bodies of the current log above commit_min (journaled or waiting).
        self._prepares: dict[int, Prepare] = {}
        # Repair answers that cannot be verified yet (their child header is unknown).
        self._stash: dict[int, Prepare] = {}
        self._op_written = 0
        self._op_synced = 0
        self._sync_needed = False
        self._sync_requested_op = 0
        # The op at which the current view's log was installed (from StartView).
        self._view_op = 0
        self._acked_op = 0  # the highest op this backup acknowledged in this view
        # Primary: ack bitmask per op in the pipeline (commit_max, op].
        self._acks: dict[int, int] = {}
        # View change.
        self._start_view_change_from = 0  # bitmask of replicas
        self._do_view_changes: dict[int, DoViewChange] = {}
        self._do_view_change_sent = False
        self._view_change_decided = False
        self._view_seen_max = 0
        # Recovery.
        self.nonce = 0
        self.log_intact = True
        self._recovering_from = 0  # bitmask: peers seen asking for the view while recovering
        self._recovering_attempts = 0
        # Repair and state transfer.
        self._repair_lo_last = -1
        self._repair_hi_asked = 0  # op_max of the latest RequestPrepares
        # Committed ops whose records recovery found damaged below the checkpoint, ascending;
        # repaired from peers where the log is the data (``config.state_transfer`` off).
        self._faulty_committed: list[int] = []
        # The journal on disk ends below the checkpoint (recovery cut committed records):
        # nothing may be appended until the missing committed ops are back (backfill).
        self._backfill_pending = False
        # Rounds the lowest missing committed record has been asked for in vain.
        self._backfill_op_last = 0
        # A checkpoint fell due at an op the host had not appended yet (see
        # ``_checkpoint_due``): it is taken once the log holds every applied op.
        self._checkpoint_owed = False
        self._backfill_attempts = 0
        self._repair_attempts = 0
        self._state_transfer: _StateTransfer | None = None
        self._snapshot_cache: tuple[int, bytes, bytes] | None = None  # op, bytes, checksum

        cfg = self.config
        self._timeout_prepare = Timeout("prepare", cfg.prepare_timeout_ticks)
        self._timeout_commit = Timeout("commit", cfg.commit_interval_ticks)
        self._timeout_normal = Timeout("normal", cfg.normal_timeout_ticks, jitter=True)
        self._timeout_view_change = Timeout(
            "view_change", cfg.view_change_timeout_ticks, jitter=True
        )
        self._timeout_view_change_resend = Timeout(
            "view_change_resend", cfg.view_change_resend_ticks
        )
        self._timeout_repair = Timeout("repair", cfg.repair_timeout_ticks)
        self._timeout_recovering = Timeout("recovering", cfg.recovering_timeout_ticks, jitter=True)
        self._timeout_state_transfer = Timeout("state_transfer", cfg.state_transfer_timeout_ticks)
        for timeout in self._timeouts():
            timeout.reset(prng)

        if durable is None:
            assert log.op_max() == 0, "a freshly formatted replica has an empty journal"
        else:
            self._restart(durable, checkpoint)
        self._check_invariants()

    # Public surface ----------------------------------------------------------------------

    def primary_index(self, view: int) -> int:
        return (view + self.group) % self.replica_count

    @property
    def primary(self) -> int:
        """The index of the primary of this replica's view."""
        return self.primary_index(self.view)

    @property
    def is_primary(self) -> bool:
        # ``primary_index(view) == replica``, inlined: asked several times in every step.
        return (self.view + self.group) % self.replica_count == self.replica

    @property
    def judges_requests(self) -> bool:
        """Whether a ``ClientRequested`` fed now is judged (answered from the client
        table, refused, absorbed or prepared) rather than dropped for this replica's state:
        only a primary in normal status whose table reflects every committed op, in a view
        whose log it holds, with no committed ops missing from its journal. A host holds
        requests while this is false instead of re-deriving the rule."""
        return (
            self.status is Status.NORMAL
            and self.is_primary
            and self.commit_min == self.commit_max
            and self.durable.log_view == self.view
            and not self._backfill_pending
        )

    @property
    def pipeline_has_room(self) -> bool:
        """Whether a new request would find room in the pipeline (a full one drops it)."""
        return self.op - self.commit_max < self.config.pipeline_prepares_max

    def step(self, event: Event) -> list[Action]:
        """Feed one event; return the actions for the host, in the order to execute them."""
        if isinstance(event, Ticked) and self.ticks_idle(event.count):
            # Only timeouts with nothing to do count down (and rearm): no state that
            # ``_advance`` reads moved, so it would find nothing to do.
            self._pass_idle_ticks(event.count)
            self._check_invariants()
            return []
        if isinstance(event, MessageReceived):
            self._on_message(event.message)
        elif isinstance(event, Ticked):
            self._on_ticks(event.count)
        elif isinstance(event, ClientRequested):
            self.on_client_requested(event)
        elif isinstance(event, PrepareWritten):
            self.on_prepare_written(event)
        else:
            assert isinstance(event, PrepareSynced)
            self.on_prepare_synced(event)
        self._advance()
        self._check_invariants()
        self._stepped = True
        actions, self._actions = self._actions, []
        return actions

    # Restart -----------------------------------------------------------------------------

    def _restart(self, durable: DurableState, checkpoint: bytes | None) -> None:
        """Rebuild memory from the superblock, the checkpoint and the journal (§4.3)."""
        self.status = Status.RECOVERING
        self.durable = durable
        self.checkpoint_op = durable.checkpoint
        self.view = durable.view
        self.log_view = durable.log_view
        self._view_seen_max = durable.view
        # The oldest op whose record the state needs from the log (1: every op it holds).
        log_op_min = 1
        if durable.checkpoint > 0:
            assert checkpoint is not None, "the host must pass the checkpoint snapshot"
            op, header, table, state, log_op_min = decode_snapshot(checkpoint)
            assert op == durable.checkpoint
            self._install_snapshot_state(op, header, table, state)
        faulty = list(self._log.faulty_ops())
        # Load the journal above the checkpoint, stopping at the first record that is
        # missing, corrupt or off the hash chain: everything above it is re-fetched.
        log_op_max = self._log.op_max()
        previous = self._journal[self.commit_min]
        op = self.commit_min
        while op < log_op_max:
            prepare = self._log.read(op + 1)
            if (
                prepare is None
                or prepare.op != op + 1
                or prepare.header.parent != previous.checksum
            ):
                break
            previous = prepare.header
            op += 1
            self._journal[op] = previous
            self._headers[op] = previous
        self.journal_op = op
        self.journal_verified_op = op
        self.op = op
        self._op_written = op
        self._op_synced = op
        # Corruption means we may have acknowledged what we no longer hold: such a replica
        # must never vote before it has rejoined (Protocol-Aware Recovery). That includes
        # damage at the head that recovery cut with the torn tail: the ops cut are unknown,
        # not absent, and a DoViewChange from this log would nack them or, from the
        # highest log_view, make a log without them canonical. A lone replica has nobody
        # who could hold them, so its log is all there is.
        head_faulty = self._log.head_faulty() and self.replica_count > 1
        damaged = bool(faulty) or op < log_op_max or head_faulty
        if damaged and self.replica_count > 1 and not durable.log_damaged:
            # Durable before the truncation below: cutting the damaged records erases what
            # recovery found, and a restart after it must still know not to vote.
            self.durable = replace(durable, log_damaged=True)
            self._actions.append(WriteSuperblock(state=self.durable))
        if op < log_op_max:
            self._actions.append(TruncateJournal(after_op=op))
        if not self.config.state_transfer:
            # The log is the data: committed records below the checkpoint that recovery
            # found damaged, or cut (the journal ends below the checkpoint), come back
            # from peers, in op order (``RepairJournal``): those the checkpoint's state
            # still needs (from its ``log_op_min``; older ones hold only retired data).
            self._faulty_committed = [k for k in faulty if log_op_min <= k <= self.commit_min]
            first = max(log_op_max + 1, log_op_min)
            if first <= self.commit_min:
                self._faulty_committed += range(first, self.commit_min + 1)
            if first > log_op_max + 1 and (first <= self.commit_min or log_op_max > 0):
                # The journal ends below the first op the state needs (it was cut, or a
                # state transfer restarted it and a crash took what was backfilled): the
                # backfill cannot continue it, so it starts afresh at that op. That op may
                # be the one after the checkpoint (the state retired every record up to
                # it, so nothing is backfilled): the next append must still follow it.
                assert checkpoint is not None
                self._actions.append(
                    WriteCheckpoint(
                        op=self.commit_min, snapshot=checkpoint, journal_restart_op=first
                    )
                )
            # Until they are back, nothing is appended: a damaged region that reaches
            # above the checkpoint is cut whole by the truncation above, so the journal
            # may end below the checkpoint even when recovery kept it longer.
            self._backfill_pending = bool(self._faulty_committed)
        self.commit_max = max(self.commit_min, durable.commit)
        # Replay: committed ops in the journal are applied silently (no replies).
        self._apply_committed()
        # A lone replica's log is all there is, damaged or not: with nobody to repair from
        # or to outvote it, refusing itself a vote would stop the group for good.
        # In a ``persisted`` group it acknowledged only synced prepares, so what a power
        # loss tore was never promised; in a ``replicated`` one the durability level says
        # a power loss may take what was acknowledged.
        self.log_intact = self.replica_count == 1 or not (damaged or durable.log_damaged)
        self.nonce = self._prng.getrandbits(63) + 1
        if self.replica_count == 1:
            # Nobody to ask: the log is all there is.
            self._start_view_change(self.view + 1)
        else:
            self._send_request_start_view()

    # Dispatch ----------------------------------------------------------------------------

    def _on_message(self, message: Message) -> None:
        if isinstance(message, Prepare):
            if message.header.group == self.group:
                self.on_prepare(message)
            return
        if message.group != self.group or message.replica == self.replica:
            return
        if not 0 <= message.replica < self.replica_count:
            return
        self._view_seen_max = max(self._view_seen_max, message.view)
        if isinstance(message, PrepareOk):
            self.on_prepare_ok(message)
        elif isinstance(message, Commit):
            self.on_commit(message)
        elif isinstance(message, StartViewChange):
            self.on_start_view_change(message)
        elif isinstance(message, DoViewChange):
            self.on_do_view_change(message)
        elif isinstance(message, StartView):
            self.on_start_view(message)
        elif isinstance(message, RequestStartView):
            self.on_request_start_view(message)
        elif isinstance(message, RequestPrepares):
            self.on_request_prepares(message)
        elif isinstance(message, RepairPrepare):
            self.on_repair_prepare(message)
        elif isinstance(message, RequestSnapshot):
            self.on_request_snapshot(message)
        else:
            assert isinstance(message, SnapshotChunk)
            self.on_snapshot_chunk(message)

    def _timeouts(self) -> tuple[Timeout, ...]:
        return (
            self._timeout_prepare,
            self._timeout_commit,
            self._timeout_normal,
            self._timeout_view_change,
            self._timeout_view_change_resend,
            self._timeout_repair,
            self._timeout_recovering,
            self._timeout_state_transfer,
        )

    def ticks_until_due(self) -> int:
        """Ticks until the next timeout fires that has something to do: at least 1.

        Every timeout runs all the time, but most fire with nothing to do (a lone replica
        has nobody to heartbeat, a replica in normal status no view change to push). The
        ticks before the due one only count down and fire such idle timeouts, which
        change nothing but their countdowns, so a host may pass them together in one
        ``Ticked(count)``. ``TICKS_IDLE`` when no timeout has anything to do.
        """
        # Each predicate is its handler's first test(s), negated: "would not act" must be
        # exact for a handler to be fired inside a batch of ticks. Asked several times
        # per step by a host, so the dear one, the repair's, is asked only when its
        # timeout is the earliest of those that act.
        status = self.status
        normal = status is Status.NORMAL
        primary = self.is_primary
        together = self.replica_count > 1
        view_change = status is Status.VIEW_CHANGE
        due = TICKS_IDLE
        for timeout, acts in (
            (self._timeout_prepare, normal and primary and together and self.commit_max < self.op),
            (self._timeout_commit, normal and primary and together),
            (self._timeout_normal, normal and not primary),
            (self._timeout_view_change, view_change),
            (self._timeout_view_change_resend, view_change),
            (self._timeout_recovering, status is Status.RECOVERING),
            (self._timeout_state_transfer, self._state_transfer is not None),
        ):
            if acts and timeout.ticks_left < due:
                due = timeout.ticks_left
        repair = self._timeout_repair
        if repair.ticks_left < due and self._repair_would_act():
            due = repair.ticks_left
        return due

    def _repair_would_act(self) -> bool:
        """Whether ``_request_repair`` would do anything now (sends or state changes)."""
        if self.status is Status.RECOVERING or self.replica_count == 1:
            return False
        if self._faulty_committed and self.status is Status.NORMAL:
            return True  # _request_committed_repair asks a peer
        if self._state_transfer is not None:
            return False
        if (
            self.config.state_transfer
            and self.commit_max - self.commit_min > self.config.repair_ops_max
        ):
            return True
        return self._repair_attempts != 0 or self._missing_op_min() is not None

    def ticks_idle(self, count: int) -> bool:
        """Whether ``Ticked(count)`` would only count idle timeouts down: none of them
        reaches the due timeout, the replica has taken a whole step since it was built (a
        restart's actions wait for the first one), and no checkpoint waits for a step
        (``_checkpoint_due``). Such a step returns no actions and changes nothing but the
        countdowns and the PRNG. A busy group's host pays the ticks owed before nearly
        every event, so most of its tick steps are these; they skip the rest of ``step``."""
        return self._stepped and not self._checkpoint_owed and count < self.ticks_until_due()

    def _on_ticks(self, count: int) -> None:
        due = self.ticks_until_due()
        assert 1 <= count <= due, (count, due)
        # Before the last tick only timeouts with nothing to do fire, and their handlers
        # change nothing: those ticks only count down and rearm, so they pass at once.
        self._pass_idle_ticks(count - 1)
        self._on_tick()

    def _pass_idle_ticks(self, ticks: int) -> None:
        """Count ``ticks`` down on every timeout, as ``ticks`` single ticks would when
        every timeout firing in them has nothing to do. The fixed timeouts' rearms are
        arithmetic; the jittered ones draw from the PRNG at each rearm, so those are made
        one by one, by tick and then in ``_timeouts`` order, the order ticks draw them."""
        timeouts = self._timeouts()
        if all(timeout.ticks_left > ticks for timeout in timeouts):
            # Nothing fires, so nothing rearms or draws: a plain countdown (most calls).
            for timeout in timeouts:
                timeout.ticks_left -= ticks
            return
        jittered = [timeout for timeout in timeouts if timeout.jitter]
        left = ticks
        while left:
            gap = min(left, *(timeout.ticks_left for timeout in jittered))
            for timeout in jittered:
                timeout.elapse(gap, self._prng)
            left -= gap
        for timeout in timeouts:
            if not timeout.jitter:
                timeout.elapse(ticks, self._prng)

    def _on_tick(self) -> None:
        # Every timeout runs all the time; each handler acts only when it applies.
        if self._timeout_prepare.tick(self._prng):
            self.on_prepare_timeout()
        if self._timeout_commit.tick(self._prng):
            self.on_commit_timeout()
        if self._timeout_normal.tick(self._prng):
            self.on_normal_timeout()
        if self._timeout_view_change.tick(self._prng):
            self.on_view_change_timeout()
        if self._timeout_view_change_resend.tick(self._prng):
            self.on_view_change_resend_timeout()
        if self._timeout_repair.tick(self._prng):
            self.on_repair_timeout()
        if self._timeout_recovering.tick(self._prng):
            self.on_recovering_timeout()
        if self._timeout_state_transfer.tick(self._prng):
            self.on_state_transfer_timeout()

    # Helpers -----------------------------------------------------------------------------

    def _send(self, replica: int, message: Message) -> None:
        assert replica != self.replica
        self._actions.append(SendToReplica(replica=replica, message=message))

    def _broadcast(self, message: Message) -> None:
        for replica in range(self.replica_count):
            if replica != self.replica:
                self._send(replica, message)

    def _others(self) -> list[int]:
        return [r for r in range(self.replica_count) if r != self.replica]

    def _random_peer(self) -> int:
        others = self._others()
        assert others
        return others[self._prng.randrange(len(others))]

    def _write_superblock(self) -> None:
        """Persist view, durable log_view, commit, checkpoint and log_damaged if any of
        them (but the commit) moved."""
        view = self.view
        view_log_durable = self._view_log_durable()
        log_view = self.log_view if view_log_durable else self.durable.log_view
        # Once the journal durably holds a view's log installed since the restart, it holds
        # every op that can have committed, whatever the damage took.
        log_damaged = self.durable.log_damaged and not view_log_durable
        if (view, log_view, self.checkpoint_op, log_damaged) == (
            self.durable.view,
            self.durable.log_view,
            self.durable.checkpoint,
            self.durable.log_damaged,
        ):
            return  # the commit alone is a hint, not worth a superblock write per op
        state = DurableState(
            view=view,
            log_view=log_view,
            commit=max(self.durable.commit, self.commit_min),
            checkpoint=self.checkpoint_op,
            log_damaged=log_damaged,
        )
        if state != self.durable:
            assert state.view >= self.durable.view
            assert state.log_view >= self.durable.log_view
            self.durable = state
            self._actions.append(WriteSuperblock(state=state))

    def _view_log_durable(self) -> bool:
        """Whether the journal durably holds the current view's log up to the op the view
        started at: only then may log_view be durable, so a restart never pairs a new
        log_view with an old journal (tigerbeetle#2253 found the same hole)."""
        return (
            self.status is Status.NORMAL
            and self.journal_verified_op >= self._view_op
            and self._op_durable() >= self._view_op
        )

    def _op_durable(self) -> int:
        durable = self._op_synced if self.persisted else self._op_written
        return min(durable, self.journal_op)

    def _quorum_replication(self) -> int:
        return quorum_replication(self.replica_count)

    # Decision points ---------------------------------------------------------------------

    def _canonical_do_view_change(self, dvcs: list[DoViewChange]) -> DoViewChange:
        """The DoViewChange whose log the new view takes (§4.2 step 3).

        Highest log_view first: logs from the latest normal view contain every committed
        op. Only among those does the longest win; a longer log from an older view may hold
        ops that a later view replaced.
        """
        return max(dvcs, key=lambda d: (d.log_view, d.op, -d.replica))

    def _ackable_op(self) -> int:
        """The highest op this backup may acknowledge: durable and in the current log."""
        return min(self._op_durable(), self.journal_verified_op)

    def _commit_client_reply(self, prepare: Prepare, reply: bytes) -> None:
        """Record a committed reply in the client table: the only writer of the table."""
        register = (
            self.register_operation is not None
            and prepare.header.operation == self.register_operation
        )
        self.client_table.commit(prepare, reply, register=register)

    def _apply_op_max(self) -> int:
        """The highest op this replica may apply: committed and in the verified journal."""
        return min(self.commit_max, self.journal_verified_op)

    # Client requests ---------------------------------------------------------------------

    def _in_pipeline(self, client_id: int) -> PrepareHeader | None:
        """The header of ``client_id``'s prepare in the pipeline, if it has one."""
        for op in range(self.commit_max + 1, self.op + 1):
            header = self._headers[op]
            if header.client_id == client_id:
                return header
        return None

    def would_prepare(
        self,
        client_id: int,
        session: int,
        request: int,
        operation: int,
        request_checksum: bytes,
    ) -> bool:
        """Whether a request from ``client_id`` would be new work: not in the pipeline, and
        judged new by the client table (not a retry it answers or drops). Pure: it lets a
        host refuse new work it has no room for while retries still get their answers."""
        if self._in_pipeline(client_id) is not None:
            return False
        register = self.register_operation is not None and operation == self.register_operation
        verdict = self.client_table.judge(
            client_id,
            session,
            request,
            register=register,
            operation=operation,
            request_checksum=request_checksum,
        )
        return verdict is Verdict.NEW

    def on_client_requested(self, event: ClientRequested) -> None:
        # Only a primary in normal status whose table reflects every committed op may
        # judge a request; anyone else drops it and the client retries elsewhere.
        if not self.judges_requests:
            return
        register = (
            self.register_operation is not None and event.operation == self.register_operation
        )
        # In-flight requests are absorbed by the pipeline: the reply follows its commit. A
        # client has one request in flight per group; another request (even one under the
        # same number) is dropped until that one commits, and is never given its reply.
        if self._in_pipeline(event.client_id) is not None:
            return
        verdict = self.client_table.judge(
            event.client_id,
            event.session,
            event.request,
            register=register,
            operation=event.operation,
            request_checksum=event.request_checksum,
        )
        if verdict is Verdict.STALE:
            if not register:
                # Older than the client's latest committed request: never applied again,
                # and its reply is no longer kept. Saying so (as Iggy's "reply aged out")
                # spares a client that still waits for it a timeout. A late copy of a
                # login stays silent: nobody waits for it (client table, invariant 7).
                self._actions.append(
                    ReplyToClient(
                        event.client_id,
                        event.session,
                        event.request,
                        event.operation,
                        event.request_checksum,
                        0,
                        b"",
                        ClientError.ALREADY_APPLIED,
                    )
                )
            return
        if verdict is Verdict.DUPLICATE:
            cached = self.client_table.cached_reply(
                event.client_id,
                register=register,
                operation=event.operation,
                request_checksum=event.request_checksum,
            )
            self._actions.append(
                ReplyToClient(
                    event.client_id,
                    cached.session,
                    cached.request,
                    event.operation,
                    event.request_checksum,
                    cached.op,
                    cached.reply,
                )
            )
            return
        if verdict in _VERDICT_ERRORS:
            self._actions.append(
                ReplyToClient(
                    event.client_id,
                    event.session,
                    event.request,
                    event.operation,
                    event.request_checksum,
                    0,
                    b"",
                    _VERDICT_ERRORS[verdict],
                )
            )
            return
        assert verdict is Verdict.NEW
        if not self.pipeline_has_room:
            return  # pipeline full: the client retries
        if event.client_id == 0:
            return  # client id 0 is reserved
        parent = self._headers[self.op]
        # Monotonic, so the state machine sees time move forward across primaries.
        timestamp_us = max(event.timestamp_us, parent.timestamp_us + 1)
        try:
            prepared = self._state_machine.prepare(
                self.op + 1, event.operation, event.body, timestamp_us, parent.frontier
            )
        except RequestRejected as rejection:
            self._actions.append(
                ReplyToClient(
                    event.client_id,
                    event.session,
                    event.request,
                    event.operation,
                    event.request_checksum,
                    0,
                    b"",
                    status=rejection.status,
                )
            )
            return
        header = make_prepare_header(
            group=self.group,
            view=self.view,
            op=self.op + 1,
            commit=self.commit_max,
            parent=parent.checksum,
            client_id=event.client_id,
            session=0 if register else event.session,
            request=event.request,
            operation=event.operation,
            timestamp_us=timestamp_us,
            body=prepared.body,
            frontier=prepared.frontier,
            request_checksum=event.request_checksum,
        )
        prepare = Prepare(header=header, body=prepared.body)
        self.op = header.op
        self._headers[header.op] = header
        self._prepares[header.op] = prepare
        self._acks[header.op] = 0
        self._append_journal(prepare)
        for replica in self._others():
            self._send(replica, prepare)
        if self.op - self.commit_max == 1:
            self._timeout_prepare.reset(self._prng)

    # Journal -----------------------------------------------------------------------------

    def _append_journal(self, prepare: Prepare) -> None:
        header = prepare.header
        assert header.op == self.journal_op + 1
        assert self.journal_verified_op == self.journal_op
        assert header.parent == self._journal[self.journal_op].checksum
        self._journal[header.op] = header
        self.journal_op = header.op
        self.journal_verified_op = header.op
        self._actions.append(AppendToJournal(prepare=prepare))
        self._sync_needed = self.persisted

    def _truncate_journal(self, after_op: int) -> None:
        assert self.commit_min <= after_op < self.journal_op
        for op in range(after_op + 1, self.journal_op + 1):
            del self._journal[op]
        self.journal_op = after_op
        self.journal_verified_op = min(self.journal_verified_op, after_op)
        self._op_written = min(self._op_written, after_op)
        self._op_synced = min(self._op_synced, after_op)
        self._sync_requested_op = min(self._sync_requested_op, after_op)
        self._actions.append(TruncateJournal(after_op=after_op))

    def on_prepare_written(self, event: PrepareWritten) -> None:
        header = self._journal.get(event.op)
        if header is None or header.checksum != event.checksum:
            return  # truncated and replaced since, or already applied and pruned
        self._op_written = max(self._op_written, event.op)

    def on_prepare_synced(self, event: PrepareSynced) -> None:
        header = self._journal.get(event.op)
        if header is None or header.checksum != event.checksum:
            return
        self._op_synced = max(self._op_synced, event.op)

    def _expected_checksum(self, op: int) -> bytes | None:
        """The checksum op must have in the current log, if known (by header or chain)."""
        header = self._headers.get(op)
        if header is not None:
            return header.checksum
        child = self._headers.get(op + 1)
        if child is not None:
            return child.parent
        return None

    def _verify_journal(self) -> None:
        """Advance journal_verified_op and truncate the journal where it leaves the log."""
        if self.journal_verified_op == self.journal_op:
            return
        # A match at op k proves, by hash chain, that the journal agrees up to k.
        for op in range(min(self.journal_op, self.op), self.journal_verified_op, -1):
            expected = self._expected_checksum(op)
            if expected is not None and expected == self._journal[op].checksum:
                for verified in range(self.journal_verified_op + 1, op + 1):
                    self._headers.setdefault(verified, self._journal[verified])
                self.journal_verified_op = op
                break
        next_op = self.journal_verified_op + 1
        if next_op <= self.journal_op:
            expected = self._expected_checksum(next_op)
            beyond_log = next_op > self.op
            if beyond_log or (expected is not None and expected != self._journal[next_op].checksum):
                self._truncate_journal(self.journal_verified_op)

    def _append_ready(self) -> None:
        """Append waiting prepares that continue the verified journal, in op order."""
        if self.journal_verified_op != self.journal_op or self._backfill_pending:
            return
        while True:
            prepare = self._prepares.get(self.journal_op + 1)
            if prepare is None:
                return
            expected = self._expected_checksum(prepare.op)
            if expected != prepare.checksum:
                return
            if prepare.header.parent != self._journal[self.journal_op].checksum:
                return
            self._append_journal(prepare)

    def _learn(self, prepare: Prepare) -> None:
        """Take a prepare known to belong to the current log, then any it vouches for."""
        while True:
            header = prepare.header
            op = header.op
            if op <= self.commit_min:
                return
            known = self._headers.get(op)
            if known is not None and known.checksum != header.checksum:
                return
            self._headers[op] = header
            if op > self.journal_verified_op or op not in self._journal:
                self._prepares[op] = prepare
            parent = self._stash.pop(op - 1, None)
            if parent is None or parent.checksum != header.parent:
                return
            prepare = parent

    def _prepare_body(self, op: int) -> Prepare | None:
        prepare = self._prepares.get(op)
        if prepare is not None:
            return prepare
        prepare = self._log.read(op)
        header = self._journal.get(op)
        if prepare is None or header is None or prepare.checksum != header.checksum:
            return None
        return prepare

    # Advancing ---------------------------------------------------------------------------

    def _advance(self) -> None:
        """Do everything the current state allows, in dependency order."""
        if self.status is not Status.RECOVERING:
            self._verify_journal()
            self._append_ready()
        self._maybe_start_view()
        self._commit_pipeline()
        self._apply_committed()
        self._write_superblock()
        self._send_prepare_oks()
        self._flush_sync()

    def _flush_sync(self) -> None:
        if self._sync_needed and self.journal_op > self._sync_requested_op:
            self._sync_requested_op = self.journal_op
            self._actions.append(
                SyncJournal(op=self.journal_op, checksum=self._journal[self.journal_op].checksum)
            )
        self._sync_needed = False

    def _commit_pipeline(self) -> None:
        if not (self.status is Status.NORMAL and self.is_primary):
            return
        quorum = self._quorum_replication()
        own = self._op_durable()
        commit_before = self.commit_max
        while self.commit_max < self.op:
            op = self.commit_max + 1
            acks = self._acks.get(op, 0)
            if own >= op:
                acks |= 1 << self.replica
            if acks.bit_count() < quorum:
                break
            self.commit_max = op
            self._acks.pop(op, None)
        if self.commit_max > commit_before and self.commit_max == self.op:
            self._send_commit_drained()

    def _send_commit_drained(self) -> None:
        """Tell the backups the commit the moment the pipeline drains (§4.1's Commit, sent
        when it is news rather than only when idle): with no prepare left in flight, none
        would carry it, and a read on a backup would wait for the heartbeat. Ahead of the
        replies this step makes, so a client told of its write finds a backup that knows.

        Bounded: only a step that advanced the commit sends, one Commit per backup, and
        while prepares are in flight the next prepare carries the commit instead. The
        heartbeat restarts, so it beats only when the primary has been silent."""
        if self.replica_count == 1 or self._backfill_pending:
            return  # nobody to tell; a backfilling primary stays quiet (on_commit_timeout)
        self._broadcast(Commit(self.group, self.replica, self.view, self.commit_max))
        self._timeout_commit.reset(self._prng)

    def _apply_committed(self) -> None:
        if self._checkpoint_owed:
            self._checkpoint_due()
        while self.commit_min < self._apply_op_max():
            op = self.commit_min + 1
            prepare = self._prepare_body(op)
            if prepare is None:
                # The journal lost or corrupted it: cut there and repair from peers.
                self._truncate_journal(self.commit_min)
                return
            assert prepare.header.parent == self._journal[self.commit_min].checksum
            reply = self._state_machine.apply(prepare)
            if prepare.header.client_id != 0:
                self._commit_client_reply(prepare, reply)
            del self._journal[self.commit_min]
            self._headers.pop(self.commit_min, None)
            self._headers.setdefault(op, self._journal[op])
            self._prepares.pop(op, None)
            self._stash.pop(op, None)
            self.commit_min = op
            if self.status is Status.NORMAL and self.is_primary and prepare.header.client_id != 0:
                header = prepare.header
                entry = self.client_table.get(header.client_id)
                session = entry.session if entry is not None else header.session
                self._actions.append(
                    ReplyToClient(
                        header.client_id,
                        session,
                        header.request,
                        header.operation,
                        header.request_checksum,
                        op,
                        reply,
                    )
                )
            interval = self.config.checkpoint_interval_ops
            if interval is not None and (
                op % interval == 0
                or prepare.header.operation in self.config.checkpoint_after_operations
            ):
                self._checkpoint_owed = True
                self._checkpoint_due()

    def _checkpoint_due(self) -> None:
        """Take the checkpoint that fell due, unless the state's ``log_op_min`` cannot be
        trusted yet.

        Not while committed records are missing below: the state machine may not see the
        data they hold, so its ``log_op_min`` could claim too little (the checkpoint is
        dropped, as the backfill ends in one). Nor while the log does not hold every
        applied op: a step applies the ops it appends (a replica catching up, a backfill
        that ends), but the host appends them only after the step, and ``log_op_min``
        reads the log (a partition's first retained message may be in one of those
        records). Then the checkpoint waits for a later step, when the host has appended
        them, and covers the ops applied by then.
        """
        if self._faulty_committed:
            self._checkpoint_owed = False
        elif self._log.op_max() >= self.commit_min:
            self._checkpoint()

    def _snapshot(self) -> bytes:
        floor = self._state_machine.log_op_min()
        log_op_min = self.commit_min + 1 if floor is None else floor
        assert 1 <= log_op_min <= self.commit_min + 1, "log_op_min past the applied state"
        return encode_snapshot(
            self.commit_min,
            self._journal[self.commit_min],
            self.client_table.encode(),
            self._state_machine.snapshot(),
            log_op_min=log_op_min,
        )

    def _checkpoint(self) -> None:
        assert self.commit_min <= self.journal_op
        self._checkpoint_owed = False
        self.checkpoint_op = self.commit_min
        self._actions.append(WriteCheckpoint(op=self.commit_min, snapshot=self._snapshot()))
        self._write_superblock()

    def _send_prepare_oks(self) -> None:
        if not (
            self.status is Status.NORMAL
            and not self.is_primary
            and self.durable.log_view == self.view
        ):
            return
        op = self._ackable_op()
        if op > self._acked_op and op >= self.commit_min:
            self._acked_op = op
            self._send_prepare_ok(op)

    def _send_prepare_ok(self, op: int) -> None:
        header = self._journal[op]
        self._send(
            self.primary,
            PrepareOk(self.group, self.replica, self.view, op, header.checksum),
        )

    # Normal case -------------------------------------------------------------------------

    def on_prepare(self, message: Prepare) -> None:
        header = message.header
        if self.status is Status.RECOVERING:
            return
        if header.op <= self.commit_min:
            self._repair_committed(message, vouched=False)
            return
        if header.view > self.view:
            # A newer view exists that we missed; ask its primary rather than guess.
            self._view_seen_max = max(self._view_seen_max, header.view)
            self._send_request_start_view(self.primary_index(header.view))
            return
        from_current_primary = (
            self.status is Status.NORMAL
            and header.view == self.view == self.log_view
            and not self.is_primary
        )
        known = self._journal.get(header.op)
        if (
            known is not None
            and known.checksum == header.checksum
            and self.status is Status.NORMAL
            and not self.is_primary
            and self.durable.log_view == self.view
            and header.op <= self._ackable_op()
        ):
            # A retransmission of a prepare we hold: our ack was probably lost, resend it.
            self._send_prepare_ok(self._ackable_op())
        # Bound what we hold above the verified journal, not above the commit: after every
        # replica restarted, the commit hint is stale and a view's log may run far ahead
        # of it; repair then asks for exactly those ops, and they must not be dropped here
        # (state transfer cannot help: nothing above the stale commit is known committed).
        window = (
            self.journal_verified_op
            + self.config.repair_ops_max
            + self.config.pipeline_prepares_max
        )
        if header.op > window:
            return  # too far ahead to hold; repair or state transfer will catch up
        if from_current_primary:
            # Created by this view's primary: part of this view's log by construction.
            if header.op > self.op:
                # Only news proves the primary alive. A prepare we already knew of may be a
                # peer's answer to a repair request: two backups trading repairs must not
                # keep each other from noticing that the primary is gone (its Commit
                # heartbeats keep an idle or retransmitting primary in office).
                self._timeout_normal.reset(self._prng)
            self.op = max(self.op, header.op)
            self.commit_max = max(self.commit_max, min(header.commit, header.op))
            self._learn(message)
            return
        expected = self._expected_checksum(header.op)
        if expected == header.checksum:
            self._learn(message)
        elif (
            expected is None
            and self.journal_verified_op < header.op <= self.op
            and len(self._stash) < self.config.repair_chunk_max * 2
        ):
            self._stash[header.op] = message

    def on_prepare_ok(self, message: PrepareOk) -> None:
        if not (self.status is Status.NORMAL and self.is_primary and message.view == self.view):
            return
        if message.op <= self.commit_max or message.op > self.op:
            return
        if self._headers[message.op].checksum != message.checksum:
            return
        # The ack covers every earlier op too: the backup's journal is a hash chain.
        for op in range(self.commit_max + 1, message.op + 1):
            self._acks[op] = self._acks.get(op, 0) | (1 << message.replica)

    def on_commit(self, message: Commit) -> None:
        if message.view > self.view:
            if self.status is not Status.RECOVERING:
                self._send_request_start_view(self.primary_index(message.view))
            return
        if not (
            self.status is Status.NORMAL
            and message.view == self.view
            and not self.is_primary
            and message.replica == self.primary
        ):
            return
        self._timeout_normal.reset(self._prng)
        self.commit_max = max(self.commit_max, message.commit)

    def on_prepare_timeout(self) -> None:
        if not (self.status is Status.NORMAL and self.is_primary) or self._backfill_pending:
            return
        # Resend every unacknowledged prepare to each backup that has not acked it.
        for op in range(self.commit_max + 1, self.op + 1):
            prepare = self._prepares.get(op) or self._prepare_body(op)
            assert prepare is not None
            acks = self._acks.get(op, 0)
            for replica in self._others():
                if not acks & (1 << replica):
                    self._send(replica, prepare)

    def on_commit_timeout(self) -> None:
        if self.status is Status.NORMAL and self.is_primary and not self._backfill_pending:
            # A primary still backfilling committed records cannot append, and only a
            # primary of the view vouches for repair answers: it goes quiet, so that the
            # backups start the next view (§4.2) and it backfills as a backup.
            self._broadcast(Commit(self.group, self.replica, self.view, self.commit_max))

    def on_normal_timeout(self) -> None:
        if self.status is not Status.NORMAL or self.is_primary:
            return
        if self._view_seen_max > self.view:
            self._send_request_start_view(self.primary_index(self._view_seen_max))
            return
        self._start_view_change(self.view + 1)

    # View change -------------------------------------------------------------------------

    @property
    def trusted(self) -> bool:
        """Whether a recovering replica may vote on its own log.

        Never with corruption, found at this restart or at an earlier one it has not
        rejoined since (``DurableState.log_damaged``): it may have acknowledged what it no
        longer holds (PAR). A lone replica is the exception: its log is all there is.
        In a ``persisted`` group it acknowledged only synced prepares, so its log is whole.
        In a ``replicated`` group a power loss may have taken acknowledged prepares, so it
        waits for a live primary unless a view-change quorum is recovering too: then the
        whole group restarted and no live replica knows more than the logs on disk.
        """
        if not self.log_intact:
            return False
        if self.persisted or self.replica_count == 1:
            return True
        recovering = self._recovering_from | (1 << self.replica)
        return recovering.bit_count() >= quorum_view_change(self.replica_count)

    def _may_vote(self) -> bool:
        return self.status is not Status.RECOVERING or self.trusted

    def _start_view_change(self, view: int) -> None:
        assert view > self.view or (view == self.view and self.status is Status.RECOVERING)
        assert self._may_vote()
        self.view = view
        self._view_seen_max = max(self._view_seen_max, view)
        self.status = Status.VIEW_CHANGE
        self._start_view_change_from = 1 << self.replica
        self._do_view_changes = {}
        self._do_view_change_sent = False
        self._view_change_decided = False
        self._acks = {}
        self._state_transfer = None
        self._timeout_view_change.reset(self._prng)
        self._timeout_view_change_resend.reset(self._prng)
        self._write_superblock()  # the new view is durable before anyone hears of it
        self._broadcast(StartViewChange(self.group, self.replica, self.view))
        self._maybe_send_do_view_change()

    def _maybe_send_do_view_change(self) -> None:
        if self._do_view_change_sent or self.status is not Status.VIEW_CHANGE:
            return
        if self._start_view_change_from.bit_count() < quorum_view_change(self.replica_count):
            return
        self._do_view_change_sent = True
        message = self._do_view_change_message()
        if self.is_primary:
            self._record_do_view_change(message)
        else:
            self._send(self.primary, message)

    def _do_view_change_message(self) -> DoViewChange:
        op_min = max(self.commit_min, self.op - VIEW_HEADERS_MAX + 1, 0)
        headers: list[PrepareHeader] = []
        present: list[bool] = []
        durable = self._ackable_op()
        for op in range(op_min, self.op + 1):
            header = self._headers.get(op)
            if header is None:
                continue
            journal = self._journal.get(op)
            headers.append(header)
            present.append(
                op <= durable and journal is not None and journal.checksum == header.checksum
            )
        return DoViewChange(
            group=self.group,
            replica=self.replica,
            view=self.view,
            # Only the durable log_view: a restart must not be able to contradict it.
            log_view=self.durable.log_view,
            op=self.op,
            commit=self.commit_max,
            headers_op_min=op_min,
            headers=tuple(headers),
            present=tuple(present),
        )

    def on_start_view_change(self, message: StartViewChange) -> None:
        if message.view < self.view or not self._may_vote():
            return
        if message.view > self.view:
            self._start_view_change(message.view)
        if self.status is Status.VIEW_CHANGE and message.view == self.view:
            self._start_view_change_from |= 1 << message.replica
            self._maybe_send_do_view_change()
        elif self.status is Status.NORMAL and self.is_primary and message.view == self.view:
            self._send(message.replica, self._start_view_message(nonce=0))

    def on_do_view_change(self, message: DoViewChange) -> None:
        if message.view < self.view or not self._may_vote():
            return
        if message.view > self.view:
            self._start_view_change(message.view)
        if self.primary_index(message.view) != self.replica:
            return
        if self.status is Status.NORMAL and message.view == self.view:
            self._send(message.replica, self._start_view_message(nonce=0))
        elif self.status is Status.VIEW_CHANGE and message.view == self.view:
            self._start_view_change_from |= 1 << message.replica
            self._record_do_view_change(message)
            self._maybe_send_do_view_change()

    def _record_do_view_change(self, message: DoViewChange) -> None:
        assert self.is_primary and self.status is Status.VIEW_CHANGE
        if self._view_change_decided:
            return
        self._do_view_changes[message.replica] = message
        if len(self._do_view_changes) < quorum_view_change(self.replica_count):
            return
        if self.replica not in self._do_view_changes:
            return  # our own log must be part of the decision
        self._decide_view_log()

    def _nacks(self, dvc: DoViewChange, header: PrepareHeader) -> bool:
        """Whether ``dvc`` proves its sender never acknowledged ``header``."""
        if header.op > dvc.op:
            return True
        if header.view > dvc.log_view:
            # Acks in view w need log_view w durable; this prepare was created after the
            # sender's durable log_view, so the sender cannot have acked it.
            return True
        if header.op < dvc.headers_op_min:
            return False  # outside what the sender told us: unknown, so no proof
        for known, present in zip(dvc.headers, dvc.present, strict=True):
            if known.op == header.op:
                return not (present and known.checksum == header.checksum)
        return True  # in range but no header at all: the sender cannot have acked it

    def _nacks_unknown(self, dvc: DoViewChange, op: int) -> bool:
        """Whether ``dvc`` proves its sender acknowledged no prepare at all at ``op``.

        An acknowledged prepare is durable in the sender's journal and part of its log, so
        its header is in the suffix the sender reported whenever ``op`` is in that range.
        """
        if op > dvc.op:
            return True
        if op < dvc.headers_op_min:
            return False  # outside what the sender told us: unknown, so no proof
        return all(known.op != op for known in dvc.headers)

    def _decide_view_log(self) -> None:
        """Choose the new view's log from a DoViewChange quorum (§4.2 step 3)."""
        dvcs = [self._do_view_changes[r] for r in sorted(self._do_view_changes)]
        canonical = self._canonical_do_view_change(dvcs)
        commit = max(d.commit for d in dvcs)
        headers: dict[int, PrepareHeader] = {}
        # Every DoViewChange from the canonical log_view is a prefix of the same log, so
        # each may fill gaps in the others.
        for dvc in dvcs:
            if dvc.log_view == canonical.log_view:
                for header in dvc.headers:
                    if header.op <= canonical.op:
                        headers.setdefault(header.op, header)
        for header in canonical.headers:
            headers[header.op] = header
        op = max(canonical.op, commit)
        # Truncate from the lowest op a nack quorum proves uncommitted: nothing above it can
        # have committed either, as commits are a contiguous prefix.
        nack_quorum = quorum_nack(self.replica_count)
        for candidate in range(commit + 1, canonical.op + 1):
            candidate_header = headers.get(candidate)
            if candidate_header is None:
                # No canonical DoViewChange names this op, so nobody could repair it: it is
                # truncated if a nack quorum proves that no prepare at all was acked there.
                if sum(self._nacks_unknown(d, candidate) for d in dvcs) >= nack_quorum:
                    op = candidate - 1
                    break
                continue
            if sum(self._nacks(d, candidate_header) for d in dvcs) >= nack_quorum:
                op = candidate - 1
                break
        self._view_change_decided = True
        log = {k: h for k, h in headers.items() if k <= op}
        if op < self.commit_min:
            return  # cannot be: a committed op is in every later view's log
        self._install_log(log, op=op, commit=commit, replace=True)
        self._request_repair()

    def _install_log(
        self, headers: dict[int, PrepareHeader], *, op: int, commit: int, replace: bool
    ) -> None:
        """Make ``headers`` (the top of the new view's log, ending at ``op``) our log.

        ``replace``: the log comes from a newer log_view, so our ops above the commit are
        only kept where the hash chain proves they belong to it. Otherwise it is the log we
        already follow and only fills gaps.
        """
        assert op >= self.commit_min
        self.commit_max = max(self.commit_max, commit)
        if replace:
            # Forget the old log above the commit; the journal stays until proven wrong.
            anchor = self._journal[self.commit_min]
            old = self._prepares
            self._headers = {self.commit_min: anchor}
            self._prepares = {}
            self.journal_verified_op = self.commit_min
            self.op = op
            for k in sorted(old):
                if k > self.commit_min and len(self._stash) < self.config.repair_ops_max:
                    self._stash[k] = old[k]
        else:
            self.op = max(self.op, op)
        for k in sorted(headers):
            if k > self.commit_min and k <= op:
                self._headers.setdefault(k, headers[k])
        # Stashed bodies may now be verifiable against the new headers.
        for k in sorted(self._stash):
            if self._expected_checksum(k) == self._stash[k].checksum:
                self._learn(self._stash.pop(k))
        self._repair_attempts = 0
        self._verify_journal()

    def _maybe_start_view(self) -> None:
        """New primary: start the view once the decided log is whole and durable."""
        if not (
            self.status is Status.VIEW_CHANGE and self.is_primary and self._view_change_decided
        ):
            return
        if self._state_transfer is not None:
            return
        if self.journal_verified_op < self.op or self.journal_op < self.op:
            return
        if self._op_durable() < self.op:
            return
        self.status = Status.NORMAL
        self.log_view = self.view
        self._view_op = self.op
        self._acks = dict.fromkeys(range(self.commit_max + 1, self.op + 1), 0)
        self._write_superblock()
        assert self.durable.log_view == self.view
        self._broadcast(self._start_view_message(nonce=0))
        self._timeout_prepare.reset(self._prng)
        self._timeout_commit.reset(self._prng)

    def _start_view_message(self, *, nonce: int) -> StartView:
        assert self.status is Status.NORMAL and self.is_primary
        # Every op above the commit, and the committed one below it as the chain anchor.
        op_min = max(self.commit_min, self.op - VIEW_HEADERS_MAX + 1)
        headers = tuple(self._headers[k] for k in range(op_min, self.op + 1))
        return StartView(
            group=self.group,
            replica=self.replica,
            view=self.view,
            op=self.op,
            commit=self.commit_max,
            nonce=nonce,
            headers=headers,
        )

    def on_start_view(self, message: StartView) -> None:
        if message.view < self.view or message.replica != self.primary_index(message.view):
            return
        if self.status is Status.RECOVERING:
            # Only a StartView that post-dates our restart: it echoes our nonce, or it is
            # for a view we had not joined before the crash.
            if message.nonce != self.nonce and message.view <= self.durable.view:
                return
        elif message.view == self.view and self.status is Status.NORMAL and self.is_primary:
            return
        if message.op < self.commit_min:
            return
        if message.view > self.view or self.status is not Status.NORMAL:
            self._acked_op = 0
        self.view = message.view
        self._view_seen_max = max(self._view_seen_max, message.view)
        headers = {h.op: h for h in message.headers}
        same_log = self.status is Status.NORMAL and self.log_view == message.view
        self._install_log(headers, op=message.op, commit=message.commit, replace=not same_log)
        if not same_log:
            self._view_op = message.op
        self.status = Status.NORMAL
        self.log_view = message.view
        self._write_superblock()
        self._timeout_normal.reset(self._prng)
        self._request_repair()

    # Recovery ----------------------------------------------------------------------------

    def _send_request_start_view(self, replica: int | None = None) -> None:
        message = RequestStartView(self.group, self.replica, self.view, self.nonce)
        if replica is None:
            self._broadcast(message)
        elif replica != self.replica:
            self._send(replica, message)

    def on_request_start_view(self, message: RequestStartView) -> None:
        if self.status is Status.RECOVERING:
            self._recovering_from |= 1 << message.replica
            return
        if self.status is Status.NORMAL and self.is_primary and message.view <= self.view:
            self._send(message.replica, self._start_view_message(nonce=message.nonce))
        elif message.view > self.view:
            # The asker promised never to join a view below its own: move up to it.
            self._start_view_change(message.view)

    def on_recovering_timeout(self) -> None:
        if self.status is not Status.RECOVERING:
            return
        self._recovering_attempts += 1
        if self.trusted and self._recovering_attempts >= self.config.recovering_attempts_max:
            self._start_view_change(self.view + 1)
            return
        self._send_request_start_view()

    def on_view_change_timeout(self) -> None:
        if self.status is Status.VIEW_CHANGE:
            self._start_view_change(self.view + 1)

    def on_view_change_resend_timeout(self) -> None:
        if self.status is not Status.VIEW_CHANGE:
            return
        self._broadcast(StartViewChange(self.group, self.replica, self.view))
        if self._do_view_change_sent and not self.is_primary:
            self._send(self.primary, self._do_view_change_message())

    # Repair ------------------------------------------------------------------------------

    def _missing_op_min(self) -> int | None:
        """The lowest op of the current log we still need a body (or identity) for."""
        target = max(self.op, self.commit_max)
        for op in range(self.journal_verified_op + 1, target + 1):
            expected = self._expected_checksum(op)
            if expected is not None:
                if op <= self.journal_op and expected == self._journal[op].checksum:
                    continue  # the journal already has it; verification will catch up
                prepare = self._prepares.get(op)
                if prepare is not None and prepare.checksum == expected:
                    continue
            return op
        return None

    def _request_repair(self) -> None:
        if self.status is Status.RECOVERING or self.replica_count == 1:
            return
        self._request_committed_repair()
        if self._state_transfer is not None:
            return
        transfer = self.config.state_transfer
        if transfer and self.commit_max - self.commit_min > self.config.repair_ops_max:
            self._start_state_transfer()
            return
        op_min = self._missing_op_min()
        if op_min is None:
            self._repair_attempts = 0
            return
        if op_min == self._repair_lo_last:
            self._repair_attempts += 1
        else:
            self._repair_lo_last = op_min
            self._repair_attempts = 0
        if self._repair_attempts > self.config.repair_attempts_max and op_min <= self.commit_max:
            # Nobody answers for a committed op: the peers may have retired it (where the
            # log is the data, a transfer is installed only if so, see on_snapshot_chunk).
            self._repair_attempts = 0
            self._start_state_transfer()
            return
        target = max(self.op, self.commit_max)
        op_max = min(target, op_min + self.config.repair_chunk_max - 1)
        if self.status is Status.NORMAL and not self.is_primary and self._repair_attempts < 2:
            peer = self.primary
        else:
            peer = self._random_peer()
        self._repair_hi_asked = op_max
        self._send(peer, RequestPrepares(self.group, self.replica, self.view, op_min, op_max))

    def on_repair_timeout(self) -> None:
        self._request_repair()

    def on_request_prepares(self, message: RequestPrepares) -> None:
        if self.status is Status.RECOVERING:
            return
        op_max = min(message.op_max, message.op_min + self.config.repair_chunk_max - 1)
        for op in range(max(message.op_min, 1), op_max + 1):
            if op > self.journal_op:
                prepare = self._prepares.get(op)
                if prepare is None or self._expected_checksum(op) != prepare.checksum:
                    continue
            else:
                prepare = self._prepares.get(op) or self._log.read(op)
                if prepare is None:
                    continue
            if self.status is Status.NORMAL and self._in_log(prepare):
                # Ours to vouch for: the asker, if it follows this view, needs no proof.
                self._send(
                    message.replica,
                    RepairPrepare(self.group, self.replica, self.view, prepare),
                )
            else:
                # The asker verifies a plain answer by checksum, so sending is always safe.
                self._send(message.replica, prepare)

    def _in_log(self, prepare: Prepare) -> bool:
        """Whether ``prepare`` is known to be in the log of ``log_view``."""
        op = prepare.op
        if op <= self.journal_verified_op:
            known = self._journal.get(op)
            if known is not None:
                return known.checksum == prepare.checksum
            # Below commit_min: committed, and this op's record is the one we applied.
            return op < self.commit_min
        return self._expected_checksum(op) == prepare.checksum

    def on_repair_prepare(self, message: RepairPrepare) -> None:
        prepare = message.prepare
        if prepare.header.group != self.group:
            return
        window = self.journal_verified_op + self.config.repair_ops_max
        vouched = (
            self.status is Status.NORMAL
            and not self.is_primary
            and message.view == self.view == self.log_view
        )
        if vouched and prepare.op <= self.commit_min:
            self._repair_committed(prepare, vouched=True)
            return
        if not vouched or prepare.op > min(max(self.op, self.commit_max), window):
            self.on_prepare(prepare)  # verify it like any other answer
            return
        # The sender's log of this view holds it, and so does ours: one log per view.
        self.op = max(self.op, prepare.op)
        self.commit_max = max(self.commit_max, min(prepare.header.commit, prepare.op))
        self._learn(prepare)
        if prepare.op == self._repair_hi_asked:
            # The chunk is in: ask for the next one now rather than at the repair timeout,
            # so a replica far behind catches up at the speed of the link.
            self._request_repair()

    @property
    def read_floor(self) -> int | None:
        """The op a read served from this replica's state must see applied (besides what
        its client saw): the op its current view started at, which is at or above every
        op acknowledged before the view began. None outside normal status (recovering,
        view change), when no read should be served: after a restart the applied state
        lacks committed ops until the view's log is committed again."""
        if self.status is not Status.NORMAL:
            return None
        return self._view_op

    @property
    def state_transfer_peer(self) -> int | None:
        """The replica a snapshot is being fetched from, while a state transfer runs."""
        return None if self._state_transfer is None else self._state_transfer.peer

    @property
    def log_whole(self) -> bool:
        """False while committed records below the checkpoint are being repaired from peers
        (``RepairJournal``): until then this replica's log has a hole, and reads of it
        (polls of a partition) belong on another replica."""
        return not self._faulty_committed

    def _request_committed_repair(self) -> None:
        """Ask for the lowest damaged committed record (the journal repairs in op order);
        when it has been asked for in vain for ``repair_attempts_max`` rounds, the peers
        may have retired it since: fetch a snapshot whose ``log_op_min`` is above it."""
        if not self._faulty_committed or self.status is not Status.NORMAL:
            return
        op = self._faulty_committed[0]
        if op == self._backfill_op_last:
            self._backfill_attempts += 1
        else:
            self._backfill_op_last = op
            self._backfill_attempts = 0
        if self._backfill_attempts > self.config.repair_attempts_max:
            self._backfill_attempts = 0
            if self._state_transfer is None:
                self._start_state_transfer()
            return
        # The primary vouches for its answer; a primary asks a backup and checks the chain.
        peer = self._random_peer() if self.is_primary else self.primary
        self._send(peer, RequestPrepares(self.group, self.replica, self.view, op, op))

    def _repair_committed(self, prepare: Prepare, *, vouched: bool) -> None:
        """Take a peer's copy of a damaged committed record if it is proven the one."""
        faulty = self._faulty_committed
        op = prepare.op
        if not faulty or op != faulty[0]:
            return
        if not vouched:
            # Unvouched answers must match the hash chain from the intact record above.
            if op == self.commit_min:
                expected: bytes | None = self._journal[op].checksum
            else:
                child = self._log.read(op + 1)
                expected = child.header.parent if child is not None else None
            if expected != prepare.checksum:
                return
        faulty.pop(0)
        self._actions.append(RepairJournal(prepare))
        if not faulty:
            self._backfill_pending = False  # the backfilled ops are the last ones
        self._request_committed_repair()

    # State transfer ----------------------------------------------------------------------

    def _start_state_transfer(self) -> None:
        if self.replica_count == 1:
            return
        peer = self.primary if not self.is_primary else self._random_peer()
        self._state_transfer = _StateTransfer(peer=peer)
        self._timeout_state_transfer.reset(self._prng)
        self._send(peer, RequestSnapshot(self.group, self.replica, self.view, 0, 0))

    def on_state_transfer_timeout(self) -> None:
        transfer = self._state_transfer
        if transfer is None:
            return
        # Start over with another peer: the first may be gone or have moved on.
        transfer.peer = self._random_peer()
        transfer.op = 0
        transfer.data = bytearray()
        self._send(transfer.peer, RequestSnapshot(self.group, self.replica, self.view, 0, 0))

    def on_request_snapshot(self, message: RequestSnapshot) -> None:
        if self.status is Status.RECOVERING or self.commit_min == 0 or self._faulty_committed:
            # A replica missing committed records is no source: where the log is the data,
            # its state cannot say which records a receiver needs, nor hand them over.
            return
        cache = self._snapshot_cache
        if cache is None or (message.op != cache[0] and cache[0] != self.commit_min):
            snapshot = self._snapshot()
            cache = (self.commit_min, snapshot, checksum(snapshot))
            self._snapshot_cache = cache
        op, snapshot, snapshot_checksum = cache
        offset = message.offset if message.op == op else 0
        if offset > len(snapshot):
            return
        data = snapshot[offset : offset + self.config.snapshot_chunk_bytes]
        self._send(
            message.replica,
            SnapshotChunk(
                self.group,
                self.replica,
                self.view,
                op,
                len(snapshot),
                offset,
                snapshot_checksum,
                data,
            ),
        )

    def on_snapshot_chunk(self, message: SnapshotChunk) -> None:
        transfer = self._state_transfer
        if transfer is None or message.replica != transfer.peer:
            return
        # Where the log is the data, a snapshot at our own op may still be installed: its
        # log_op_min can retire the records we wait for (``_install_retained``).
        if message.op < self.commit_min + int(self.config.state_transfer):
            self._state_transfer = None  # we caught up some other way
            return
        if message.op != transfer.op:
            if message.offset != 0:
                return
            transfer.op = message.op
            transfer.size = message.size
            transfer.snapshot_checksum = message.snapshot_checksum
            transfer.data = bytearray()
        if message.offset != len(transfer.data) or message.size != transfer.size:
            return
        transfer.data += message.data
        self._timeout_state_transfer.reset(self._prng)
        if len(transfer.data) < transfer.size:
            self._send(
                transfer.peer,
                RequestSnapshot(
                    self.group, self.replica, self.view, transfer.op, len(transfer.data)
                ),
            )
            return
        snapshot = bytes(transfer.data)
        self._state_transfer = None
        if checksum(snapshot) != transfer.snapshot_checksum:
            return
        try:
            op, header, table, state, log_op_min = decode_snapshot(snapshot)
        except MessageError:
            return
        if op != transfer.op or op < self.commit_min:
            return
        if not self.config.state_transfer:
            self._install_retained(op, header, table, state, log_op_min, snapshot)
            return
        if op == self.commit_min:
            return
        if self.journal_op > op:
            self._truncate_journal(max(op, self.commit_min))
        self._install_snapshot_state(op, header, table, state)
        self._actions.append(WriteCheckpoint(op=op, snapshot=snapshot))
        self._write_superblock()

    def _install_retained(
        self,
        op: int,
        header: PrepareHeader,
        table: bytes,
        state: bytes,
        log_op_min: int,
        snapshot: bytes,
    ) -> None:
        """Where the log is the data: jump to the snapshot only when the peers retired a
        committed record this replica still needs (the snapshot's state no longer needs
        it), and then backfill, from peers, every committed record from the snapshot's
        ``log_op_min`` up to its op, into a journal restarted there, before appending
        anything (the records the state still serves: a partition's retained messages).
        Otherwise the peer still holds what is needed, and repair goes on."""
        needed = self._faulty_committed[0] if self._faulty_committed else self.commit_min + 1
        if log_op_min <= needed:
            self._repair_attempts = 0
            self._backfill_attempts = 0
            return
        assert op >= self.commit_min and log_op_min <= op + 1
        self._install_snapshot_state(op, header, table, state)
        self._faulty_committed = list(range(log_op_min, op + 1))
        self._backfill_pending = bool(self._faulty_committed)
        self._backfill_op_last = 0
        self._backfill_attempts = 0
        self._actions.append(
            WriteCheckpoint(op=op, snapshot=snapshot, journal_restart_op=log_op_min)
        )
        self._write_superblock()
        self._request_committed_repair()

    def _install_snapshot_state(
        self, op: int, header: PrepareHeader, table: bytes, state: bytes
    ) -> None:
        """Jump to the committed state after ``op``; the journal restarts at op + 1."""
        self.client_table.restore(table)
        self._state_machine.restore(state)
        self.commit_min = op
        self.commit_max = max(self.commit_max, op)
        self.checkpoint_op = op
        self._journal = {op: header}
        self.journal_op = op
        self.journal_verified_op = op
        self._op_written = op
        self._op_synced = op
        self._sync_requested_op = op
        self.op = max(self.op, op)
        self._headers = {k: h for k, h in self._headers.items() if k > op}
        self._headers[op] = header
        self._prepares = {k: p for k, p in self._prepares.items() if k > op}
        self._stash = {k: p for k, p in self._stash.items() if k > op}
        self._acks = {k: a for k, a in self._acks.items() if k > op}

    # Invariants --------------------------------------------------------------------------

    def _check_invariants(self) -> None:
        assert 0 <= self.log_view <= self.view
        assert self.durable.view <= self.view
        assert self.durable.log_view <= self.log_view
        if self.status is Status.NORMAL:
            assert self.log_view == self.view
        assert self.commit_min <= self.journal_verified_op <= self.journal_op
        assert self.commit_min <= self.commit_max
        assert self.checkpoint_op <= self.commit_min
        assert self.journal_verified_op <= self.op
        assert min(self._journal) == self.commit_min
        assert max(self._journal) == self.journal_op
        assert len(self._journal) == self.journal_op - self.commit_min + 1
        committed = self._headers[self.commit_min]
        assert committed is self._journal[self.commit_min] or (
            committed == self._journal[self.commit_min]
        )
        assert self._op_durable() <= self.journal_op
        if self.status is Status.NORMAL and self.is_primary:
            # Above the pipeline bound only right after a view change that followed a restart
            # of every replica (stale commit hints); new requests wait until it drains.
            assert all(self.commit_max < k <= self.op for k in self._acks)
            assert self.journal_op == self.journal_verified_op == self.op
            assert self.commit_min == self.commit_max or self.commit_min < self.commit_max
        assert len(self.client_table) <= self.config.clients_max
        assert all(k > self.commit_min for k in self._prepares)
        # The journal is a hash chain; ops up to journal_verified_op are in the current log.
        previous = self._journal[self.commit_min]
        for op in range(self.commit_min + 1, self.journal_op + 1):
            header = self._journal[op]
            assert header.op == op and header.parent == previous.checksum
            if op <= self.journal_verified_op and op in self._headers:
                known = self._headers[op]
                assert known is header or known == header
            previous = header
