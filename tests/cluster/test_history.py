"""The chaos checker on hand-made histories: a clean run passes, each anomaly is caught.

Every test plants one bug in an otherwise clean history (a lost or duplicated message, a
diverging replica, a consumer that skipped or went back, ...) and checks that the checker
names it with its Jepsen key, so none of these checks is one that cannot fail.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from bench.chaos import history
from bench.chaos.history import (
    PartitionKey,
    Poll,
    Polled,
    Send,
    check,
    digest,
    message_id,
    payload_for,
)

P0: PartitionKey = ("replicated", 0)
P1: PartitionKey = ("persisted", 0)
KEYS = [P0, P1]


def _entry(offset: int, message: int) -> Polled:
    return Polled(offset, message, digest(payload_for(message)))


def _clean() -> tuple[list[Send], dict[PartitionKey, list[Polled]]]:
    """Two producers, two partitions: producer 0 sends 3 batches, producer 1 two."""
    sends: list[Send] = []
    log: dict[PartitionKey, list[Polled]] = {P0: [], P1: []}
    plan = [(0, P0, 2), (1, P0, 1), (0, P1, 3), (0, P0, 2), (1, P1, 2)]
    counters = {0: 0, 1: 0}
    sequences = {0: 0, 1: 0}
    for producer, key, count in plan:
        ids = [message_id(producer, counters[producer] + i) for i in range(count)]
        counters[producer] += count
        base = len(log[key])
        log[key] += [_entry(base + i, m) for i, m in enumerate(ids)]
        sends.append(Send(producer, sequences[producer], key, tuple(ids), "ok", base))
        sequences[producer] += 1
    return sends, log


def _nodes(log: dict[PartitionKey, list[Polled]]) -> dict[int, dict[PartitionKey, list[Polled]]]:
    return {node: {k: list(v) for k, v in log.items()} for node in range(3)}


def _anomalies(verdict: history.Verdict) -> set[tuple[str, str]]:
    return {(v.checker, v.anomaly) for v in verdict.violations}


def test_checker_passes_a_clean_history_and_counts_it() -> None:
    sends, log = _clean()
    polls = [Poll(100, P0, tuple(log[P0][1:4]), asked=1)]
    verdict = check(sends, polls, _nodes(log), KEYS)
    assert verdict.ok, verdict.violations
    assert verdict.messages_acknowledged == 10
    assert verdict.messages_in_logs == 10
    assert (verdict.lost, verdict.duplicated, verdict.polls) == (0, 0, 1)


def test_checker_catches_an_acknowledged_message_missing_on_one_node() -> None:
    sends, log = _clean()
    logs = _nodes(log)
    logs[2][P1] = logs[2][P1][:-1]  # node 2 lost the last message of P1
    verdict = check(sends, [], logs, KEYS)
    assert _anomalies(verdict) == {("converged", "lost-write")}
    assert (verdict.lost, verdict.missing_on_a_replica) == (0, 1)


def test_checker_catches_an_acknowledged_message_no_node_serves() -> None:
    sends, log = _clean()
    log[P1] = log[P1][:-1]
    verdict = check(sends, [], _nodes(log), KEYS)
    assert ("acked", "lost-write") in _anomalies(verdict)
    assert verdict.lost == 1
    assert verdict.counts["acked [lost-write]"] == 1


def test_checker_catches_a_message_appended_twice() -> None:
    sends, log = _clean()
    again = log[P0][0].message_id
    log[P0].append(_entry(len(log[P0]), again))
    verdict = check(sends, [], _nodes(log), KEYS)
    assert ("unique", "duplicate") in _anomalies(verdict)
    assert verdict.duplicated == 1


def test_checker_catches_an_acknowledgement_naming_the_wrong_offset() -> None:
    sends, log = _clean()
    first = sends[0]
    sends[0] = Send(first.producer, first.sequence, first.partition, first.message_ids, "ok", 7)
    verdict = check(sends, [], _nodes(log), KEYS)
    assert ("acked", "inconsistent-offsets") in _anomalies(verdict)


def test_checker_catches_a_later_send_acknowledged_at_a_lower_offset() -> None:
    sends, log = _clean()
    # Swap the order of producer 0's two sends to P0 in its own sequence numbers.
    a, b = sends[0], sends[3]
    sends[0] = Send(a.producer, b.sequence, a.partition, a.message_ids, "ok", a.base_offset)
    sends[3] = Send(b.producer, a.sequence, b.partition, b.message_ids, "ok", b.base_offset)
    verdict = check(sends, [], _nodes(log), KEYS)
    assert ("acked", "nonmonotonic-send") in _anomalies(verdict)


def test_checker_catches_a_failed_send_that_became_visible() -> None:
    sends, log = _clean()
    last = sends[-1]
    sends[-1] = Send(last.producer, last.sequence, last.partition, last.message_ids, "failed")
    verdict = check(sends, [], _nodes(log), KEYS)
    assert ("aborted", "G1a") in _anomalies(verdict)


def test_checker_accepts_an_unknown_send_present_once_or_absent() -> None:
    sends, log = _clean()
    last = sends[-1]
    sends[-1] = Send(last.producer, last.sequence, last.partition, last.message_ids, "unknown")
    assert check(sends, [], _nodes(log), KEYS).ok
    log[P1] = log[P1][: -len(last.message_ids)]
    verdict = check(sends, [], _nodes(log), KEYS)
    assert verdict.ok, verdict.violations
    assert verdict.messages_unknown_present == 0


def test_checker_catches_a_message_nobody_sent_and_one_in_the_wrong_partition() -> None:
    sends, log = _clean()
    log[P0].append(_entry(len(log[P0]), message_id(9, 0)))
    log[P1].append(_entry(len(log[P1]), sends[0].message_ids[0]))
    anomalies = _anomalies(check(sends, [], _nodes(log), KEYS))
    assert ("phantom", "phantom") in anomalies
    assert ("phantom", "wrong-partition") in anomalies


def test_checker_catches_a_corrupted_payload() -> None:
    sends, log = _clean()
    entry = log[P0][2]
    log[P0][2] = Polled(entry.offset, entry.message_id, digest(b"something else"))
    assert ("payload", "corrupt-payload") in _anomalies(check(sends, [], _nodes(log), KEYS))


def test_checker_catches_replicas_that_disagree_at_an_offset() -> None:
    sends, log = _clean()
    logs = _nodes(log)
    a, b = logs[1][P0][0], logs[1][P0][1]
    logs[1][P0][0] = Polled(0, b.message_id, b.payload_digest)
    logs[1][P0][1] = Polled(1, a.message_id, a.payload_digest)
    assert ("converged", "inconsistent-offsets") in _anomalies(check(sends, [], logs, KEYS))


def test_checker_catches_a_hole_in_a_log() -> None:
    sends, log = _clean()
    logs = _nodes(log)
    for node in logs:
        entry = logs[node][P0].pop(2)
        logs[node][P0] = [Polled(e.offset, e.message_id, e.payload_digest) for e in logs[node][P0]]
    del entry
    assert ("dense", "poll-skip") in _anomalies(check(sends, [], logs, KEYS))


def test_checker_fails_or_counts_a_replica_that_serves_only_a_suffix() -> None:
    sends, log = _clean()
    logs = _nodes(log)
    logs[0][P0] = logs[0][P0][2:]  # node 0 holds P0 from offset 2 on (state transfer)
    strict = check(sends, [], logs, KEYS)
    assert ("converged", "retained-start") in _anomalies(strict)
    allowed = check(sends, [], logs, KEYS, allow_retained_gaps=True)
    assert allowed.ok, allowed.violations
    assert allowed.retained_gaps == [
        "replicated/0: node 0 serves offsets from 2 only; another node from 0"
    ]


def test_checker_catches_positional_polls_that_skip_or_read_what_was_never_committed() -> None:
    sends, log = _clean()
    skipped = Poll(100, P0, tuple(log[P0][2:4]), asked=1)
    inside = Poll(101, P0, (log[P0][0], log[P0][2]), asked=0)
    phantom_read = Poll(102, P1, (_entry(len(log[P1]), message_id(9, 9)),), asked=len(log[P1]))
    replaced = Poll(103, P1, (_entry(0, message_id(9, 8)),), asked=0)
    verdict = check(sends, [skipped, inside, phantom_read, replaced], _nodes(log), KEYS)
    details = {(v.anomaly, v.detail.split()[1]) for v in verdict.violations}
    assert ("poll-skip", "100") in details
    assert ("int-poll-skip", "101") in details
    assert ("inconsistent-offsets", "102") in details
    assert ("inconsistent-offsets", "103") in details


def test_checker_catches_a_stored_offset_consumer_that_goes_back() -> None:
    sends, log = _clean()
    fine = Poll(200, P0, tuple(log[P0][3:]), expected=3, floor=3)
    unknown_store = Poll(200, P0, tuple(log[P0][1:]), expected=None, floor=1)
    back = Poll(200, P0, tuple(log[P0][1:]), expected=4, floor=4)
    ahead = Poll(200, P0, tuple(log[P0][4:]), expected=2, floor=2)
    assert check(sends, [fine, unknown_store], _nodes(log), KEYS).ok
    anomalies = _anomalies(check(sends, [back, ahead], _nodes(log), KEYS))
    assert anomalies == {("stored-offset", "nonmonotonic-poll"), ("stored-offset", "poll-skip")}


def test_checker_keeps_a_bounded_number_of_violations() -> None:
    sends, log = _clean()
    logs = _nodes(log)
    for node in logs:
        logs[node] = {P0: [], P1: []}
    verdict = check(sends, [], logs, KEYS, violations_max=3)
    assert len(verdict.violations) == 3
    assert verdict.violations_omitted > 0
    assert not verdict.ok


def test_payloads_are_a_function_of_the_id_and_ids_are_unique_per_producer() -> None:
    assert payload_for(message_id(1, 5)) == payload_for(message_id(1, 5))
    sizes = {len(payload_for(message_id(0, i))) for i in range(200)}
    assert min(sizes) >= 16 and max(sizes) <= 256 and len(sizes) > 50
    assert message_id(0, 1) != message_id(1, 1) and message_id(0, 0) != 0


def test_checker_module_is_pure_enough_for_the_simulator() -> None:
    # The simulator's import contract forbids clocks, the OS, sockets and threads; the
    # checker keeps to the standard library's pure parts so sim/ can share it as is.
    source = Path(history.__file__).read_text(encoding="utf-8")
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= {"__future__", "hashlib", "collections", "dataclasses", "typing"}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_checker_reports_messages_below_every_replicas_start_as_data_loss() -> None:
    sends, log = _clean()
    logs = _nodes(log)
    for node in logs:
        logs[node][P0] = logs[node][P0][2:]  # every node lost offsets 0 and 1 of P0
    strict = check(sends, [], logs, KEYS)
    assert strict.lost == 2 and ("acked", "lost-write") in _anomalies(strict)
    allowed = check(sends, [], logs, KEYS, allow_retained_gaps=True)
    assert allowed.ok, allowed.violations
    assert (allowed.lost, allowed.lost_below_retained_start) == (0, 2)


def test_checker_accepts_a_stored_offset_from_a_store_whose_outcome_was_unknown() -> None:
    sends, log = _clean()
    late = Poll(200, P0, tuple(log[P0][2:]), expected=4, floor=4, unknown_stores=(2,))
    assert check(sends, [late], _nodes(log), KEYS).ok
    other = Poll(200, P0, tuple(log[P0][1:]), expected=4, floor=4, unknown_stores=(2,))
    verdict = check(sends, [other], _nodes(log), KEYS)
    assert ("stored-offset", "nonmonotonic-poll") in _anomalies(verdict)
