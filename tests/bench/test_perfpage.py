"""The performance page's CPU budget table and targets, rendered from measurements made
up for the test (no benchmark runs)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.cpu_budget import BudgetRow
from bench.load.perfpage import (
    _P99_TEXT,
    Measured,
    _find_p99,
    cpu_targets,
    measure_backup_read,
    render,
)


def _budget(client_1: float, backup: float) -> list[dict[str, Any]]:
    rows = [
        BudgetRow("raw", 4, "server", 1, 800, 200.0, 40.0, 600.0),
        BudgetRow("one node", 4, "server", 1, 800, 600.0, 500.0, 100.0),
        BudgetRow("3 nodes", 4, "primary", 1, 800, 1000.0, 500.0, 50.0),
        BudgetRow("3 nodes", 4, "backup 1", 1, 800, backup, 500.0, 50.0),
        BudgetRow("3 nodes", 4, "backup 2", 1, 800, 300.0, 500.0, 50.0, True),
        BudgetRow("one node", 1, "server", 1, 800, 500.0, client_1, 100.0),
    ]
    return [r.to_json() for r in rows]


def _targets(m: Measured) -> dict[str, tuple[str, str, str]]:
    return {
        name.split(" (")[0]: (value, required, met) for name, value, required, met in cpu_targets(m)
    }


def test_cpu_targets_compare_the_budget_rows_with_the_goals() -> None:
    m = Measured(budget=_budget(client_1=280.0, backup=600.0))
    targets = _targets(m)
    server = targets["server CPU per batch ≤ 2.5x the raw path's"]
    assert server == ("3.00x (600 / 200 µs)", "≤ 2.5x", "**no**")
    backup = targets["a backup's CPU per batch ≤ ½ its primary's"]
    assert backup == ("0.60x (600 / 1,000 µs)", "≤ 0.5x", "**no**")  # the busier backup
    client = targets["our SDK's client CPU per batch ≤ ½ of 570 µs"]
    assert client == ("280.00 µs", "≤ 285 µs", "yes")


def test_targets_without_figures_say_not_measured() -> None:
    m = Measured(backup_read={"why": "bench/backup_read_bench.py is not in this tree"})
    for name, measured, _, met in cpu_targets(m):
        assert measured.startswith("not measured"), name
        assert met == "n/a"
    assert any("backup_read_bench.py is not in this tree" in row[1] for row in cpu_targets(m))


BACKUP_READ: str = "a poll on a backup right after an acknowledged send returns it: p99 < 10 ms"
IDLE_CPU: str = "an idle consumer of our SDK and its node, together, over 60 s of an idle topic"
IDLE_DELIVERY: str = "a message sent to that waiting consumer is delivered: p99"


def test_a_measured_backup_read_p99_is_a_target_row() -> None:
    rows = _targets(Measured(backup_read={"p99_ms": 4.2}))
    assert rows[BACKUP_READ] == ("4.20 ms", "< 10 ms", "yes")
    rows = _targets(Measured(backup_read={"p99_ms": 12.0}))
    assert rows[BACKUP_READ][2] == "**no**"


def test_the_idle_consumer_figures_are_two_target_rows() -> None:
    figures = {"node_percent": 0.3, "consumer_percent": 0.2, "together_percent": 0.5}
    rows = _targets(Measured(idle_consumer={**figures, "p50_ms": 2.0, "p99_ms": 3.5}))
    cpu = "0.50% of a core (node 0.30%, consumer 0.20%)"
    assert rows[IDLE_CPU] == (cpu, "< 1% of a core", "yes")
    assert rows[IDLE_DELIVERY] == ("3.50 ms (p50 2.00 ms)", "≤ 5 ms", "yes")
    figures["together_percent"] = 1.5
    rows = _targets(Measured(idle_consumer={**figures, "p50_ms": 2.0, "p99_ms": 5.5}))
    assert rows[IDLE_CPU][2] == rows[IDLE_DELIVERY][2] == "**no**"
    rows = _targets(Measured(idle_consumer={"why": "bench.idle_consumer failed (exit 1)"}))
    assert rows[IDLE_CPU][0] == "not measured: bench.idle_consumer failed (exit 1)"
    assert rows[IDLE_DELIVERY][2] == "n/a"


def test_the_page_shows_the_budget_table_and_the_saturated_client() -> None:
    page = render(Measured(budget=_budget(client_1=300.0, backup=400.0)), runs=1, quick=True)
    assert "## CPU per batch" in page
    assert "| one node | 4 | server | 1 | 800 | 600 | 3.00 | 500 | 12.50 | 100.0 | n/a |" in page
    assert (
        "| 3 nodes | 4 | backup 2 | 1 | 800 | 300 | 1.50 | 500 | 12.50 | 50.0 (client saturated) "
        "| n/a |" in page
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [({"p99_ms": 3}, 3.0), ({"poll": {"p50_ms": 1, "p99_ms": 2.5}}, 2.5), ([{"x": 1}], None)],
)
def test_find_p99_reads_the_first_p99_ms(data: Any, expected: float | None) -> None:
    assert _find_p99(data) == expected


def test_backup_read_is_not_measured_without_its_script(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.load.perfpage.BACKUP_READ_MODULE", "bench.no_such_bench")
    assert "not in this tree" in measure_backup_read()["why"]


def test_the_backup_read_p99_is_read_from_a_printed_summary() -> None:
    line = "  p50 1.00 ms  p90 2.00 ms  p99 1,203.50 ms  max 1,500.00 ms"
    match = _P99_TEXT.search("load before: 1.0 0.5\n" + line)
    assert match is not None
    assert match.group(1) == "1,203.50"
