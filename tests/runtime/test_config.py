"""Configuration precedence (defaults < TOML < environment < flags) and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.runtime.config import ConfigError, load_config
from broker.state.metadata import EXPIRY_NEVER, SIZE_UNLIMITED


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("VIEWSTREAM_"):
            monkeypatch.delenv(key)


def test_config_defaults_are_one_local_node() -> None:
    config = load_config()
    assert config.address == "127.0.0.1:8090"
    assert config.data_dir == Path("local_data")
    assert config.replica_count == 1
    assert config.root_username == "iggy"
    assert config.root_password is None
    assert config.sync_scope == "filesystem"


def test_config_sync_scope_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIEWSTREAM_SYNC_SCOPE", "file")
    assert load_config().sync_scope == "file"


def test_config_precedence_toml_then_env_then_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text(
        'address = "127.0.0.1:9001"\ntick_ms = 20\nroot_username = "admin"\n'
        "[limits]\nconnections_max = 5\n",
        encoding="utf-8",
    )
    config = load_config(config_file=toml)
    assert (config.address, config.tick_ms, config.limits.connections_max) == (
        "127.0.0.1:9001",
        20,
        5,
    )

    monkeypatch.setenv("VIEWSTREAM_TICK_MS", "30")
    monkeypatch.setenv("VIEWSTREAM_LIMITS__CONNECTIONS_MAX", "6")
    config = load_config(config_file=toml)
    assert (config.address, config.tick_ms, config.limits.connections_max) == (
        "127.0.0.1:9001",
        30,
        6,
    )
    assert config.root_username == "admin"

    config = load_config(config_file=toml, address="127.0.0.1:9002", tick_ms=None)
    assert (config.address, config.tick_ms) == ("127.0.0.1:9002", 30)


def test_config_file_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text('address = "127.0.0.1:9003"\n', encoding="utf-8")
    monkeypatch.setenv("VIEWSTREAM_CONFIG_FILE", str(toml))
    assert load_config().address == "127.0.0.1:9003"


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ({"address": "localhost"}, "address"),
        ({"address": "127.0.0.1:70000"}, "address"),
        ({"tick_ms": 0}, "tick_ms"),
        ({"replicas": ["127.0.0.1:1", "127.0.0.1:2"]}, "replicas"),
        ({"replica": 3, "replicas": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]}, "replica"),
        ({"replicas": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]}, "cluster_secret"),
        ({"unknown_setting": 1}, "unknown_setting"),
        ({"sync_scope": "disk"}, "sync_scope"),
        ({"cluster_name": ""}, "cluster_name"),
        ({"cluster_name": "\u20ac" * 86}, "cluster_name"),  # 258 bytes
        ({"node_names": ["a", "b"]}, "node_names"),  # one node
        ({"node_names": [""]}, "node_names"),
        (
            {
                "replicas": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"],
                "cluster_secret": "s" * 16,
                "node_names": ["a", "a", "b"],
            },
            "node_names",
        ),
        ({"node_name": ""}, "node_name"),
        ({"node_name": "\u20ac" * 86}, "node_name"),  # 258 bytes
        ({"node_names": ["a"], "node_name": "b"}, "node_name"),  # not its entry
        (
            {
                "replicas": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"],
                "cluster_secret": "s" * 16,
                "node_name": "node-2",  # replica 0 named as the default name of replica 2
            },
            "node_name",
        ),
    ],
)
def test_config_invalid_setting_is_named(flags: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_config(**flags)


def test_config_invalid_env_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIEWSTREAM_LIMITS__CONNECTIONS_MAX", "0")
    with pytest.raises(ConfigError, match=r"limits\.connections_max"):
        load_config()


def test_config_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config_file"):
        load_config(config_file=tmp_path / "absent.toml")


def test_config_malformed_toml_is_reported(tmp_path: Path) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text("address = \n", encoding="utf-8")
    with pytest.raises(ConfigError, match="config_file"):
        load_config(config_file=toml)


def test_config_names_from_the_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text('cluster_name = "from-file"\nnode_name = "file-node"\n', encoding="utf-8")
    config = load_config(config_file=toml)
    assert (config.cluster_name, config.cluster_node_names) == ("from-file", ["file-node"])
    monkeypatch.setenv("VIEWSTREAM_NODE_NAME", "env-node")
    config = load_config(config_file=toml)
    assert (config.cluster_name, config.cluster_node_names) == ("from-file", ["env-node"])


def test_config_node_name_names_this_node_and_the_others_keep_theirs() -> None:
    roster = {
        "replicas": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"],
        "cluster_secret": "s" * 16,
        "replica": 1,
    }
    assert load_config(**roster).cluster_node_names == ["node-0", "node-1", "node-2"]
    named = load_config(**roster, node_name="east-b")
    assert named.cluster_node_names == ["node-0", "east-b", "node-2"]
    listed = load_config(**roster, node_names=["a", "b", "c"], node_name="b")
    assert listed.cluster_node_names == ["a", "b", "c"]


def test_retention_settings_default_to_iggys_and_read_topic_defaults_from_a_toml_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config()
    assert config.retention_interval_s == 60.0
    assert config.topic.message_expiry_us == EXPIRY_NEVER
    assert config.topic.max_topic_size_bytes == SIZE_UNLIMITED
    toml = tmp_path / "node.toml"
    toml.write_text(
        '[topic]\nmessage_expiry = "2 days 1h"\nmax_topic_size = "10 GiB"\n', encoding="utf-8"
    )
    monkeypatch.setenv("VIEWSTREAM_RETENTION_INTERVAL_S", "1.5")
    config = load_config(config_file=toml)
    assert config.retention_interval_s == 1.5
    assert config.topic.message_expiry_us == (2 * 86_400 + 3_600) * 1_000_000
    assert config.topic.max_topic_size_bytes == 10 << 30


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TOPIC__MESSAGE_EXPIRY", "soon"),
        ("TOPIC__MAX_TOPIC_SIZE", "1 KiB"),
        ("RETENTION_INTERVAL_S", "0"),
    ],
)
def test_bad_retention_settings_stop_the_node_naming_them(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(f"VIEWSTREAM_{name}", value)
    with pytest.raises(ConfigError) as refused:
        load_config()
    assert name.lower().replace("__", ".") in str(refused.value)


def test_config_bus_tls_takes_all_three_files_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("cert.pem", "key.pem", "ca.pem"):
        (tmp_path / name).write_text("x", encoding="utf-8")
    assert load_config().bus_tls_enabled is False
    monkeypatch.setenv("VIEWSTREAM_BUS_TLS_CERT_FILE", str(tmp_path / "cert.pem"))
    monkeypatch.setenv("VIEWSTREAM_BUS_TLS_KEY_FILE", str(tmp_path / "key.pem"))
    with pytest.raises(ConfigError, match="set together"):
        load_config()
    monkeypatch.setenv("VIEWSTREAM_BUS_TLS_CA_FILE", str(tmp_path / "absent.pem"))
    with pytest.raises(ConfigError, match="bus_tls_ca_file"):
        load_config()
    monkeypatch.setenv("VIEWSTREAM_BUS_TLS_CA_FILE", str(tmp_path / "ca.pem"))
    config = load_config()
    assert config.bus_tls_enabled and config.bus_tls_ca_file == tmp_path / "ca.pem"


def test_bus_tls_files_that_do_not_load_stop_the_node_naming_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from broker.runtime.bus import bus_tls

    for name in ("cert.pem", "key.pem", "ca.pem"):
        (tmp_path / name).write_text("not PEM\n", encoding="utf-8")
        monkeypatch.setenv(f"VIEWSTREAM_BUS_TLS_{name[:-4].upper()}_FILE", str(tmp_path / name))
    with pytest.raises(SystemExit, match="bus_tls_cert_file / bus_tls_key_file / bus_tls_ca_file"):
        bus_tls(load_config())
    assert bus_tls(load_config().model_copy(update={"bus_tls_ca_file": None})) is None


def test_the_websocket_listener_is_on_by_default_and_empty_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = load_config()
    assert config.ws_address == "127.0.0.1:8092"
    assert config.ws_host_port == ("127.0.0.1", 8092)
    monkeypatch.setenv("VIEWSTREAM_WS_ADDRESS", "")
    assert load_config().ws_host_port is None
    assert load_config(ws_address="127.0.0.1:9192").ws_host_port == ("127.0.0.1", 9192)


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        ({"ws_address": "nowhere"}, "ws_address"),
        ({"ws_address": "127.0.0.1:8090"}, "the client listener's address"),
        ({"ws_addresses": ["127.0.0.1:1", "127.0.0.1:2"]}, "ws_addresses lists 2 nodes"),
        ({"ws_addresses": ["127.0.0.1:x"]}, "ws_addresses"),
    ],
)
def test_bad_websocket_settings_stop_the_node_naming_them(
    flags: dict[str, object], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        load_config(**flags)
