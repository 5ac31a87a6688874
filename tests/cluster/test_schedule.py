"""The fault schedule a seed draws (pure: no cluster needed)."""

from __future__ import annotations

import pytest

from bench.chaos.faults import FAULT_KINDS, FaultSchedule


def test_schedule_is_a_function_of_the_seed_and_covers_every_kind_each_round() -> None:
    first = FaultSchedule(11).preview(30)
    assert first == FaultSchedule(11).preview(30)
    assert first != FaultSchedule(12).preview(30)
    kinds = [plan.kind for plan in first]
    width = len(FAULT_KINDS)
    assert sorted(kinds[:width]) == sorted(FAULT_KINDS)
    assert sorted(kinds[width : 2 * width]) == sorted(FAULT_KINDS)
    assert all(2.0 <= plan.hold_s <= 6.0 for plan in first)
    schedule = FaultSchedule(11, ("isolate", "lossy"), hold_s=(1.0, 1.0))
    assert {schedule.next().kind for _ in range(4)} == {"isolate", "lossy"}


def test_schedule_refuses_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown fault kinds"):
        FaultSchedule(1, ("kill-primary", "disk-full"))
