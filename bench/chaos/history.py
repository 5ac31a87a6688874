"""The chaos checker: what a run's history and the replicas' final logs must satisfy.

Purpose: judge a run from the outside. The input is plain data recorded by the clients
(every send with its outcome, every poll with what it returned) and the log of every
partition as each node serves it after healing; nothing here knows how the broker works.
This module is pure (standard library only: no clock, no OS, no randomness, no set
iteration in an order that matters), so the simulator can use the same definitions; the
names are the simulator's checkers (``sim/checkers.py``) and, for each anomaly, Jepsen's
queue-checker key (``reference/vsr.md`` §4.1-4.2).

Properties, per partition (each is its own ordered log):

1. ``converged`` [inconsistent-offsets, lost suffix]: after healing every node serves the
   same log: same length, and at every offset the same message id and payload.
2. ``dense`` [poll-skip]: a node's log holds offsets 0, 1, 2, ... with no gap and no
   repeat.
3. ``acked`` [lost-write, duplicate, nonmonotonic-send]: every message whose send was
   acknowledged is in its partition's log exactly once, at ``base_offset + index`` when
   the acknowledgement named the base offset; a producer's acknowledged sends to one
   partition got increasing offsets in the order they were acknowledged. A message no
   node serves is ``lost``; one that some node lacks fails ``converged``.
4. ``unique`` [duplicate]: no message id appears twice anywhere, acknowledged or not
   (an unknown-outcome send may be in the log at most once).
5. ``aborted`` [G1a]: a message whose send definitely failed is not in any log.
6. ``phantom``: every message in a log was sent by someone, to that partition.
7. ``payload``: every message's payload is the one its id determines
   (:func:`payload_for`), so no byte was corrupted between producer and reader.
8. ``poll`` [poll-skip, int-poll-skip, inconsistent-offsets]: every poll during the run
   returned a run of contiguous offsets starting where it asked, and each (offset, id) it
   read is what the final log holds there (so no read of something later lost or
   replaced).
9. ``stored-offset`` [nonmonotonic-poll, poll-skip]: a consumer that reads from its
   stored offset starts one past the last offset it stored and saw acknowledged (or one
   past a store whose outcome was unknown, which may take effect late).

A violation names its checker, its Jepsen key and the partition, so a failing run can be
traced; counts (acknowledged, lost, duplicated) are reported for the docs' table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

PartitionKey = tuple[str, int]
"""(topic name, partition id)."""
Outcome = Literal["ok", "unknown", "failed"]
_Flag = Callable[[str, str, "PartitionKey | None", str], None]

PAYLOAD_PREFIX_BYTES: Final = 16
PAYLOAD_EXTRA_BYTES_MAX: Final = 240
DIGEST_BYTES: Final = 8


def message_id(producer: int, sequence: int) -> int:
    """A run-unique, non-zero 128-bit message id: producer in the high half."""
    assert 0 <= producer < 1 << 63 and 0 <= sequence < 1 << 64
    return ((producer + 1) << 64) | sequence


def payload_for(message: int) -> bytes:
    """The payload of message ``message``: its id, then filler derived from it (16 to 256
    bytes), so a reader can check every payload without remembering any."""
    raw = message.to_bytes(16, "little")
    seed = hashlib.blake2b(raw, digest_size=32).digest()
    extra = seed[0] % (PAYLOAD_EXTRA_BYTES_MAX + 1)
    filler = (seed * (extra // len(seed) + 1))[:extra]
    return raw + filler


def digest(payload: bytes) -> bytes:
    """A short digest of a payload, to keep logs small in memory."""
    return hashlib.blake2b(payload, digest_size=DIGEST_BYTES).digest()


@dataclass(frozen=True, slots=True)
class Send:
    """One send call of a producer, as the producer saw it end."""

    producer: int
    sequence: int
    """The producer's call number: calls of one producer are lock-step, so this is also
    the order of their acknowledgements."""
    partition: PartitionKey
    message_ids: tuple[int, ...]
    outcome: Outcome
    base_offset: int | None = None
    """From the acknowledgement; None if the ack carried no confirmation (the SDK's
    "applied, reply aged out" case) or the send was not acknowledged."""


@dataclass(frozen=True, slots=True)
class Polled:
    """One message a poll returned."""

    offset: int
    message_id: int
    payload_digest: bytes


@dataclass(frozen=True, slots=True)
class Poll:
    """One poll of a consumer during the run.

    ``asked`` is the offset a positional consumer asked for. A consumer that reads from
    its stored offset sets ``expected`` (where it must start: one past what it stored and
    saw acknowledged) or None when a store's outcome is unknown, and ``floor`` (it must not
    start below this: one past the last store it saw acknowledged).
    """

    consumer: int
    partition: PartitionKey
    messages: tuple[Polled, ...]
    asked: int | None = None
    expected: int | None = None
    floor: int = 0
    unknown_stores: tuple[int, ...] = ()
    """Starts that a store whose outcome was unknown would explain (its offset + 1): such
    a store may take effect at any later time, even after later acknowledged ones."""
    at_s: float = 0.0
    """When the poll was answered, in seconds since the run started (for the report)."""


@dataclass(frozen=True, slots=True)
class Violation:
    checker: str
    anomaly: str
    partition: PartitionKey | None
    detail: str

    def __str__(self) -> str:
        where = f" {self.partition[0]}/{self.partition[1]}" if self.partition else ""
        return f"{self.checker} [{self.anomaly}]{where}: {self.detail}"


@dataclass(slots=True)
class Verdict:
    """What the checker found."""

    violations: list[Violation] = field(default_factory=list)
    sends: int = 0
    sends_acknowledged: int = 0
    messages_acknowledged: int = 0
    messages_unknown: int = 0
    messages_unknown_present: int = 0
    messages_failed: int = 0
    messages_in_logs: int = 0
    lost: int = 0
    """Acknowledged messages that no node serves."""
    lost_below_retained_start: int = 0
    """With allowed gaps: acknowledged messages no node serves because every node's log
    of their partition starts above them (counted apart from ``lost``, never fine)."""
    missing_on_a_replica: int = 0
    """Acknowledged messages that some node does not serve (and another does)."""
    counts: dict[str, int] = field(default_factory=dict)
    """Violations by ``checker [anomaly]``, all of them (the list keeps the first ones)."""
    polls_unverifiable: int = 0
    """Messages read during the run at offsets that no node serves any more."""
    duplicated: int = 0
    polls: int = 0
    messages_polled: int = 0
    violations_omitted: int = 0
    retained_gaps: list[str] = field(default_factory=list)
    """Nodes that serve a partition only from some offset on (allowed gaps only)."""
    retained_gap_polls: int = 0
    """Polls that skipped to such a node's first offset (allowed gaps only)."""

    @property
    def ok(self) -> bool:
        return not self.violations and not self.violations_omitted

    def add(self, violation: Violation, limit: int) -> None:
        kind = f"{violation.checker} [{violation.anomaly}]"
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if len(self.violations) < limit:
            self.violations.append(violation)
        else:
            self.violations_omitted += 1


NodeLogs = Mapping[int, Mapping[PartitionKey, Sequence[Polled]]]
"""``logs[node][partition]``: the partition as that node serves it, in offset order."""

VIOLATIONS_MAX: Final = 200
"""Violations kept in a verdict; the rest are only counted."""


def check(
    sends: Sequence[Send],
    polls: Sequence[Poll],
    logs: NodeLogs,
    partitions: Iterable[PartitionKey],
    *,
    allow_retained_gaps: bool = False,
    violations_max: int = VIOLATIONS_MAX,
) -> Verdict:
    """Check a run: every property of the module docstring.

    Args:
        sends: Every send call, in any order.
        polls: Every poll during the run, in any order.
        logs: Each node's final log of each partition (after healing).
        partitions: Every partition of the run (a partition no node returned is empty).
        allow_retained_gaps: Count rather than fail a node that serves a partition only
            from some offset on, its log otherwise identical to the others' (a replica
            that caught up by state transfer, ``docs/operations.md`` "Not done"; the
            simulator's ``poll_gaps``), polls that skipped to such a start, and
            acknowledged messages below the start of every node's log
            (``lost_below_retained_start``: data loss, reported apart).
        violations_max: Violations kept in the verdict (the rest are counted).
    """
    verdict = Verdict()
    keys = sorted(set(partitions))
    nodes = sorted(logs)
    limit = violations_max

    def flag(checker: str, anomaly: str, key: PartitionKey | None, detail: str) -> None:
        verdict.add(Violation(checker, anomaly, key, detail), limit)

    # 1-2: every node's log is dense, and all are the same.
    reference: dict[PartitionKey, Sequence[Polled]] = {}
    reference_start: dict[PartitionKey, int] = {}
    starts: dict[PartitionKey, set[int]] = {}
    for key in keys:
        per_node = {node: logs[node].get(key, ()) for node in nodes}
        for node, log in per_node.items():
            first = log[0].offset if log else 0
            for index, entry in enumerate(log):
                if entry.offset != first + index:
                    flag(
                        "dense",
                        "poll-skip",
                        key,
                        f"node {node} serves offset {entry.offset} after {first + index - 1}",
                    )
                    break
        # The reference is the log that reaches furthest back, then furthest forward.
        longest: Sequence[Polled] = max(
            per_node.values(),
            key=lambda log: (-(log[0].offset if log else 0), _end(log)),
            default=(),
        )
        reference[key] = longest
        reference_start[key] = longest[0].offset if longest else 0
        starts[key] = set()
        for node, log in per_node.items():
            if _end(log) != _end(longest):
                flag(
                    "converged",
                    "lost-write",
                    key,
                    f"node {node} serves offsets up to {_end(log) - 1}, another node up to "
                    f"{_end(longest) - 1}",
                )
            start = log[0].offset if log else _end(log)
            if log and start > reference_start[key]:
                starts[key].add(start)
                gap = (
                    f"node {node} serves offsets from {start} only; another node from "
                    f"{reference_start[key]}"
                )
                if allow_retained_gaps:
                    verdict.retained_gaps.append(f"{key[0]}/{key[1]}: {gap}")
                else:
                    flag("converged", "retained-start", key, gap)
            by_offset = {e.offset: e for e in longest}
            for mine in log:
                theirs = by_offset.get(mine.offset)
                if theirs is not None and mine != theirs:
                    flag(
                        "converged",
                        "inconsistent-offsets",
                        key,
                        f"node {node} offset {mine.offset}: id {mine.message_id:#x}, "
                        f"another node has id {theirs.message_id:#x} there",
                    )
                    break
        verdict.messages_in_logs += len(longest)

    # Where each id is, per node (a node's own duplicates count).
    sent_to: dict[int, PartitionKey] = {}
    outcome_of: dict[int, Outcome] = {}
    for send in sends:
        for message in send.message_ids:
            if message in sent_to:
                flag("unique", "duplicate", send.partition, f"id {message:#x} was sent twice")
            sent_to[message] = send.partition
            outcome_of[message] = send.outcome
    located: dict[int, dict[int, list[tuple[PartitionKey, int]]]] = {node: {} for node in nodes}
    for node in nodes:
        where = located[node]
        for key in keys:
            for entry in logs[node].get(key, ()):
                where.setdefault(entry.message_id, []).append((key, entry.offset))
    duplicated: set[int] = set()
    for node in nodes:
        for message, places in located[node].items():
            if len(places) > 1:
                duplicated.add(message)
                flag(
                    "unique",
                    "duplicate",
                    places[0][0],
                    f"node {node} holds id {message:#x} {len(places)} times: {places}",
                )
            key, offset = places[0]
            if message not in sent_to:
                flag("phantom", "phantom", key, f"node {node} offset {offset}: id {message:#x}")
            elif sent_to[message] != key:
                flag(
                    "phantom",
                    "wrong-partition",
                    key,
                    f"node {node} offset {offset}: id {message:#x} was sent to "
                    f"{sent_to[message][0]}/{sent_to[message][1]}",
                )
            elif outcome_of[message] == "failed":
                flag("aborted", "G1a", key, f"node {node} offset {offset}: id {message:#x}")

    # 7: payloads.
    for key in keys:
        for entry in reference[key]:
            if digest(payload_for(entry.message_id)) != entry.payload_digest:
                flag(
                    "payload",
                    "corrupt-payload",
                    key,
                    f"offset {entry.offset}: id {entry.message_id:#x} has a payload that "
                    "is not the one sent",
                )

    # 3: acknowledged sends.
    lost: set[int] = set()
    missing_somewhere: set[int] = set()
    anywhere: dict[int, list[tuple[PartitionKey, int]]] = {}
    for node in nodes:
        for message, places in located[node].items():
            anywhere.setdefault(message, places)
    last_offset: dict[tuple[int, PartitionKey], tuple[int, int]] = {}
    for send in sorted(sends, key=lambda s: (s.producer, s.sequence)):
        verdict.sends += 1
        count = len(send.message_ids)
        if send.outcome == "failed":
            verdict.messages_failed += count
            continue
        if send.outcome == "unknown":
            verdict.messages_unknown += count
            verdict.messages_unknown_present += sum(1 for m in send.message_ids if m in anywhere)
            continue
        verdict.sends_acknowledged += 1
        verdict.messages_acknowledged += count
        for index, message in enumerate(send.message_ids):
            at = "" if send.base_offset is None else f" at offset {send.base_offset + index}"
            what = (
                f"id {message:#x} (producer {send.producer} call {send.sequence}, acknowledged{at})"
            )
            if message not in anywhere:
                log_start = reference_start.get(send.partition, 0)
                if (
                    allow_retained_gaps
                    and send.base_offset is not None
                    and send.base_offset + index < log_start
                ):
                    # Every node's log starts above it: lost with the retained-start gap.
                    verdict.lost_below_retained_start += 1
                    continue
                lost.add(message)
                flag("acked", "lost-write", send.partition, f"no node holds {what}")
                continue
            missing = [node for node in nodes if message not in located[node]]
            if allow_retained_gaps:
                # A node that holds the partition only from some offset on is counted
                # above; it is not asked for what lies below that offset.
                missing = [
                    node
                    for node in missing
                    if not _below_start(logs[node].get(send.partition, ()), anywhere[message])
                ]
            if missing:
                missing_somewhere.add(message)
                flag("converged", "lost-write", send.partition, f"nodes {missing} lack {what}")
            if send.base_offset is not None:
                expected = (send.partition, send.base_offset + index)
                for node in nodes:
                    held_at = located[node].get(message)
                    if held_at and held_at[0] != expected:
                        (found_key, found_offset) = held_at[0]
                        flag(
                            "acked",
                            "inconsistent-offsets",
                            send.partition,
                            f"node {node}: id {message:#x} acknowledged at offset "
                            f"{expected[1]} is at {found_key[0]}/{found_key[1]} "
                            f"offset {found_offset}",
                        )
                        break
        if send.base_offset is not None:
            previous = last_offset.get((send.producer, send.partition))
            if previous is not None and previous[1] >= send.base_offset:
                flag(
                    "acked",
                    "nonmonotonic-send",
                    send.partition,
                    f"producer {send.producer} call {send.sequence} acknowledged at offset "
                    f"{send.base_offset} after call {previous[0]} at {previous[1]}",
                )
            last_offset[(send.producer, send.partition)] = (
                send.sequence,
                send.base_offset + count - 1,
            )
    verdict.lost = len(lost)
    verdict.missing_on_a_replica = len(missing_somewhere)
    verdict.duplicated = len(duplicated)

    # 8: polls during the run.
    for poll in polls:
        verdict.polls += 1
        verdict.messages_polled += len(poll.messages)
        _check_poll(
            poll,
            reference.get(poll.partition, ()),
            starts.get(poll.partition, set()) if allow_retained_gaps else set(),
            flag,
            verdict,
        )
    return verdict


def _end(log: Sequence[Polled]) -> int:
    """One past the last offset of a log (0 for an empty one)."""
    return log[-1].offset + 1 if log else 0


def _below_start(log: Sequence[Polled], places: list[tuple[PartitionKey, int]]) -> bool:
    """Whether the message found at ``places`` on another node lies below ``log``'s start."""
    if not log or not places:
        return False
    return places[0][1] < log[0].offset


def _check_poll(
    poll: Poll,
    final: Sequence[Polled],
    retained_starts: set[int],
    flag: _Flag,
    verdict: Verdict,
) -> None:
    key = poll.partition
    who = f"consumer {poll.consumer} (at {poll.at_s:.1f} s)"
    if not poll.messages:
        return
    base = final[0].offset if final else 0
    end = base + len(final)  # the final log's offsets are dense: final[i] is base + i
    first = poll.messages[0].offset
    if poll.asked is not None and poll.asked < first and first in retained_starts:
        verdict.retained_gap_polls += 1  # served by a node that no longer holds the start
    elif poll.asked is not None and first != poll.asked:
        anomaly = "poll-skip" if first > poll.asked else "nonmonotonic-poll"
        flag("poll", anomaly, key, f"{who} asked for offset {poll.asked} and got {first} first")
    if poll.asked is None and first in poll.unknown_stores:
        pass  # an earlier store whose outcome was unknown took effect late
    elif poll.asked is None:
        if first < poll.floor:
            flag(
                "stored-offset",
                "nonmonotonic-poll",
                key,
                f"{who} stored offset {poll.floor - 1} (acknowledged) and then read from {first}",
            )
        elif poll.expected is not None and first != poll.expected:
            anomaly = "poll-skip" if first > poll.expected else "nonmonotonic-poll"
            flag(
                "stored-offset",
                anomaly,
                key,
                f"{who} should have read from offset {poll.expected} and read from {first}",
            )
    for index, message in enumerate(poll.messages):
        if message.offset != first + index:
            flag(
                "poll",
                "int-poll-skip",
                key,
                f"{who} got offset {message.offset} at position {index} of a poll from {first}",
            )
            return
        held = final[message.offset - base] if base <= message.offset < end else None
        if held is None and message.offset < base:
            verdict.polls_unverifiable += 1  # no node serves this offset any more
            continue
        if held is None:
            flag(
                "poll",
                "inconsistent-offsets",
                key,
                f"{who} read offset {message.offset} (id {message.message_id:#x}), which the "
                f"final log does not hold",
            )
            return
        if held.message_id != message.message_id or held.payload_digest != message.payload_digest:
            flag(
                "poll",
                "inconsistent-offsets",
                key,
                f"{who} read id {message.message_id:#x} at offset {message.offset}; the final "
                f"log holds {held.message_id:#x} there",
            )
            return
