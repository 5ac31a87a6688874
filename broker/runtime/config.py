"""Node configuration: defaults < TOML file < ``VIEWSTREAM_*`` environment < CLI flags.

Every setting has a sane default so that ``viewstream serve`` with no arguments starts a
one-node cluster on ``127.0.0.1:8090`` with its data in ``./local_data``. Invalid values
fail at start with a message that names the setting (see ``load_config``).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from broker.state.metadata import EXPIRY_NEVER, SEGMENT_SIZE_BYTES_MIN, SIZE_UNLIMITED
from broker.state.option_values import parse_duration_us, parse_size_bytes

ENV_PREFIX = "VIEWSTREAM_"
DEFAULT_ADDRESS = "127.0.0.1:8090"
DEFAULT_HTTP_ADDRESS = "127.0.0.1:3000"
DEFAULT_WS_ADDRESS = "127.0.0.1:8092"
NODE_NAME_SIZE_MAX = 255
"""Bytes of UTF-8 in a cluster or node name: the wire gives a name a one-byte length."""
DEFAULT_DATA_DIR = Path("local_data")
FRAME_SIZE_MAX_CEILING = 1 << 30


def parse_address(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` into its parts, with a clear error for anything else."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is outside 0..65535")
    host = host.strip("[]")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError as error:
            raise ValueError(f"host {host!r} is not an IP address or 'localhost'") from error
    return host, port


class Limits(BaseModel):
    """Bounds on what one client or connection may cost the node."""

    frame_size_bytes_max: int = Field(
        64 * 1024 * 1024,
        ge=4096,
        le=FRAME_SIZE_MAX_CEILING,
        description="Largest request frame accepted, header included.",
    )
    connections_max: int = Field(
        10_000, ge=1, description="Client connections served at once; more are refused."
    )
    requests_in_flight_per_connection_max: int = Field(
        8, ge=1, description="Requests read from one connection before its replies are sent."
    )
    idle_timeout_s: float = Field(
        300.0, gt=0, description="A connection with no complete request for this long is closed."
    )
    frame_read_timeout_s: float = Field(
        10.0,
        gt=0,
        description="A frame that has started arriving must finish within this time "
        "(drops slowloris clients that send half a header and stall).",
    )
    login_timeout_s: float = Field(
        10.0,
        gt=0,
        description="A connection that has not logged in this long after it was accepted "
        "is closed (after the answers to what it sent). PING is served before login but "
        "does not extend it.",
    )
    unauthenticated_connections_per_address_max: int = Field(
        64,
        ge=1,
        description="Connections of one client address (IP) that have not logged in; one "
        "more is closed as it is accepted. A connection stops counting once it logs in.",
    )
    incoming_frame_bytes_max: int = Field(
        256 * 1024 * 1024,
        ge=4096,
        le=1 << 40,
        description="Bytes held for incoming frames over all connections, each frame "
        "counted at its declared size from its header until it is answered; a frame that "
        "does not fit waits, unread (TCP backpressure). At least `frame_size_bytes_max`.",
    )
    disk_budget_bytes: int | None = Field(
        None,
        ge=0,
        description="Most bytes the data directory may hold (every file under it); past "
        "it the node refuses new messages with 4010 until retention, a purge or a deletion "
        "makes room. Unset: whatever leaves 5% of the file system free. 0: no budget but "
        "`disk_free_min_bytes`.",
    )
    disk_free_min_bytes: int = Field(
        64 * 1024 * 1024,
        ge=0,
        description="Free space the node leaves on its data directory's file system, "
        "whatever the budget; below it the node refuses new messages as when over its "
        "budget, and its partition backups stop writing their peers' message prepares.",
    )
    long_polls_waiting_max: int = Field(
        1024,
        ge=0,
        description="Long polls (viewstream's extension, `docs/protocol.md`) that may wait "
        "on the node at once; one more is answered at once with 5 (FeatureUnavailable), "
        "and our SDK polls the ordinary way for that round. 0: every long poll is refused.",
    )
    # -- descriptors
    partition_descriptors_reserved: int = Field(
        5120,
        ge=0,
        description="File descriptors set aside for partitions' journals, 5 per open "
        "partition (its two directories, its active segment's log and index, a sealed log "
        "for reads): 1,024 partitions. A partition beyond it is refused (58) until another "
        "closes. At "
        "start the node raises its soft RLIMIT_NOFILE to the hard limit and refuses to "
        "start unless `connections_max`, the replica bus, this reserve and a fixed margin "
        "fit in it.",
    )

    @model_validator(mode="after")
    def _check_frame_budget(self) -> Limits:
        if self.incoming_frame_bytes_max < self.frame_size_bytes_max:
            raise ValueError(
                f"incoming_frame_bytes_max ({self.incoming_frame_bytes_max}) must be at least "
                f"frame_size_bytes_max ({self.frame_size_bytes_max}): a largest frame must fit"
            )
        return self


class Heartbeat(BaseModel):
    """Iggy's ``[heartbeat]``: how often clients are expected to send something."""

    enabled: bool = Field(
        True,
        description="Evict a consumer-group member's connection that sends nothing (no "
        "request, no PING) for 1.2 x `interval_s`, with eviction reason 13 (StaleClient), "
        "and end its session so its groups rebalance. A connection that is no group "
        "member is left to `limits.idle_timeout_s`, as in Iggy.",
    )
    interval_s: float = Field(
        30.0,
        gt=0,
        le=86_400,
        description="Expected heartbeat interval (Iggy's `heartbeat.interval`, 30 s). The "
        "official SDKs and ours ping every 5 s by default.",
    )


class ConsumerGroupSettings(BaseModel):
    """Iggy's ``[consumer_group]``: cooperative rebalancing."""

    rebalancing_timeout_s: float = Field(
        30.0,
        gt=0,
        le=86_400,
        description="A partition moving from one member to another waits at most this "
        "long for its owner to commit what it was served (Iggy's "
        "`consumer_group.rebalancing_timeout`); then it moves anyway.",
    )


_NEVER_WORDS = frozenset({"none", "never", "never_expire", "unlimited"})


class TopicDefaults(BaseModel):
    """Options of topics created without them (or with 0, Iggy's ``ServerDefault``).

    Written as Iggy's config writes them: a humantime duration (``7 days``, ``3s``) or
    ``none`` for the expiry, a byte size (``10 GiB``) or ``unlimited`` for the size.
    Retention reads them when it looks, so a change applies, at the next start, to every
    topic that did not set its own.
    """

    message_expiry: str = Field(
        "none",
        description="Expiry of messages in topics without their own `message_expiry`: a "
        "sealed segment whose newest message is older goes. `none`: never.",
    )
    max_topic_size: str = Field(
        "unlimited",
        description="Size cap of topics without their own `max_topic_size`: the oldest "
        "sealed segments go until the topic fits. `unlimited`: none.",
    )

    @field_validator("message_expiry")
    @classmethod
    def _check_expiry(cls, value: str) -> str:
        if value.strip().lower() not in _NEVER_WORDS:
            micros = parse_duration_us(value)
            if micros is None or micros < 1:
                raise ValueError(f"{value!r} is not a duration (e.g. 7 days, 30s) or none")
        return value

    @field_validator("max_topic_size")
    @classmethod
    def _check_size(cls, value: str) -> str:
        if value.strip().lower() not in _NEVER_WORDS:
            size = parse_size_bytes(value)
            if size is None or size < SEGMENT_SIZE_BYTES_MIN:
                raise ValueError(f"{value!r} is not a size of at least 1 MiB (e.g. 10 GiB)")
        return value

    @property
    def message_expiry_us(self) -> int:
        """The expiry in microseconds; ``EXPIRY_NEVER`` for none."""
        micros = parse_duration_us(self.message_expiry)
        return EXPIRY_NEVER if micros is None else micros

    @property
    def max_topic_size_bytes(self) -> int:
        """The size cap in bytes; ``SIZE_UNLIMITED`` for none."""
        size = parse_size_bytes(self.max_topic_size)
        return SIZE_UNLIMITED if size is None else size


BUS_TLS_SETTINGS: Final = ("bus_tls_cert_file", "bus_tls_key_file", "bus_tls_ca_file")


class Config(BaseSettings):
    """One node's configuration."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    address: str = Field(DEFAULT_ADDRESS, description="Client listener, HOST:PORT.")
    http_address: str = Field(
        DEFAULT_HTTP_ADDRESS,
        description="Iggy's HTTP REST API listener, HOST:PORT; empty turns it off. It "
        "speaks TLS with `tls_cert_file` / `tls_key_file` when those are set.",
    )
    ws_address: str = Field(
        DEFAULT_WS_ADDRESS,
        description="WebSocket client listener, HOST:PORT: Iggy's binary frames in binary "
        "WebSocket messages (the SDK's `iggy+ws://`), with the same connection handling and "
        "limits as `address`, and TLS when `tls_cert_file` is set. Empty: no WebSocket "
        "listener.",
    )
    data_dir: Path = Field(DEFAULT_DATA_DIR, description="Where journals and superblocks live.")
    replica: int = Field(0, ge=0, description="This node's index in `replicas`.")
    replicas: list[str] = Field(
        default_factory=list,
        description="Replica-bus addresses of every node, in replica order; empty means a "
        "cluster of one.",
    )
    client_addresses: list[str] = Field(
        default_factory=list,
        description="Client listener HOST:PORT of every node, in replica order, as cluster "
        "metadata advertises them to clients; empty means just `address`.",
    )
    http_addresses: list[str] = Field(
        default_factory=list,
        description="HTTP listener HOST:PORT of every node, in replica order, as cluster "
        "metadata reports them (`http_port`); empty means only this node's own.",
    )
    http_token_secret: SecretStr | None = Field(
        None,
        description="Key that signs and checks the HTTP API's access tokens (JWT, "
        "HS256). Unset: derived from `cluster_secret`, so every node of a cluster accepts "
        "a token any of them issued; a node without either draws a key at start (its "
        "tokens die with the process).",
    )
    http_token_expiry_s: int = Field(
        3600,
        ge=1,
        le=7 * 86_400,
        description="Lifetime of an access token issued by `POST /users/login` (Iggy's "
        "default: 1 hour).",
    )
    ws_addresses: list[str] = Field(
        default_factory=list,
        description="WebSocket HOST:PORT of every node, in replica order, as cluster "
        "metadata advertises them (an empty entry: that node has none); empty means only "
        "this node's own listener is reported, the others' WebSocket port as 0.",
    )
    cluster_name: str = Field(
        "viewstream",
        description="The cluster's name in cluster metadata (GET_CLUSTER_METADATA).",
    )
    node_names: list[str] = Field(
        default_factory=list,
        description="Name of every node, in replica order, as cluster metadata reports "
        "them; empty means node-0, node-1, ...",
    )
    node_name: str | None = Field(
        None,
        description="This node's name in cluster metadata; unset means its entry of "
        "`node_names`, or node-N (N: `replica`). With `node_names` set it must be this "
        "node's entry there.",
    )
    cluster_secret: SecretStr | None = Field(
        None,
        description="Shared secret that authenticates the replica bus (required for "
        "more than one node).",
    )
    root_username: str = Field("iggy", min_length=1, max_length=255)
    root_password: SecretStr | None = Field(
        None, description="Root password on first start; generated and printed once if unset."
    )
    password_hash_cost_log2: int = Field(
        14,
        ge=10,
        le=20,
        description="scrypt cost of the password hashes this node makes (the root user, "
        "CREATE_USER, CHANGE_PASSWORD): N = 2**this, r = 8, p = 1. Each hash keeps the "
        "cost it was made with, so a change applies to passwords set from then on. Lower "
        "it only where a login check of tens of milliseconds is too slow.",
    )
    no_sync: bool = Field(False, description="Never fsync: for throwaway runs only.")
    sync_scope: Literal["filesystem", "file"] = Field(
        "filesystem",
        description="How syncs of several persisted partitions at once reach the disk: "
        "`filesystem` flushes the data directory's file system once for all of them "
        "(syncfs, Linux 5.8+; it also writes back everything else dirty there), `file` "
        "fsyncs each partition's files on its own.",
    )
    tick_ms: int = Field(10, ge=1, le=1000, description="Consensus tick period.")
    segment_size_bytes: int = Field(
        1 << 30, ge=1 << 20, le=1 << 30, description="Segment roll size."
    )
    retention_interval_s: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="How often the primary of each partition group looks for expired or "
        "oversize sealed segments and proposes their retention (Iggy's segment cleaner "
        "interval).",
    )
    topic: TopicDefaults = Field(default_factory=TopicDefaults)
    heartbeat: Heartbeat = Field(default_factory=Heartbeat)
    consumer_group: ConsumerGroupSettings = Field(default_factory=ConsumerGroupSettings)
    tls_cert_file: Path | None = Field(
        None,
        description="PEM certificate chain of the client listener; with `tls_key_file` "
        "the listener speaks TLS only (off by default).",
    )
    tls_key_file: Path | None = Field(None, description="PEM private key matching `tls_cert_file`.")
    bus_tls_cert_file: Path | None = Field(
        None,
        description="PEM certificate chain this node presents on the replica bus, signed by "
        "`bus_tls_ca_file`; with `bus_tls_key_file` and `bus_tls_ca_file` the bus speaks "
        "mutual TLS only (off by default). Every node of a cluster sets all three or none.",
    )
    bus_tls_key_file: Path | None = Field(
        None, description="PEM private key matching `bus_tls_cert_file`."
    )
    bus_tls_ca_file: Path | None = Field(
        None,
        description="PEM certificates of the cluster's CA: a bus peer must present a "
        "certificate that chains to one of them.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    limits: Limits = Field(default_factory=Limits)
    config_file: Path | None = Field(
        None, description="TOML file read below the environment and the flags."
    )

    @field_validator("address")
    @classmethod
    def _check_address(cls, value: str) -> str:
        parse_address(value)
        return value

    @field_validator("http_address")
    @classmethod
    def _check_http_address(cls, value: str) -> str:
        if value:
            parse_address(value)
        return value

    @field_validator("ws_address")
    @classmethod
    def _check_ws_address(cls, value: str) -> str:
        if value:
            parse_address(value)
        return value

    @field_validator("http_addresses")
    @classmethod
    def _check_http_addresses(cls, value: list[str]) -> list[str]:
        for address in value:
            parse_address(address)
        return value

    @field_validator("ws_addresses")
    @classmethod
    def _check_ws_addresses(cls, value: list[str]) -> list[str]:
        for address in value:
            if address:
                parse_address(address)
        return value

    @field_validator("replicas")
    @classmethod
    def _check_replicas(cls, value: list[str]) -> list[str]:
        for address in value:
            parse_address(address)
        if len(value) not in {0, 1, 3, 5}:
            raise ValueError(f"a cluster has 1, 3 or 5 replicas, not {len(value)}")
        if len(set(value)) != len(value):
            raise ValueError("replica addresses must be distinct")
        return value

    @field_validator("client_addresses")
    @classmethod
    def _check_client_addresses(cls, value: list[str]) -> list[str]:
        for address in value:
            parse_address(address)
        return value

    @field_validator("cluster_name")
    @classmethod
    def _check_cluster_name(cls, value: str) -> str:
        if not 1 <= len(value.encode("utf-8")) <= NODE_NAME_SIZE_MAX:
            raise ValueError("the cluster name is 1 to 255 bytes of UTF-8")
        return value

    @field_validator("node_names")
    @classmethod
    def _check_node_names(cls, value: list[str]) -> list[str]:
        for name in value:
            _check_node_name(name)
        if len(set(value)) != len(value):
            raise ValueError("node names must be distinct")
        return value

    @field_validator("node_name")
    @classmethod
    def _check_own_node_name(cls, value: str | None) -> str | None:
        if value is not None:
            _check_node_name(value)
        return value

    @model_validator(mode="after")
    def _check_roster(self) -> Config:
        count = max(1, len(self.replicas))
        if self.client_addresses and len(self.client_addresses) != count:
            raise ValueError(
                f"client_addresses lists {len(self.client_addresses)} nodes, replicas {count}"
            )
        if self.http_addresses and len(self.http_addresses) != count:
            raise ValueError(
                f"http_addresses lists {len(self.http_addresses)} nodes, replicas {count}"
            )
        if (
            self.http_token_secret is not None
            and len(self.http_token_secret.get_secret_value()) < 16
        ):
            raise ValueError("http_token_secret must be at least 16 characters")
        ws = self.ws_host_port
        if ws is not None and ws[1] != 0 and ws == self.host_port:
            raise ValueError(f"ws_address {self.ws_address} is the client listener's address")
        if self.ws_addresses and len(self.ws_addresses) != count:
            raise ValueError(f"ws_addresses lists {len(self.ws_addresses)} nodes, replicas {count}")
        if self.node_names and len(self.node_names) != count:
            raise ValueError(f"node_names lists {len(self.node_names)} nodes, replicas {count}")
        if self.node_name is not None:
            names = self.node_names or [f"node-{index}" for index in range(count)]
            if self.node_names and self.replica < count and names[self.replica] != self.node_name:
                raise ValueError(
                    f"node_name {self.node_name!r} is not this node's entry of node_names "
                    f"({names[self.replica]!r})"
                )
            others = names[: self.replica] + names[self.replica + 1 :]
            if self.node_name in others:
                raise ValueError(f"node_name {self.node_name!r} is another node's name")
        if self.replica >= count:
            raise ValueError(f"replica {self.replica} is outside the roster of {count}")
        if count > 1 and self.cluster_secret is None:
            raise ValueError("cluster_secret is required when replicas lists several nodes")
        if self.cluster_secret is not None and len(self.cluster_secret.get_secret_value()) < 16:
            raise ValueError("cluster_secret must be at least 16 characters")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file are set together or not at all")
        bus_tls = (self.bus_tls_cert_file, self.bus_tls_key_file, self.bus_tls_ca_file)
        if any(path is None for path in bus_tls) and any(path is not None for path in bus_tls):
            raise ValueError(
                "bus_tls_cert_file, bus_tls_key_file and bus_tls_ca_file are set together "
                "or not at all"
            )
        for name in ("tls_cert_file", "tls_key_file", *BUS_TLS_SETTINGS):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{name}: {path} is not a file")
        return self

    @property
    def bus_tls_enabled(self) -> bool:
        return self.bus_tls_ca_file is not None

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert_file is not None

    @property
    def replica_count(self) -> int:
        return max(1, len(self.replicas))

    @property
    def cluster_node_names(self) -> list[str]:
        """Every node's name, in replica order, as cluster metadata reports them."""
        names = self.node_names or [f"node-{index}" for index in range(self.replica_count)]
        if self.node_name is not None:
            names = [*names]
            names[self.replica] = self.node_name
        return names

    @property
    def host_port(self) -> tuple[str, int]:
        return parse_address(self.address)

    @property
    def ws_host_port(self) -> tuple[str, int] | None:
        """The WebSocket listener's address, or None when it is off."""
        return parse_address(self.ws_address) if self.ws_address else None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Flags (init) beat the environment, which beats the TOML file, which beats the
        # defaults. The TOML path itself comes from the flags or the environment.
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_path = _toml_path(init_settings, env_settings)
        if toml_path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
        return tuple(sources)


def _toml_path(
    init_settings: PydanticBaseSettingsSource, env_settings: PydanticBaseSettingsSource
) -> Path | None:
    for source in (init_settings, env_settings):
        value = source().get("config_file")
        if value:
            return Path(value)
    return None


def _check_node_name(name: str) -> None:
    if not 1 <= len(name.encode("utf-8")) <= NODE_NAME_SIZE_MAX:
        raise ValueError(f"node name {name!r} is not 1 to 255 bytes of UTF-8")


class ConfigError(Exception):
    """Invalid configuration; the message names every offending setting."""


def load_config(**flags: Any) -> Config:
    """Build the configuration from every source, with flags given as keyword arguments.

    Flags that are ``None`` are treated as not given, so CLI options can default to None.

    Raises:
        ConfigError: a setting is invalid or the config file cannot be read.
    """
    given = {key: value for key, value in flags.items() if value is not None}
    config_file = given.get("config_file")
    if config_file is not None and not Path(config_file).is_file():
        raise ConfigError(f"config_file: {config_file} does not exist")
    try:
        return Config(**given)
    except ValidationError as error:
        lines = []
        for problem in error.errors():
            where = ".".join(str(part) for part in problem["loc"]) or "config"
            lines.append(f"{where}: {problem['msg']}")
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines)) from None
    except (OSError, ValueError) as error:
        raise ConfigError(f"config_file: {error}") from None
