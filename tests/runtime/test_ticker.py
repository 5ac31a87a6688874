"""The ticker keeps a fixed schedule on trio's clock (a MockClock here): no drift."""

from __future__ import annotations

import trio
import trio.testing

from broker.runtime.node import TICKS_CATCH_UP_MAX, run_ticker


def _run(deliver_cost_s: float, stall_at: int | None, stall_s: float) -> tuple[int, float]:
    clock = trio.testing.MockClock(autojump_threshold=0)
    delivered = 0

    async def main() -> float:
        nonlocal delivered

        def deliver(ticks: int) -> None:
            nonlocal delivered
            delivered += ticks
            # Work done at each tick takes time; a stall takes a lot of it once.
            clock.jump(deliver_cost_s)
            if stall_at is not None and delivered == stall_at:
                clock.jump(stall_s)

        start = trio.current_time()
        with trio.move_on_after(10.0):
            await run_ticker(0.01, deliver)
        return trio.current_time() - start

    elapsed = trio.run(main, clock=clock)
    return delivered, elapsed


def test_ticker_delivers_one_tick_per_period_even_when_each_tick_costs_time() -> None:
    delivered, elapsed = _run(deliver_cost_s=0.004, stall_at=None, stall_s=0)
    # 10 s at 10 ms: 1000 ticks, not 10 / 0.014 as a sleep-after-work loop would give.
    assert 10.0 <= elapsed < 10.01
    assert 999 <= delivered <= 1000


def test_ticker_catches_up_a_short_stall_and_caps_a_long_one() -> None:
    short, _ = _run(deliver_cost_s=0, stall_at=100, stall_s=0.05)
    assert 999 <= short <= 1000  # five missed ticks delivered at once
    long, _ = _run(deliver_cost_s=0, stall_at=100, stall_s=2.0)
    # Two hundred missed ticks, of which only TICKS_CATCH_UP_MAX are made up.
    assert 1000 - 200 + TICKS_CATCH_UP_MAX - 1 <= long <= 1000 - 200 + TICKS_CATCH_UP_MAX + 1
