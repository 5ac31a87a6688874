"""The ticker keeps ticks on trio's clock (a MockClock here): no drift, a capped catch-up
after a stall, and no wake of the loop on a tick no group is due on."""

from __future__ import annotations

from collections.abc import Callable

import trio
import trio.testing

from broker.runtime.group import TICKS_CATCH_UP_MAX, GroupTicker
from broker.runtime.node import run_ticker

GROUP = 1


def _run_busy(deliver_cost_s: float, stall_at: int | None, stall_s: float) -> tuple[int, float]:
    """A group due on every tick for 10 s of the clock: the ticks it was woken for."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    ticker = GroupTicker()
    woken = 0

    def wake() -> None:
        nonlocal woken
        woken += 1
        ticker.wake_at(GROUP, ticker.now + 1, wake)
        # Work done at each tick takes time; the loop stalls once, with the group due.
        clock.jump(deliver_cost_s)
        if stall_at is not None and woken == stall_at:
            clock.jump(stall_s)

    async def main() -> tuple[int, float]:
        start = trio.current_time()
        with trio.move_on_after(10.0):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_ticker, 0.01, ticker)
                await trio.lowlevel.checkpoint()
                ticker.wake_at(GROUP, 1, wake)
        return ticker.now, trio.current_time() - start

    return trio.run(main, clock=clock)


def test_ticker_keeps_one_tick_per_period_even_when_each_tick_costs_time() -> None:
    ticks, elapsed = _run_busy(deliver_cost_s=0.004, stall_at=None, stall_s=0)
    # 10 s at 10 ms: 1000 ticks, not 10 / 0.014 as a sleep-after-work loop would give.
    assert 10.0 <= elapsed < 10.01
    assert 999 <= ticks <= 1001


def test_ticker_catches_up_a_short_stall_and_caps_a_long_one() -> None:
    short, _ = _run_busy(deliver_cost_s=0, stall_at=100, stall_s=0.05)
    assert 999 <= short <= 1001  # five missed ticks delivered at once
    long, _ = _run_busy(deliver_cost_s=0, stall_at=100, stall_s=2.0)
    # Two hundred ticks passed in the stall, of which only TICKS_CATCH_UP_MAX count.
    assert 1000 - 200 + TICKS_CATCH_UP_MAX - 2 <= long <= 1000 - 200 + TICKS_CATCH_UP_MAX + 2


def test_idle_ticker_does_not_wake_yet_counts_the_ticks_and_wakes_a_group_on_its_tick() -> None:
    clock = trio.testing.MockClock(autojump_threshold=0)
    ticker = GroupTicker()
    passes = 0
    woken_at: list[int] = []

    def sleep_target(changed: Callable[[], None]) -> float | None:
        nonlocal passes
        passes += 1  # the ticker task goes to sleep (again)
        return GroupTicker.sleep_target(ticker, changed)

    ticker.sleep_target = sleep_target  # type: ignore[method-assign]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_ticker, 0.01, ticker)
            await trio.sleep(60.0)  # an idle minute: 6,000 ticks
            assert passes == 1  # the ticker task never woke: nobody was due
            assert ticker.now == 6000  # yet reading the clock counts them
            ticker.wake_at(GROUP, ticker.now + 50, lambda: woken_at.append(ticker.now))
            await trio.sleep(1.0)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=clock)
    assert woken_at == [6050]  # woken on its tick, not before nor a tick late
    assert passes <= 4  # asked for a tick, woke for it, slept again
