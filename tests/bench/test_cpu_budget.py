"""The CPU budget script: its raw frame is the real request, its ratios, and a tiny real
run of the raw path and one node."""

from __future__ import annotations

from bench.cpu_budget import (
    MESSAGE_SIZE,
    MESSAGES_PER_BATCH,
    BudgetRow,
    batch_frame,
    measure_budget,
    ratios,
    render_rows,
)
from sdk.wire import HEADER_SIZE, SendMessages, verify_send_messages


def test_the_raw_frame_is_a_send_messages_request_of_the_bench_batch() -> None:
    frame = batch_frame()
    assert frame[:HEADER_SIZE] == bytes(HEADER_SIZE)  # the request header's space
    request = SendMessages.decode(memoryview(frame)[HEADER_SIZE:])
    verified = verify_send_messages(request)
    assert verified.header.message_count == MESSAGES_PER_BATCH
    assert len(frame) > HEADER_SIZE + MESSAGE_SIZE * MESSAGES_PER_BATCH


def _row(path: str, node: str, server: float | None, client: float, run: int = 1) -> BudgetRow:
    return BudgetRow(path, 4, node, run, 100, server, client, 100.0)


def test_ratios_are_to_the_raw_row_of_the_same_run_and_producer_count() -> None:
    rows = [
        _row("raw", "server", 100.0, 40.0),
        _row("raw", "server", 200.0, 80.0, run=2),
        _row("one node", "server", 250.0, 400.0),
        _row("3 nodes", "backup 1", None, 400.0, run=2),
    ]
    assert ratios(rows, rows[2]) == (2.5, 10.0)
    assert ratios(rows, rows[3]) == (None, 5.0)
    table = render_rows(rows)
    assert len(table) == 2 + len(rows)
    assert (
        "| one node | 4 | server | 1 | 100 | 250 | 2.50 | 400 | 10.00 | 100.0 | n/a |" in table[4]
    )


def test_a_tiny_run_measures_the_raw_path_and_one_node() -> None:
    rows = measure_budget((2,), batches=4, cluster=False, echo=lambda _: None)
    assert [(r.path, r.node, r.batches) for r in rows] == [
        ("raw", "server", 4),
        ("one node", "server", 4),
    ]
    for row in rows:
        assert row.server_us is not None and row.server_us > 0
        assert row.client_us is not None and row.client_us > 0
    assert rows[1].idle_cpu_percent is not None and rows[1].idle_cpu_percent >= 0
