"""Group host: the one task that owns one group's replica, its state machine and journal.

Purpose: drive a sans-IO ``consensus.Replica`` on real files. Events reach the group from
other tasks through non-blocking posts (ticks, peer messages, sync completions, client
submissions); the group's own task steps the replica with them, one at a time, and
executes the returned actions in order (``consensus/protocols.py`` is the contract).

Invariants:

1. Only the group task calls ``Replica.step`` and mutates the state machine and the
   journal (appends, truncations, checkpoints); other tasks read committed state between
   awaits, which trio makes atomic.
2. Actions run in order. ``WriteSuperblock`` and ``WriteCheckpoint`` are awaited (in a
   worker thread) before the next action, so they are durable before anything later in
   the same list happens (the replica reveals a view only after persisting it).
3. At most one journal sync is in flight (the syncer task, in a worker thread, or in the
   node's flusher with other groups' syncs). It covers every append made before it
   started: one fsync per batch of prepares (group commit).
   Truncations and checkpoints wait for it, as the journal's contract requires, and raise
   ``journal_busy`` so readers in other tasks stay off the journal meanwhile.
4. Every queue has a bound: peer messages (``INBOX_EVENTS_MAX``, the excess is dropped:
   VSR retransmits), owed ticks (``TICKS_OWED_MAX``), client submissions (bounded by
   the connections and their in-flight limit); and the pipeline bound of the replica is
   respected before a request is handed to it, so nothing is dropped for being early.
5. Every submission is answered exactly once: with the committed reply, a refusal decided
   before commit, a lost session, or (by its submitter, on timeout) abandoned.
6. A storage shortage never ends the node. A journal action refused for want of a
   descriptor (``EMFILE``, ``ENFILE``: the journal opened nothing and changed nothing) is
   retried in place, with a backoff up to ``STORAGE_RETRY_BACKOFF_MAX_S``: by the
   metadata group until it succeeds, by a partition group ``STORAGE_RETRIES_MAX`` times
   (then the shortage fails it, which gives its descriptors back). A partition
   group whose storage cannot be opened (any ``OSError``), or fails while serving for
   want of descriptors, room or memory (``STORAGE_SHORTAGE_ERRNOS``), is *failed*: it
   releases its files, refuses every request with TransientNotAccepted (58), drops peer
   messages, and opens again (recovery, as after a restart) with a backoff up to
   ``OPEN_RETRY_BACKOFF_MAX_S``, so it recovers once descriptors are free again. The
   metadata group is never failed: the node cannot serve without it, so a failure to
   open it, or any other storage failure, still ends the node, as does damage that
   recovery cannot resolve (``JournalError``) in any group.
7. Partition groups hold at most their reserve of descriptors (``DescriptorReserve``,
   ``limits.partition_descriptors_reserved``): a group is charged
   ``PARTITION_DESCRIPTORS_CHARGED`` while its storage is open, and one that finds the
   reserve full is failed as in invariant 6 until another gives its charge back. So
   partitions can never take the descriptors the client connections, the replica bus
   and the metadata group were promised at start (``broker.runtime.serve``).

Theory of operation: the loop drains pending ticks, then queued events, then admits
queued client requests while the replica is a ready primary with room in its pipeline.
Ticks are owed rather than stepped one by one: the node's ``GroupTicker`` counts them,
and a group asks it, each time it goes to sleep, to be woken on the tick its replica's
next timeout with something to do is due (``Replica.ticks_until_due``), or once
``TICKS_OWED_MAX`` are owed; the ticker wakes only the groups due on each tick. Whenever a
group wakes, for that or anything else, it first pays every tick owed, in
``Ticked(count)`` steps; a busy group pays one before nearly every event, and one that
only counts idle timeouts down (``Replica.ticks_idle``) is stepped bare: nothing to
execute, nothing for the bookkeeping after a step. An idle lone replica is thus stepped
every ``TICKS_OWED_MAX``
ticks, a heartbeating primary once per heartbeat, and a tick costs the node nothing for
the groups not due on it (``docs/operations.md``, idle cost).
After each step's actions it reports ``PrepareWritten`` for the last append (the write
went to the page cache synchronously). ``SyncJournal`` wakes the syncer, which runs
``journal.sync`` in a worker thread while the loop keeps appending and answering; its
completion comes back as ``PrepareSynced``. A replicated group therefore acks a prepare
once written; a persisted one once synced.
"""

from __future__ import annotations

import enum
import errno
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, TypeVar

import trio

from broker.core.execution import Execution
from broker.core.groups import (
    Forward,
    GroupRequests,
    Outcome,
    Refused,
    RefusedDiskFull,
    Submission,
)
from broker.core.reads import readable
from broker.core.refusals import RefusalLimiter
from broker.core.ticks import TickSchedule
from broker.runtime.disk import DiskGuard
from broker.runtime.flush import Flusher
from broker.runtime.stats import GroupCounters
from broker.runtime.store import GroupStore, Recovered
from broker.state.metadata_machine import MetadataMachine, PartitionStats
from broker.state.partition_machine import PartitionMachine
from consensus import (
    Action,
    AppendToJournal,
    Event,
    Message,
    MessageReceived,
    Prepare,
    PrepareSynced,
    RepairJournal,
    Replica,
    ReplicaConfig,
    Status,
    SyncJournal,
    Ticked,
    TruncateJournal,
    WriteCheckpoint,
    WriteSuperblock,
)
from consensus.messages import RepairPrepare
from journal import JournalBroken
from sdk.wire import IggyErrorCode
from sdk.wire.batch import BATCH_HEADER
from sdk.wire.codes import Operation

log = logging.getLogger("viewstream.group")

_T = TypeVar("_T")
_E = TypeVar("_E", bound=BaseException)

INBOX_EVENTS_MAX: Final = 4096
"""Peer messages queued for one group; more are dropped (the sender retransmits)."""
TICKS_OWED_MAX: Final = 30_000
"""Ticks one group owes at most (five minutes at 10 ms): an idle group wakes to pay them by
then, and catches up no more than that after a stall of its task. It bounds the work of
the step that pays them (``Replica._pass_idle_ticks``: a few hundred PRNG draws), hence
the delay it adds to the first request after a long idle spell."""
EVENTS_PER_PASS_MAX: Final = 256
"""Events stepped before the loop yields to other tasks."""


DESCRIPTOR_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE})
"""A file could not be opened for want of a descriptor, the process's or the system's:
the journal changed nothing, and the same action may succeed once one is free."""
STORAGE_SHORTAGE_ERRNOS: Final = DESCRIPTOR_ERRNOS | {errno.ENOSPC, errno.EDQUOT, errno.ENOMEM}
"""Shortages that fail a serving partition group (invariant 6) rather than the node."""
STORAGE_RETRY_BACKOFF_MIN_S: Final = 0.05
STORAGE_RETRY_BACKOFF_MAX_S: Final = 2.0
"""Pause between attempts of a journal action refused for want of a descriptor."""
STORAGE_RETRIES_MAX: Final = 5
"""Retries of such an action by a partition group (about 1.5 s) before it fails: a
stalled group would hold its descriptors and time its requests out instead."""
OPEN_RETRY_BACKOFF_MIN_S: Final = 0.1
OPEN_RETRY_BACKOFF_MAX_S: Final = 5.0
"""Pause between attempts to open a failed partition group's storage (with jitter)."""
PARTITION_DESCRIPTORS_CHARGED: Final = 5
"""Descriptors one open partition group is charged (invariant 7): its group's and its
journal's directories, its active segment's log and index, and the sealed log it keeps for
reads. Segments sealed since the last sync and files open for a moment (a superblock copy,
a checkpoint, a directory listing) come out of the node's margin."""


@dataclass(slots=True)
class DescriptorReserve:
    """The descriptors the partition groups of one process may hold (invariant 7).

    One per process, like the descriptor table it stands for: ``serve`` sets its size
    from the configuration before the node starts; unset, it is unbounded (groups hosted
    by tests).
    """

    descriptors_max: int | None = None
    groups: int = 0
    """Partition groups holding a charge now."""

    def take(self) -> bool:
        """Charge one more open partition group, if the reserve has room for it."""
        needed = (self.groups + 1) * PARTITION_DESCRIPTORS_CHARGED
        if self.descriptors_max is not None and needed > self.descriptors_max:
            return False
        self.groups += 1
        return True

    @property
    def partitions_max(self) -> int | None:
        """The most partition groups the reserve can hold open (None: unbounded)."""
        if self.descriptors_max is None:
            return None
        return self.descriptors_max // PARTITION_DESCRIPTORS_CHARGED

    def give(self) -> None:
        assert self.groups > 0
        self.groups -= 1

    def describe(self) -> str:
        return (
            f"{self.groups} partitions open, {PARTITION_DESCRIPTORS_CHARGED} descriptors "
            f"each, limits.partition_descriptors_reserved = {self.descriptors_max}"
        )


PARTITION_DESCRIPTORS: Final = DescriptorReserve()
"""This process's reserve (``DescriptorReserve``)."""


TICKS_CATCH_UP_MAX: Final = 10
"""Ticks delivered past a due group's tick when the loop ran late (a stall); beyond
that, time is simply lost."""


class GroupTicker:
    """The node's ticks, and the groups to wake on each: one per node, fed by its ticker.

    A group asks to be woken on a tick (``wake_at``) each time it goes to sleep; the
    ticker wakes only the groups due, so an idle group costs a tick nothing
    (``broker.core.ticks``). Once ``start``-ed on a clock (the node's ticker task,
    ``run_ticker``), ticks are the clock's: ``now`` is the number of ``period_s`` periods
    since the start, brought up to date whenever it is read, so the ticker task need not
    wake the loop on a tick no group is due on. It sleeps until the earliest due tick,
    or until a group asks for an earlier one. Without a clock (tests), ticks pass only
    by ``advance``.

    A loop that ran late past a due group's tick (a stall) delivers at most
    ``TICKS_CATCH_UP_MAX`` ticks past it; the schedule resumes from then.
    """

    def __init__(self) -> None:
        self._schedule = TickSchedule()
        self._wakes: dict[int, Callable[[], None]] = {}
        self._clock: Callable[[], float] | None = None
        self._period_s = 0.0
        self._base_s = 0.0
        self._sleeping_to: int | None = None
        self._changed: Callable[[], None] | None = None

    @property
    def now(self) -> int:
        """Ticks passed so far (on the clock, once started)."""
        self.catch_up()
        return self._schedule.now

    def start(self, clock: Callable[[], float], period_s: float) -> None:
        """Count ticks of ``period_s`` on ``clock`` from now on, after those passed."""
        assert period_s > 0
        self._clock = clock
        self._period_s = period_s
        self._base_s = clock() - self._schedule.now * period_s

    def wake_at(self, group_id: int, tick: int, wake: Callable[[], None]) -> None:
        """Call ``wake`` once ``tick`` is reached (at the next ``advance`` if it was),
        instead of anything asked before for ``group_id``."""
        self._schedule.wake_at(group_id, tick)
        self._wakes[group_id] = wake
        changed = self._changed
        if changed is not None and (self._sleeping_to is None or tick < self._sleeping_to):
            self._changed = None
            changed()  # the ticker task sleeps past this tick: it sleeps again

    def cancel(self, group_id: int) -> None:
        self._schedule.cancel(group_id)
        self._wakes.pop(group_id, None)

    def advance(self, ticks: int) -> None:
        """``ticks`` ticks passed: wake the groups due by now."""
        for group_id in self._schedule.advance(ticks):
            self._wakes.pop(group_id)()

    def catch_up(self) -> None:
        """Deliver the ticks the clock says passed (none without a clock)."""
        clock = self._clock
        if clock is None:
            return
        schedule = self._schedule
        real = int((clock() - self._base_s) / self._period_s + 1e-9)
        if real <= schedule.now:
            return
        due = schedule.earliest()
        if due is not None:
            latest = max(due, schedule.now) + TICKS_CATCH_UP_MAX
            if real > latest:
                self._base_s += (real - latest) * self._period_s  # a stall: time is lost
                real = latest
        self.advance(real - schedule.now)

    def sleep_target(self, changed: Callable[[], None]) -> float | None:
        """For the ticker task about to sleep: the clock time of the earliest due tick
        (None: none is due), and ``changed`` to call when a group asks for an earlier one."""
        assert self._clock is not None, "start the ticker first"
        due = self._schedule.earliest()
        self._sleeping_to = due
        self._changed = changed
        if due is None:
            return None
        return self._base_s + due * self._period_s


_failure_lines = RefusalLimiter()
"""The budget of group failure lines, shared: ten thousand partitions that fail together
must not write ten thousand lines (the rest are counted in the next line)."""


class GroupKind(enum.Enum):
    METADATA = "metadata"
    PARTITION = "partition"


@dataclass(slots=True)
class ReplyWaiter:
    """A one-shot slot a task awaits for a submission's outcome."""

    event: trio.Event = field(default_factory=trio.Event)
    outcome: Outcome | None = None

    def deliver(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.event.set()


@dataclass(frozen=True, slots=True)
class PartitionIds:
    stream_id: int
    topic_id: int
    partition_id: int
    created_op: int


class GroupHost:
    """Hosts one replica of one group; see the module docstring."""

    def __init__(
        self,
        *,
        group_id: int,
        kind: GroupKind,
        path: Path,
        replica_index: int,
        replica_count: int,
        persisted: bool,
        no_sync: bool,
        segment_size_bytes: int,
        replica_config: ReplicaConfig,
        send: Callable[[int, int, Message], None],
        on_applied: Callable[[GroupHost], None],
        prng: random.Random,
        partition: PartitionIds | None = None,
        disk: DiskGuard | None = None,
        flusher: Flusher | None = None,
        descriptors: DescriptorReserve = PARTITION_DESCRIPTORS,
        ticker: GroupTicker | None = None,
    ) -> None:
        assert (kind is GroupKind.PARTITION) == (partition is not None)
        self.disk = disk
        """The node's disk guard: while it says full, a partition group takes no new
        messages as primary; as backup it drops message prepares only on a nearly
        exhausted file system (``broker.core.disk``, invariant 3)."""
        self._flusher = flusher
        """The node's flusher: syncs of groups busy at once share one flush
        (``broker.runtime.flush``); without it the group syncs its own files."""
        self.group_id = group_id
        self.kind = kind
        self.path = path
        self.replica_index = replica_index
        self.replica_count = replica_count
        self.persisted = persisted
        self.partition = partition
        self._no_sync = no_sync
        self._segment_size_bytes = segment_size_bytes
        self._replica_config = replica_config
        #: This group's messages to a peer replica (what ``Execution`` sends with).
        self._send_message = partial(send, group_id)
        self._on_applied = on_applied
        self._prng = prng
        self.store: GroupStore | None = None
        self.replica: Replica | None = None
        self.metadata: MetadataMachine | None = None
        self.partition_machine: PartitionMachine | None = None
        self.counters = GroupCounters()
        self.opened = trio.Event()
        """Set once the first attempt to open the storage ended: with the replica ready,
        or with the group failed (``failure``; invariant 6)."""
        self.closed = trio.Event()
        self.failure: str | None = None
        """Why this partition group is failed (its storage is closed), or None."""
        self._created: bool | None = None
        """Whether the group's storage is new (formatted by its first open), decided once
        before that open, until the group served: a retry of a failed first open formats
        too."""
        self._retry_prng = random.Random(group_id)  # the open retries' jitter, its own
        self._descriptors = descriptors
        self._charged = False
        """Whether this group holds a charge of ``descriptors`` (invariant 7)."""
        self.forward: Callable[[GroupHost, Submission], bool] | None = None
        """Set by the node in a cluster: hands a request this replica cannot take to the
        primary's node; returns False when it cannot (the request is then refused)."""
        self.ticker = ticker if ticker is not None else GroupTicker()
        """The node's ticks (``GroupTicker``); a group of its own when none is given (the
        caller then advances it)."""
        self._inbox: deque[Event] = deque()
        self._synced: PrepareSynced | None = None
        self._ticks_paid = 0
        """The ``ticker`` tick up to which the replica was stepped: the ticks since are
        owed, and paid first whenever the group steps."""
        self.requests = GroupRequests()
        """The group's client requests: queued, in the pipeline, answered once."""
        self._wake = trio.Event()
        self._sync_wanted = trio.Event()
        self._sync_in_flight = False
        self._sync_idle = trio.Event()
        self._sync_idle.set()
        self.journal_busy = False
        #: The partition's statistics as last read from its journal's index, for a reader
        #: that comes while the journal is busy (``Node.partition_stats``).
        self.stats_seen = PartitionStats()
        self._journal_idle = trio.Event()
        self._journal_idle.set()
        self._commit_seen = 0
        self._read_floor_seen: int | None = None
        self._applied = trio.Event()
        self._stopping = False
        self._view_seen: tuple[int, Status] | None = None
        self._transfer_seen: int | None = None
        self._retained_start_seen = 0
        self._floor_key: tuple[int, int | None, int] | None = None
        """What ``retention_floor_op`` was last computed for (``_retain``)."""
        self._floor = 0

    # -- posting (any task) -----------------------------------------------------------------

    def receive(self, message: Message) -> None:
        if len(self._inbox) >= INBOX_EVENTS_MAX or self.replica is None:
            self.counters.messages_dropped += 1
            return
        if isinstance(message, Prepare | RepairPrepare) and self._drops(message):
            # No room for its body: as if lost on the way; repaired once there is room.
            self.counters.disk_full_refusals += 1
            return
        self._inbox.append(MessageReceived(message))
        self._wake.set()

    def submit(self, submission: Submission) -> None:
        """Queue a client request; its outcome arrives through ``submission.deliver``."""
        if self._stopping or self.failure is not None:
            submission.answer(Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
            return
        self.requests.submit(submission)
        self._wake.set()

    def abandon(self, submission: Submission) -> None:
        """The submitter stopped waiting (timeout): forget the submission."""
        self.requests.abandon(submission)

    async def wait_applied(self, op: int) -> None:
        """Wait until this replica has applied ``op`` (committed it locally)."""
        while self.replica is None or self.replica.commit_min < op:
            await self._applied.wait()

    async def wait_purged(self, generation: int) -> None:
        """Wait until this partition replica has applied purge ``generation``."""
        while (
            self.partition_machine is None
            or self.partition_machine.state.purge_generation < generation
        ):
            await self._applied.wait()

    async def wait_readable(self, op: int) -> None:
        """Wait until this replica may serve a read that must see ``op``
        (``broker.core.reads.readable``): it is in normal status and has applied both
        ``op`` and the op its view started at (a restarted replica re-commits its log
        before its state holds what was acknowledged)."""
        while not readable(self.replica, op):
            await self._applied.wait()

    async def wait_journal_readable(self) -> None:
        """Wait until no truncation or checkpoint is rewriting the journal."""
        while self.journal_busy:
            await self._journal_idle.wait()

    # -- read-side facts (any task) ---------------------------------------------------------

    @property
    def applied_op(self) -> int:
        """The highest op applied here (0 while opening)."""
        return 0 if self.replica is None else self.replica.commit_min

    @property
    def known_op(self) -> int:
        """The highest op this replica knows exists (prepared or known committed)."""
        replica = self.replica
        return 0 if replica is None else max(replica.op, replica.commit_max)

    @property
    def ready(self) -> bool:
        return self.replica is not None

    @property
    def is_primary(self) -> bool:
        replica = self.replica
        return replica is not None and replica.status is Status.NORMAL and replica.is_primary

    @property
    def primary_index(self) -> int | None:
        replica = self.replica
        if replica is None or replica.status is not Status.NORMAL:
            return None
        return replica.primary

    # -- the task ---------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Open the storage, recover, then serve until cancelled.

        ``task_status`` is told once the first attempt to open ended: the metadata group
        raises if it failed; a partition group is then failed and keeps trying to open
        (invariant 6).
        """
        try:
            if self.kind is GroupKind.METADATA:
                recovered = await self._open()
                await self._serve(recovered, task_status.started)
            else:
                await self._serve_contained(task_status.started)
        finally:
            self.requests.refuse_all(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
            self.closed.set()

    async def _open(self) -> Recovered:
        """Open the storage and read what recovery needs; on failure nothing stays open."""
        store = await trio.to_thread.run_sync(self._open_store)
        self.store = store
        try:
            return await trio.to_thread.run_sync(store.recovered)
        except BaseException:
            self.store = None
            await self._close_store(store)
            raise

    async def _serve(self, recovered: Recovered, started: Callable[[], None]) -> None:
        """Build the replica on the open storage and step it until cancelled."""
        store = self.store
        assert store is not None
        session_live: Callable[[int, int], bool] | None = None
        if self.kind is GroupKind.METADATA:
            self.metadata = MetadataMachine()
            machine: MetadataMachine | PartitionMachine = self.metadata
            session_live = self.metadata.session_live
        else:
            assert self.partition is not None
            p = self.partition
            self.partition_machine = PartitionMachine(
                p.stream_id, p.topic_id, p.partition_id, store
            )
            machine = self.partition_machine
        self.replica = Replica(
            self.group_id,
            self.replica_index,
            self.replica_count,
            store,
            machine,
            self._prng,
            persisted=self.persisted,
            durable=recovered.durable,
            checkpoint=recovered.checkpoint,
            register_operation=(Operation.REGISTER if self.kind is GroupKind.METADATA else None),
            session_live=session_live,
            config=self._replica_config,
        )
        self._created = False  # it may acknowledge prepares from now on
        self._ticks_paid = self.ticker.now  # earlier ticks passed before it existed
        self._commit_seen = self.replica.commit_min
        # The view it opened in is the first seen: a view change before its first step
        # (a new group whose primary died before any message reached this replica)
        # still counts.
        self._view_seen = (self.replica.view, self.replica.status)
        self.opened.set()
        self._applied.set()
        self._applied = trio.Event()
        started()
        if self.replica.commit_min > 0:
            self._on_applied(self)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._syncer)
            if recovered.durable is not None:
                # A restarted replica's first actions come from its first step.
                await self._step(Ticked())
            await self._loop()

    async def _serve_contained(self, started: Callable[[], None]) -> None:
        """A partition group's life: open and serve; when the storage cannot be opened or
        runs short, fail, release it, and open again later (invariant 6)."""
        backoff_s = OPEN_RETRY_BACKOFF_MIN_S
        told = False

        def tell() -> None:
            nonlocal told
            if not told:
                told = True
                started()

        while True:
            failure: OSError | None = None
            if not self._charged and not self._descriptors.take():
                failure = OSError(
                    errno.EMFILE, f"no descriptor reserve left ({self._descriptors.describe()})"
                )
            else:
                self._charged = True
                try:
                    recovered = await self._open()
                except OSError as error:
                    failure = error
                else:
                    if self.failure is not None:
                        self._log_failure_line(logging.INFO, "%s: storage open again", self._name())
                        self.failure = None
                    backoff_s = OPEN_RETRY_BACKOFF_MIN_S
                    failure = await self._serve_until_short(recovered, tell)
            # Failed first, so that whoever its refusals wake finds it failed; then its
            # replica and storage go, and so does its charge.
            self._fail(failure)
            await self._discard()
            self._give_charge()
            tell()
            # Jitter spreads the retries of many groups that failed together.
            await trio.sleep(backoff_s * (0.5 + self._retry_prng.random()))
            backoff_s = min(backoff_s * 2, OPEN_RETRY_BACKOFF_MAX_S)

    async def _serve_until_short(
        self, recovered: Recovered, started: Callable[[], None]
    ) -> OSError:
        """Serve until the storage fails for want of descriptors, room or memory, and
        return why (the storage is still open). Any other failure propagates (it ends the
        node); a ``JournalBroken`` beside the shortage is its echo (the syncer found the
        journal broken by it)."""
        failure: OSError | None = None
        try:
            await self._serve(recovered, started)
        except* (OSError, JournalBroken) as group:
            errors = [error for error in _leaves(group) if isinstance(error, OSError)]
            if not errors or any(e.errno not in STORAGE_SHORTAGE_ERRNOS for e in errors):
                raise
            failure = errors[0]
        assert failure is not None  # serving ends only by an exception
        return failure

    def _fail(self, error: OSError) -> None:
        """Mark the group failed: every request is refused until its storage opens."""
        first = self.failure is None
        self.failure = f"{error.strerror or error} ({errno.errorcode.get(error.errno or 0, '?')})"
        if first:
            self._log_failure_line(
                logging.WARNING,
                "%s failed: its storage cannot be used: %s; refusing its requests and "
                "opening it again with a backoff",
                self._name(),
                error,
            )
        else:
            log.debug("%s: its storage still cannot be opened: %s", self._name(), error)
        self.requests.refuse_all(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
        self.opened.set()

    def _log_failure_line(self, level: int, message: str, *args: object) -> None:
        """A failure or recovery line, within the node's shared budget of them."""
        admitted, left_out = _failure_lines.admit(trio.current_time())
        if not admitted:
            return
        if left_out:
            message += f" ({left_out} more group failure lines not logged)"
        log.log(level, message, *args)

    def _give_charge(self) -> None:
        if self._charged:
            self._charged = False
            self._descriptors.give()

    async def _discard(self) -> None:
        """Forget the replica and release the storage, if any, of a failed group (the
        task's nursery is gone, so no sync or journal action is in flight). The partition
        machine stays until a new one replaces it: a read that raced the failure finds its
        storage closed (``EBADF``) rather than a missing machine."""
        self.replica = None
        self._inbox.clear()
        self._synced = None
        self.ticker.cancel(self.group_id)
        self._view_seen = None
        self._transfer_seen = None
        self._read_floor_seen = None
        self.requests.refuse_all(IggyErrorCode.TRANSIENT_NOT_ACCEPTED)
        store, self.store = self.store, None
        if store is not None:
            await self._close_store(store)
        self._wake_readers()

    async def _close_store(self, store: GroupStore) -> None:
        """Close a store being given up; a failure to close is logged (its descriptors
        are released whatever ``close`` says)."""
        with trio.CancelScope(shield=True):
            try:
                await trio.to_thread.run_sync(store.close)
            except OSError as error:
                log.warning("%s: closing its storage failed: %s", self._name(), error)

    def _open_store(self) -> GroupStore:
        """Open the storage (in a worker thread)."""
        if self._created is None:
            self._created = not self.path.exists()
        return GroupStore(
            self.path,
            no_sync=self._no_sync,
            segment_size_bytes=self._segment_size_bytes,
            keep_sealed_files_open=self.kind is GroupKind.METADATA,
            created=self._created,
            partition=self.kind is GroupKind.PARTITION,
        )

    async def close(self) -> None:
        """Sync and close the journal (after the task was cancelled)."""
        self._stopping = True
        store = self.store
        if store is None:
            self._give_charge()
            return
        await self._wait_sync_idle()
        try:
            await trio.to_thread.run_sync(store.close)
        finally:
            self._give_charge()

    async def _loop(self) -> None:
        try:
            while True:
                self._wake = trio.Event()
                await self._pass()
                if self._has_work() or self._ticks_due():
                    await trio.lowlevel.checkpoint()
                    continue
                await self._wake.wait()
        finally:
            self.ticker.cancel(self.group_id)

    def _ticks_due(self) -> bool:
        """Whether the ticks owed reach the replica's next timeout with something to do
        (or ``TICKS_OWED_MAX``); if not, ask the ticker to wake the group on the tick they
        will. Asked once per pass, when the group would sleep, not after every step."""
        replica = self.replica
        assert replica is not None
        due = self._ticks_paid + min(replica.ticks_until_due(), TICKS_OWED_MAX)
        if due <= self.ticker.now:
            return True
        self.ticker.wake_at(self.group_id, due, self._wake.set)
        return False

    def _has_work(self) -> bool:
        return bool(self._inbox or self._synced is not None or self.requests.has_work(self.replica))

    async def _pass(self) -> None:
        await self._pay_ticks()
        synced, self._synced = self._synced, None
        if synced is not None:
            await self._step(synced)
        stepped = 0
        while self._inbox and stepped < EVENTS_PER_PASS_MAX:
            await self._step(self._inbox.popleft())
            stepped += 1
        await self._admit()

    # -- stepping ---------------------------------------------------------------------------

    async def _pay_ticks(self) -> None:
        """Step the ticks owed, many at once: ``Ticked(count)`` may carry ticks up to the
        one on which a timeout with something to do fires, not past it."""
        replica = self.replica
        assert replica is not None
        now = self.ticker.now
        ticks = min(now - self._ticks_paid, TICKS_OWED_MAX)
        self._ticks_paid = now
        while ticks:
            count = min(ticks, replica.ticks_until_due())
            ticks -= count
            if replica.ticks_idle(count):
                # Only countdowns move: no actions, nothing applied, no role changed, so
                # there is nothing to execute and nothing for ``_after_step`` to see.
                replica.step(Ticked(count))
                continue
            await self._step(Ticked(count))

    async def _step(self, event: Event) -> None:
        replica = self.replica
        assert replica is not None
        next_event: Event | None = event
        while next_event is not None:
            applied = replica.commit_min
            actions = replica.step(next_event)
            if not actions and isinstance(next_event, Ticked) and replica.commit_min == applied:
                # A tick that asks for nothing and applied nothing (most of a busy group's
                # ticks) leaves no storage work, and nothing ``_retain`` reads changed.
                break
            next_event = await self._execute(actions)
        self._after_step()

    async def _execute(self, actions: list[Action]) -> Event | None:
        """Run ``actions`` in order (``broker.core.execution``); return the
        ``PrepareWritten`` to report, if any."""
        store = self.store
        replica = self.replica
        assert store is not None and replica is not None
        execution = Execution(replica, self.requests, self._send_message)
        for action in execution.run(actions):
            if isinstance(action, AppendToJournal):
                prepare = action.prepare
                try:
                    store.append(prepare)
                except OSError as error:
                    await self._retry_storage("append", error, partial(_now, store.append, prepare))
                self._count_prepare(prepare)
            elif isinstance(action, SyncJournal):
                self._sync_wanted.set()
            elif isinstance(action, TruncateJournal):
                truncate = partial(self._with_journal_busy, store.truncate, action.after_op)
                await self._storage_action("truncate", truncate)
            elif isinstance(action, WriteSuperblock):
                write = partial(trio.to_thread.run_sync, store.write_superblock, action.state)
                await self._storage_action("superblock write", write)
            elif isinstance(action, RepairJournal):
                repair = partial(self._with_journal_busy, store.repair, action.prepare)
                await self._storage_action("repair", repair)
                self.counters.records_repaired += 1
            else:
                assert isinstance(action, WriteCheckpoint)
                checkpoint = partial(
                    self._with_journal_busy,
                    store.write_checkpoint,
                    action.op,
                    action.snapshot,
                    action.journal_restart_op,
                )
                await self._storage_action("checkpoint", checkpoint)
                self.counters.checkpoints += 1
        if self.partition_machine is not None:
            await self._retain(store, self.partition_machine)
        return execution.written_event()

    async def _retain(self, store: GroupStore, machine: PartitionMachine) -> None:
        """Delete the journal segments that hold only data below the partition's retained
        start (a committed ``RetainPartition`` or purge), but never an op after the
        durable checkpoint: a restart restores the checkpoint and replays every op after
        it from the journal."""
        replica = self.replica
        if replica is not None and not replica.log_whole:
            # Committed records are being backfilled (a restart found them damaged, or a
            # state transfer restarted the journal): the state's index does not reach them
            # yet, so its floor says nothing of what they hold.
            return
        # The floor is a function of the applied state and of the first offset the
        # journal holds: computed again only when one of them moved, not after every
        # step (most steps apply nothing).
        state = machine.state
        key = (
            -1 if replica is None else replica.commit_min,
            store.journal.offset_min,
            state.retained_start,
        )
        if key != self._floor_key:
            self._floor_key = key
            self._floor = state.retention_floor_op()
        retired_below = self._floor
        if machine.state.retained_start != self._retained_start_seen:
            # Once per purge or retention (not per op: a partition without messages would
            # seal a segment per consumer offset store).
            self._retained_start_seen = machine.state.retained_start
            store.seal_if_retired(retired_below)
        floor = min(retired_below, store.superblock.state.checkpoint + 1)
        if store.retain_due(floor):
            retain = partial(self._with_journal_busy, store.retain, floor)
            deleted = await self._storage_action("retention", retain)
            self.counters.segments_deleted += len(deleted)
            deleted_bytes = sum(segment.size_bytes for segment in deleted)
            self.counters.bytes_deleted += deleted_bytes
            if self.disk is not None:
                self.disk.note_deleted(deleted_bytes, len(deleted))
        if not self._sync_in_flight and store.retain_waits_for_sync(floor):
            # The journal deletes only what it synced, and a replicated group's journal
            # is not synced as it appends: one sync lets the deletion go on (its
            # completion wakes this group, which comes back here), also when an earlier
            # sync let only the oldest segments go.
            self._sync_wanted.set()

    def _name(self) -> str:
        p = self.partition
        if p is None:
            return "metadata group"
        return f"partition {p.stream_id}/{p.topic_id}/{p.partition_id} (group {self.group_id})"

    def _log_role(self, replica: Replica) -> None:
        """One INFO line per view or status change and per state transfer of this group."""
        view = (replica.view, replica.status)
        seen = self._view_seen
        if view != seen:
            # Not the view a replica opened in (a restart of 10,000 groups is not news),
            # and not recovery's own steps: a new view, a view change starting, and the
            # view it started.
            changed = seen is not None and (
                view[0] != seen[0] or Status.VIEW_CHANGE in (replica.status, seen[1])
            )
            if seen is not None and view[0] > seen[0]:
                self.counters.view_changes += 1
            if changed:
                role = "primary" if replica.is_primary else f"backup of {replica.primary}"
                log.info(
                    "%s: view %d, %s, replica %d is %s",
                    self._name(),
                    replica.view,
                    replica.status.value,
                    self.replica_index,
                    role,
                )
            self._view_seen = view
        peer = replica.state_transfer_peer
        if peer != self._transfer_seen:
            if peer is not None:
                self.counters.state_transfers += 1
                log.info("%s: state transfer from replica %d started", self._name(), peer)
            else:
                log.info("%s: state transfer ended at op %d", self._name(), replica.commit_min)
            self._transfer_seen = peer

    def _after_step(self) -> None:
        replica = self.replica
        assert replica is not None
        self._log_role(replica)
        if replica.commit_min != self._commit_seen:
            self.counters.commits += max(0, replica.commit_min - self._commit_seen)
            self.counters.commit_rounds += 1
            self._commit_seen = replica.commit_min
            self._wake_readers()
            self._on_applied(self)
        elif replica.read_floor != self._read_floor_seen:
            self._wake_readers()  # a view started: readers may go on
        self._read_floor_seen = replica.read_floor
        if not (replica.status is Status.NORMAL and replica.is_primary):
            self.requests.primary_lost()

    def _wake_readers(self) -> None:
        self._applied.set()
        self._applied = trio.Event()

    def _disk_full(self) -> bool:
        """Whether this partition group must take no more message bytes for now (the
        metadata group's ops are small and keep logins and admin working)."""
        return self.kind is GroupKind.PARTITION and self.disk is not None and self.disk.full

    def _drops(self, message: Prepare | RepairPrepare) -> bool:
        """Whether this partition backup leaves a peer's prepare unwritten for want of
        disk (``broker.core.disk``, invariant 3)."""
        disk = self.disk
        if self.kind is not GroupKind.PARTITION or disk is None:
            return False
        prepare = message if isinstance(message, Prepare) else message.prepare
        return disk.usage.drops_prepare(prepare.header.operation)

    def _count_prepare(self, prepare: Prepare) -> None:
        counters = self.counters
        counters.prepares += 1
        counters.prepare_bytes += len(prepare.body)
        if self.disk is not None:
            self.disk.note_appended(len(prepare.body))
        header = prepare.header
        if header.operation == Operation.SEND_MESSAGES and len(prepare.body) >= BATCH_HEADER.size:
            counters.prepare_messages += BATCH_HEADER.unpack_from(prepare.body, 0)[6]

    # -- admission --------------------------------------------------------------------------

    async def _admit(self) -> None:
        """Carry out ``GroupRequests.take`` until it has nothing that may go on."""
        replica = self.replica
        assert replica is not None
        while (taken := self.requests.take(replica, disk_full=self._disk_full())) is not None:
            submission = taken.submission
            if isinstance(taken, Forward):
                if self.forward is None or not self.forward(self, submission):
                    submission.answer(Refused(IggyErrorCode.TRANSIENT_NOT_ACCEPTED))
            elif isinstance(taken, RefusedDiskFull):
                self.counters.disk_full_refusals += 1
            else:
                await self._step(submission.event())
                self.requests.settle(submission)

    # -- disk -------------------------------------------------------------------------------

    async def _syncer(self) -> None:
        store = self.store
        assert store is not None
        while True:
            await self._sync_wanted.wait()
            self._sync_wanted = trio.Event()
            self._sync_in_flight = True
            self._sync_idle = trio.Event()
            try:
                if self._flusher is not None:
                    op = await self._flusher.sync(store)
                else:
                    op = await trio.to_thread.run_sync(store.sync)
            finally:
                self._sync_in_flight = False
                self._sync_idle.set()
            self.counters.syncs += 1
            prepare = store.read(op) if op > 0 else None
            if prepare is not None:
                self.counters.synced_prepares = max(self.counters.synced_prepares, op)
                self._synced = PrepareSynced(op, prepare.checksum)
                self._wake.set()

    async def _wait_sync_idle(self) -> None:
        while self._sync_in_flight:
            await self._sync_idle.wait()

    async def _storage_action(self, what: str, run: Callable[[], Awaitable[_T]]) -> _T:
        """``run()``, retried in place while it is refused for want of a descriptor."""
        try:
            return await run()
        except OSError as error:
            return await self._retry_storage(what, error, run)

    async def _retry_storage(
        self, what: str, error: OSError, run: Callable[[], Awaitable[_T]]
    ) -> _T:
        """Retry a journal action that ``error`` refused, while it is refused for want of
        a descriptor and left the journal whole (invariant 6); re-raise anything else."""
        backoff_s = STORAGE_RETRY_BACKOFF_MIN_S
        retries = 0
        retries_max = STORAGE_RETRIES_MAX if self.kind is GroupKind.PARTITION else None
        while True:
            store = self.store
            if error.errno not in DESCRIPTOR_ERRNOS or store is None or store.broken is not None:
                raise error
            if retries_max is not None and retries >= retries_max:
                raise error  # a partition group fails rather than stall (invariant 6)
            if retries == 0:
                log.warning("%s: %s refused: %s; retrying", self._name(), what, error)
            retries += 1
            await trio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, STORAGE_RETRY_BACKOFF_MAX_S)
            try:
                result = await run()
            except OSError as again:
                error = again
                continue
            log.info("%s: %s done after %d retries", self._name(), what, retries)
            return result

    async def _with_journal_busy(self, function: Callable[..., _T], *args: Any) -> _T:
        await self._wait_sync_idle()
        self.journal_busy = True
        self._journal_idle = trio.Event()
        try:
            return await trio.to_thread.run_sync(function, *args)
        finally:
            self.journal_busy = False
            self._journal_idle.set()


async def _now(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` on the event loop, as an awaitable (for ``_storage_action``)."""
    return function(*args)


def _leaves(group: BaseExceptionGroup[_E]) -> list[_E]:
    """The exceptions of ``group`` and of the groups nested in it."""
    leaves: list[_E] = []
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            leaves.extend(_leaves(error))
        else:
            leaves.append(error)
    return leaves
