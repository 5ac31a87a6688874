"""The command line: iggy-bench's shape, aliases and options."""

from __future__ import annotations

import pytest

from bench.cli import build_parser, main, params_from_args
from bench.load.params import BenchParams, Durability, Embedded, Kind, ParamsError, Range, SdkChoice


def _params(*argv: str) -> BenchParams:
    return params_from_args(build_parser().parse_args(list(argv)))


@pytest.mark.parametrize("kind", list(Kind))
def test_every_kind_parses_by_name_and_by_alias(kind: Kind) -> None:
    assert _params(kind.value).kind is kind
    assert _params(kind.alias).kind is kind


def test_global_kind_transport_and_output_options_land_in_the_params() -> None:
    params = _params(
        "-m", "200..500", "-P", "250", "-b", "30", "-r", "50MB", "-w", "2s", "-t", "5ms",
        "-W", "10", "-u", "admin", "-p", "secret", "--durability", "persisted",
        "--sdk", "official",
        "bp", "-p", "4", "-s", "2", "-a", "8",
        "tcp", "--server-address", "10.0.0.1:8090,10.0.0.2:8090",
        "output", "--output-dir", "results", "--identifier", "ci", "--remark", "x",
    )  # fmt: skip
    assert params.kind is Kind.BALANCED_PRODUCER
    assert params.message_size == Range(200, 500)
    assert params.messages_per_batch == Range(250, 250)
    assert params.message_batches == 30
    assert params.rate_limit_bytes_per_s == 50_000_000
    assert (params.warmup_s, params.sampling_s, params.moving_average_window) == (2.0, 0.005, 10)
    assert (params.username, params.password) == ("admin", "secret")
    assert params.durability is Durability.PERSISTED
    assert params.sdk is SdkChoice.OFFICIAL
    assert (params.producers, params.streams, params.partitions) == (4, 2, 8)
    assert params.server_addresses == ("10.0.0.1:8090", "10.0.0.2:8090")
    assert (params.output_dir, params.identifier, params.remark) == ("results", "ci", "x")


def test_defaults_are_iggy_benchs() -> None:
    params = _params("pp")
    assert params.message_size == Range(1000, 1000)
    assert params.messages_per_batch == Range(1000, 1000)
    assert params.batches_per_actor() == 1000
    assert params.producers == 8
    assert params.server_addresses == ("127.0.0.1:8090",)
    assert params.output_dir is None
    assert params.embedded is Embedded.NONE


def test_output_without_a_directory_uses_iggy_benchs_default() -> None:
    assert _params("pp", "tcp", "output").output_dir == "performance_results"


def test_total_data_and_batches_together_are_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["-b", "10", "-T", "1GB", "pp"])
    assert exit_info.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def test_embedded_and_a_server_address_conflict() -> None:
    with pytest.raises(ParamsError, match="--embedded"):
        _params("--embedded", "single", "pp", "tcp", "--server-address", "127.0.0.1:1")


def test_a_bad_server_address_is_refused() -> None:
    with pytest.raises(ParamsError, match="HOST:PORT"):
        _params("pp", "tcp", "--server-address", "localhost")


def test_kind_options_are_only_offered_where_they_mean_something() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["pp", "-c", "3"])  # pinned producers have no consumers


def test_main_refuses_an_impossible_combination_with_status_2() -> None:
    assert main(["-q", "pp", "-p", "4", "-s", "2"]) == 2


def test_examples_prints_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["examples"]) == 0
    assert "viewstream-bench --embedded single" in capsys.readouterr().out
