"""The tick schedule hands back exactly the due groups, in a fixed order, heap bounded."""

from __future__ import annotations

import random

from broker.core.ticks import HEAP_SLACK, HEAP_SLACK_MIN, TickSchedule


def test_advance_returns_only_the_keys_due_by_then_by_deadline_then_key() -> None:
    schedule = TickSchedule()
    schedule.wake_at(7, 3)
    schedule.wake_at(2, 3)
    schedule.wake_at(5, 1)
    schedule.wake_at(9, 50)
    assert schedule.advance(1) == [5]
    assert schedule.advance(1) == []
    assert schedule.advance(5) == [2, 7]
    assert len(schedule) == 1 and schedule.deadline(9) == 50
    assert schedule.advance(42) == []
    assert schedule.advance(1) == [9]
    assert schedule.now == 50 and len(schedule) == 0


def test_a_new_deadline_replaces_the_old_and_a_cancelled_key_is_never_due() -> None:
    schedule = TickSchedule()
    schedule.wake_at(1, 10)
    schedule.wake_at(1, 4)  # earlier
    schedule.wake_at(2, 4)
    schedule.wake_at(2, 20)  # later
    schedule.wake_at(3, 4)
    schedule.cancel(3)
    assert schedule.advance(4) == [1]
    assert schedule.advance(6) == []  # 1's old deadline of 10 is stale
    assert schedule.advance(10) == [2]


def test_a_deadline_already_passed_is_due_at_the_next_advance() -> None:
    schedule = TickSchedule()
    schedule.advance(10)
    schedule.wake_at(4, 10)
    schedule.wake_at(5, 3)
    assert schedule.advance(0) == [5, 4]


def test_the_schedule_agrees_with_a_scan_of_every_key_and_its_heap_stays_bounded() -> None:
    prng = random.Random(1)
    schedule = TickSchedule()
    deadlines: dict[int, int] = {}
    for _ in range(20_000):
        key = prng.randrange(50)
        if prng.random() < 0.1:
            schedule.cancel(key)
            deadlines.pop(key, None)
        else:
            tick = schedule.now + prng.randrange(1, 30)
            schedule.wake_at(key, tick)
            deadlines[key] = tick
        if prng.random() < 0.3:
            now = schedule.now + prng.randrange(3)
            expected = sorted((t, k) for k, t in deadlines.items() if t <= now)
            assert schedule.advance(now - schedule.now) == [k for _, k in expected]
            for _, k in expected:
                del deadlines[k]
        assert len(schedule._heap) <= HEAP_SLACK * len(schedule) + HEAP_SLACK_MIN
