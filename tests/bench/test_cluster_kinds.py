"""Every kind against a real 3-node cluster, and the CLI's own ``--embedded cluster``.

One cluster (three ``viewstream serve`` processes on 127.0.0.1, started by the bench's
embedded-server code) is shared by the module; the bench is given every node's address,
as a user would give ``--server-address`` for a cluster. A tiny load per kind keeps the
module to about half a minute.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from bench.cli import build_parser, main, params_from_args
from bench.load.params import Embedded
from bench.load.report import build_report
from bench.load.runner import run_benchmark
from bench.load.servers import EmbeddedServer, embedded_server
from tests.bench.test_end_to_end import EVERY_KIND, EVERY_KIND_IDS, PASSWORD, check_kind_report


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedServer]:
    with embedded_server(Embedded.CLUSTER, username="iggy", password=PASSWORD) as server:
        yield server


@pytest.mark.parametrize(("argv", "groups"), EVERY_KIND, ids=EVERY_KIND_IDS)
def test_every_kind_runs_against_a_cluster(
    cluster: EmbeddedServer, argv: tuple[str, ...], groups: dict[str, int]
) -> None:
    args = build_parser().parse_args(["-q", "-p", PASSWORD, "-m", "100", "-P", "10", *argv])
    params = replace(params_from_args(args), server_addresses=tuple(cluster.addresses))
    check_kind_report(build_report(run_benchmark(params)), argv, groups)


def test_the_cli_starts_and_stops_its_own_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["-q", "--embedded", "cluster", "-m", "100", "-P", "10", "-b", "3",
                   "e2ecg", "-p", "2"])  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0, out
    assert "producing_consumers" in out
