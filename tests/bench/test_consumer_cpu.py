"""The consumer CPU script: a tiny real run of one node measures polls and pings."""

from __future__ import annotations

from bench.consumer_cpu import ConsumerCpu, measure, render


def test_a_tiny_run_polls_every_message_back_and_measures_both_ends() -> None:
    rows = measure(batches=3, messages=10, size=100, rounds=2)
    assert [(row.kind, row.requests, row.rounds) for row in rows] == [
        ("poll", 3, 2),
        ("ping", 3, 2),
    ]
    for row in rows:
        assert row.client_us > 0
        assert row.client_system_us >= 0
        assert row.node_us is not None and row.node_us > 0
        assert row.node_system_us is not None and row.node_system_us >= 0


def test_the_table_shows_an_unreadable_node_figure_as_not_available() -> None:
    rows = [ConsumerCpu("poll", 200, 10, 401.6, 15.2, 578.9, 100.0)]
    rows.append(ConsumerCpu("ping", 200, 10, 135.0, 7.0, None, None))
    table = render(rows)
    assert table[2] == "| poll | 200 | 10 | 402 | 15 | 579 | 100 |"
    assert table[3] == "| ping | 200 | 10 | 135 | 7 | n/a | n/a |"
