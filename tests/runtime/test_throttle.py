"""The failed-login throttle's rules (``broker.runtime.throttle``), with a made-up clock."""

from __future__ import annotations

import pytest

from broker.runtime import throttle
from broker.runtime.throttle import (
    BASE_DELAY_S,
    FORGET_AFTER_S,
    FREE_FAILURES,
    MAX_DELAY_S,
    LoginThrottle,
)


def test_a_host_waits_only_after_its_free_failures_and_twice_as_long_each_time() -> None:
    rules = LoginThrottle()
    delays = []
    for second in range(FREE_FAILURES + 3):
        delays.append(rules.delay_s("10.0.0.1", float(second)))
        rules.failed("10.0.0.1", float(second))
    assert delays[:FREE_FAILURES] == [0.0] * FREE_FAILURES
    assert delays[FREE_FAILURES:] == [BASE_DELAY_S, BASE_DELAY_S * 2, BASE_DELAY_S * 4]
    assert rules.delay_s("10.0.0.2", 10.0) == 0.0  # other hosts are not slowed


def test_the_wait_is_capped_cleared_by_a_success_and_forgotten_in_time() -> None:
    rules = LoginThrottle()
    for _ in range(40):
        rules.failed("h", 0.0)
    assert rules.delay_s("h", 1.0) == MAX_DELAY_S
    assert rules.delay_s("h", FORGET_AFTER_S) == 0.0  # forgotten a while after the last
    for _ in range(40):
        rules.failed("h", 100.0)
    rules.succeeded("h")
    assert rules.delay_s("h", 101.0) == 0.0


def test_memory_is_bounded_by_forgetting_the_least_recently_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(throttle, "HOSTS_MAX", 3)
    rules = LoginThrottle()
    for index in range(5):
        for _ in range(FREE_FAILURES + 1):
            rules.failed(f"h{index}", float(index))
    assert len(rules) == 3
    assert rules.delay_s("h0", 5.0) == 0.0 and rules.delay_s("h4", 5.0) > 0.0
