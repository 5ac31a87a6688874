"""``iggy://`` connection strings."""

from __future__ import annotations

import pytest

from sdk.connection_string import DEFAULT_PORT, ClientConfig, NodeAddress, parse_connection_string
from sdk.errors import InvalidConnectionString


def test_the_official_form_parses_to_credentials_and_one_seed() -> None:
    config = parse_connection_string("iggy://iggy:secret@127.0.0.1:8090")
    assert config.seeds == (NodeAddress("127.0.0.1", 8090),)
    assert (config.username, config.password) == ("iggy", "secret")


def test_iggy_tcp_scheme_default_port_and_several_seeds() -> None:
    config = parse_connection_string("iggy+tcp://u:p@a,b:9000,[::1]:9001,[fe80::1]")
    assert config.seeds == (
        NodeAddress("a", DEFAULT_PORT),
        NodeAddress("b", 9000),
        NodeAddress("::1", 9001),
        NodeAddress("fe80::1", DEFAULT_PORT),
    )
    assert str(config.seeds[2]) == "[::1]:9001"


def test_percent_encoded_credentials_are_decoded() -> None:
    config = parse_connection_string("iggy://us%40er:p%3Ass@h:1")
    assert (config.username, config.password) == ("us@er", "p:ss")


def test_options_set_timeouts_and_flags() -> None:
    config = parse_connection_string(
        "iggy://u:p@h:1?request_timeout=250ms&connect_timeout=2s&retry_deadline=1m"
        "&reconnection_interval=0.1&cluster_discovery=false&nodelay=true&tls=false"
    )
    assert config.request_timeout_s == 0.25
    assert config.connect_timeout_s == 2.0
    assert config.retry_deadline_s == 60.0
    assert config.backoff_min_s == 0.1
    assert config.cluster_discovery is False and config.nodelay is True


def test_a_large_reconnection_interval_raises_the_backoff_maximum_too() -> None:
    config = parse_connection_string("iggy://u:p@h:1?reconnection_interval=5s")
    assert config.backoff_min_s == 5.0 and config.backoff_max_s == 5.0


@pytest.mark.parametrize(
    "text",
    [
        "http://u:p@h:1",
        "iggy://h:1",
        "iggy://@h:1",
        "iggy://:p@h:1",
        "iggy://u:@h:1",
        "iggy://u:p@h:notaport",
        "iggy://u:p@h:70000",
        "iggy://u:p@h:1?tls=on",
        "iggy://u:p@h:1?tls_ca_file=ca.pem",
        "iggy://u:p@h:1?tls_domain=node.example",
        "iggy://u:p@h:1?tls=true&tls=false",
        "iggy://u:p@h:1?bogus=1",
        "iggy://u:p@h:1?request_timeout=soon",
        "iggy://u:p@h:1?nodelay=maybe",
        "iggy://u:p@[::1:1",
        "iggy://u:p@:1",
    ],
)
def test_bad_connection_strings_are_refused(text: str) -> None:
    with pytest.raises(InvalidConnectionString):
        parse_connection_string(text)


def test_config_validates_its_fields() -> None:
    with pytest.raises(ValueError):
        ClientConfig(seeds=())
    with pytest.raises(ValueError):
        ClientConfig(request_timeout_s=0)
    with pytest.raises(ValueError):
        ClientConfig(username="u")
    with pytest.raises(ValueError):
        ClientConfig(backoff_min_s=2, backoff_max_s=1)
    with pytest.raises(ValueError):
        ClientConfig(username="u", password="p", token="t")
    with pytest.raises(ValueError):
        ClientConfig(token="")
    with pytest.raises(ValueError):
        ClientConfig(tls_ca_file="ca.pem")


def test_tls_options_in_iggys_form_set_tls_the_server_name_and_the_ca_file() -> None:
    config = parse_connection_string(
        "iggy+tcp://u:p@10.0.0.5:8090?tls=true&tls_domain=node-1.example"
        "&tls_ca_file=%2Fetc%2Fviewstream%2Fca.pem"
    )
    assert config.tls is True
    assert config.tls_domain == "node-1.example"
    assert config.tls_ca_file == "/etc/viewstream/ca.pem"


def test_tls_alone_verifies_the_host_dialed_against_the_system_roots() -> None:
    config = parse_connection_string("iggy://u:p@h:1?tls=true&tls_domain=")
    assert (config.tls, config.tls_domain, config.tls_ca_file) == (True, None, None)
    assert parse_connection_string("iggy://u:p@h:1").tls is False


def test_a_credential_without_a_colon_is_a_personal_access_token() -> None:
    config = parse_connection_string("iggy+tcp://iggypat-1234567890abcdef@127.0.0.1:8090")
    assert config.token == "iggypat-1234567890abcdef"
    assert (config.username, config.password) == (None, None)
    assert config.seeds == (NodeAddress("127.0.0.1", 8090),)


def test_a_token_replaces_the_base_settings_password_and_the_reverse() -> None:
    base = ClientConfig(username="u", password="p")
    with_token = parse_connection_string("iggy://Xy_z-9%2B@h:1", base)
    assert (with_token.token, with_token.username, with_token.password) == ("Xy_z-9+", None, None)
    back = parse_connection_string("iggy://u:p@h:1", with_token)
    assert (back.token, back.username, back.password) == (None, "u", "p")


def test_secrets_are_not_in_the_repr() -> None:
    text = repr(parse_connection_string("iggy://tok-secret@h:1"))
    text += repr(parse_connection_string("iggy://u:pass-secret@h:1"))
    assert "tok-secret" not in text and "pass-secret" not in text
