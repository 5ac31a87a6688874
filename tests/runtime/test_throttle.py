"""The failed-login throttle: its delay rule (``broker.core.logins``) with a made-up clock,
and the runtime's turns around it (``broker.runtime.throttle``)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from broker.core import logins
from broker.core.logins import (
    BASE_DELAY_S,
    FORGET_AFTER_S,
    FREE_FAILURES,
    MAX_DELAY_S,
    LoginThrottle,
)
from broker.runtime.throttle import HOST_LOGINS_WAITING_MAX, HostTurns, TurnsBusy


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
    monkeypatch.setattr(logins, "HOSTS_MAX", 3)
    rules = LoginThrottle()
    for index in range(5):
        for _ in range(FREE_FAILURES + 1):
            rules.failed(f"h{index}", float(index))
    assert len(rules) == 3
    assert rules.delay_s("h0", 5.0) == 0.0 and rules.delay_s("h4", 5.0) > 0.0


CHECK_S = 0.05  # one password check, in the mock clock's seconds
FLOOD = 150


async def _login_wait_behind_a_flood(per_host_turns: bool) -> float:
    """How long a login from host "y" takes, arriving while host "x" floods with ``FLOOD``
    parallel logins, each a check under the node-wide bound of one."""
    turns = HostTurns()
    checks = trio.CapacityLimiter(1)
    busy = 0

    async def login(host: str) -> None:
        nonlocal busy
        if per_host_turns:
            try:
                async with turns.turn(host, waiting_max=HOST_LOGINS_WAITING_MAX), checks:
                    await trio.sleep(CHECK_S)
            except TurnsBusy:
                busy += 1  # refused at once (58): the host has logins waiting already
        else:
            async with checks:
                await trio.sleep(CHECK_S)

    took = 0.0

    async def other_host() -> None:
        nonlocal took
        await trio.sleep(CHECK_S / 2)  # the flood is under way
        started = trio.current_time()
        await login("y")
        took = trio.current_time() - started

    async with trio.open_nursery() as nursery:
        for _ in range(FLOOD):
            nursery.start_soon(login, "x")
        nursery.start_soon(other_host)
    assert len(turns) == 0  # every host's turn forgotten once nobody waits
    if per_host_turns:
        # One login in its turn, HOST_LOGINS_WAITING_MAX waiting, the rest refused.
        assert busy == FLOOD - 1 - HOST_LOGINS_WAITING_MAX
    return took


def test_a_flood_from_one_host_delays_another_hosts_login_by_one_check_at_most() -> None:
    clock = trio.testing.MockClock(autojump_threshold=0)
    took = trio.run(_login_wait_behind_a_flood, True, clock=clock)
    assert took <= 2 * CHECK_S  # the flood's check in progress, then its own
    # Without a turn per host the other host queues behind the whole flood.
    clock = trio.testing.MockClock(autojump_threshold=0)
    unfair = trio.run(_login_wait_behind_a_flood, False, clock=clock)
    assert unfair >= (FLOOD - 1) * CHECK_S


def test_a_host_without_failures_queues_all_its_logins() -> None:
    """Many clients of one machine logging in at once all get their turn."""

    async def main() -> int:
        turns = HostTurns()
        served = 0

        async def login() -> None:
            nonlocal served
            async with turns.turn("x", waiting_max=None):
                await trio.sleep(CHECK_S)
                served += 1

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(login)
        return served

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == 20
