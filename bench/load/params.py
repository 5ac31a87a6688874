"""The benchmark kinds, their iggy-bench aliases, and the value of every option.

Purpose: one frozen :class:`BenchParams` says everything a run does; the CLI builds it,
the runner reads it and ``report.json`` stores it. Option names, defaults and formats
follow iggy-bench (Apache Iggy's ``core/bench``): sizes like ``1000``, ``64KB``, ``1GiB``;
ranges like ``200..500``; durations like ``10ms``, ``5s``, ``1m``.

Invariants:

1. A :class:`Range` has ``1 <= low <= high``; a fixed value is ``Range(v, v)``.
2. Exactly one of ``message_batches`` and ``total_data_bytes`` is set after
   :meth:`BenchParams.resolved` (iggy-bench's ``-b`` / ``-T`` are mutually exclusive).
3. Pinned kinds use one stream per actor unless told otherwise.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

from pydantic import ByteSize, TypeAdapter, ValidationError

__all__ = [
    "DEFAULTS",
    "BenchParams",
    "Durability",
    "Embedded",
    "Kind",
    "ParamsError",
    "Range",
    "SdkChoice",
    "format_size",
    "parse_duration_s",
    "parse_range",
    "parse_size_bytes",
]


class ParamsError(ValueError):
    """An option value that cannot be used (the CLI prints it and exits with 2)."""


class Kind(enum.Enum):
    """The eight benchmark kinds of iggy-bench; the value is the long name."""

    PINNED_PRODUCER = "pinned-producer"
    PINNED_CONSUMER = "pinned-consumer"
    PINNED_PRODUCER_AND_CONSUMER = "pinned-producer-and-consumer"
    BALANCED_PRODUCER = "balanced-producer"
    BALANCED_CONSUMER_GROUP = "balanced-consumer-group"
    BALANCED_PRODUCER_AND_CONSUMER_GROUP = "balanced-producer-and-consumer-group"
    END_TO_END_PRODUCING_CONSUMER = "end-to-end-producing-consumer"
    END_TO_END_PRODUCING_CONSUMER_GROUP = "end-to-end-producing-consumer-group"

    @property
    def alias(self) -> str:
        """iggy-bench's short name (``pp``, ``pc`` ...)."""
        return KIND_ALIASES[self]

    @property
    def pinned(self) -> bool:
        """One stream per actor, one partition per stream (iggy-bench's pinned kinds)."""
        return self in (
            Kind.PINNED_PRODUCER,
            Kind.PINNED_CONSUMER,
            Kind.PINNED_PRODUCER_AND_CONSUMER,
            Kind.END_TO_END_PRODUCING_CONSUMER,
        )

    @property
    def has_producers(self) -> bool:
        return self in (
            Kind.PINNED_PRODUCER,
            Kind.PINNED_PRODUCER_AND_CONSUMER,
            Kind.BALANCED_PRODUCER,
            Kind.BALANCED_PRODUCER_AND_CONSUMER_GROUP,
        )

    @property
    def has_consumers(self) -> bool:
        return self in (
            Kind.PINNED_CONSUMER,
            Kind.PINNED_PRODUCER_AND_CONSUMER,
            Kind.BALANCED_CONSUMER_GROUP,
            Kind.BALANCED_PRODUCER_AND_CONSUMER_GROUP,
        )

    @property
    def producing_consumers(self) -> bool:
        """Actors that send a batch and then poll it back (the end-to-end kinds)."""
        return self in (
            Kind.END_TO_END_PRODUCING_CONSUMER,
            Kind.END_TO_END_PRODUCING_CONSUMER_GROUP,
        )

    @property
    def uses_groups(self) -> bool:
        """Consumers poll as consumer-group members."""
        return self in (
            Kind.BALANCED_CONSUMER_GROUP,
            Kind.BALANCED_PRODUCER_AND_CONSUMER_GROUP,
            Kind.END_TO_END_PRODUCING_CONSUMER_GROUP,
        )

    @property
    def needs_preload(self) -> bool:
        """Consumer-only kinds read data written before the measured run."""
        return self in (Kind.PINNED_CONSUMER, Kind.BALANCED_CONSUMER_GROUP)


KIND_ALIASES: Final[dict[Kind, str]] = {
    Kind.PINNED_PRODUCER: "pp",
    Kind.PINNED_CONSUMER: "pc",
    Kind.PINNED_PRODUCER_AND_CONSUMER: "ppc",
    Kind.BALANCED_PRODUCER: "bp",
    Kind.BALANCED_CONSUMER_GROUP: "bcg",
    Kind.BALANCED_PRODUCER_AND_CONSUMER_GROUP: "bpcg",
    Kind.END_TO_END_PRODUCING_CONSUMER: "e2e",
    Kind.END_TO_END_PRODUCING_CONSUMER_GROUP: "e2ecg",
}


class Durability(enum.Enum):
    """The topic's ``durability`` option (Iggy 0.9): when a send is acknowledged."""

    REPLICATED = "replicated"
    PERSISTED = "persisted"


class Embedded(enum.Enum):
    """What the bench starts itself: nothing (``--server-address``), a node, a cluster."""

    NONE = "none"
    SINGLE = "single"
    CLUSTER = "cluster"


class SdkChoice(enum.Enum):
    """Which client library drives the load."""

    OURS = "ours"
    OFFICIAL = "official"


@dataclass(frozen=True, slots=True)
class Range:
    """An inclusive range of positive integers (``200..500``), or one value."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ParamsError(f"a range needs 1 <= low <= high, got {self.low}..{self.high}")

    @property
    def fixed(self) -> bool:
        return self.low == self.high

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    def __str__(self) -> str:
        return str(self.low) if self.fixed else f"{self.low}..{self.high}"


_BYTE_SIZE: Final = TypeAdapter(ByteSize)
_SIZE_SHAPE: Final = re.compile(r"\s*\d+(?:\.\d+)?\s*[A-Za-z]*\s*")
_DURATION_UNITS: Final[dict[str, float]] = {
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}
_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|µs|ms|s|min|m|h)?\s*$")


def parse_size_bytes(text: str) -> int:
    """``1000``, ``64KB`` (10^3), ``1MiB`` (2^20), ``2.5GB`` -> bytes (pydantic's
    ``ByteSize``: decimal and binary units, any case).

    Raises:
        ParamsError: not a size.
    """
    # ByteSize reads the longest number it can at the start and ignores what follows
    # ("1.5.5" -> 1), so the whole text must have the shape of one size first.
    if _SIZE_SHAPE.fullmatch(text) is not None:
        try:
            return int(_BYTE_SIZE.validate_python(text.strip()))
        except ValidationError:
            pass
    raise ParamsError(f"not a size: {text!r} (examples: 1000, 64KB, 1MiB, 10GB)")


def format_size(size_bytes: int) -> str:
    """``size_bytes`` for a person, in decimal units (``26.2MB``), by ``ByteSize``."""
    return ByteSize(size_bytes).human_readable(decimal=True)


def parse_duration_s(text: str) -> float:
    """``10ms``, ``5s``, ``1m``, ``500us`` (a bare number is seconds) -> seconds.

    Raises:
        ParamsError: not a duration.
    """
    match = _DURATION.match(text)
    if match is None:
        raise ParamsError(f"not a duration: {text!r} (examples: 0s, 10ms, 5s, 1m)")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]


def parse_range(text: str, *, sizes: bool = False) -> Range:
    """``500`` or ``200..500`` (with ``sizes``, each end may carry a unit: ``1KB..4KB``).

    Raises:
        ParamsError: not a value or range, or an empty range.
    """
    parse = parse_size_bytes if sizes else _parse_count
    low, dots, high = text.partition("..")
    if not dots:
        value = parse(text)
        return Range(value, value)
    return Range(parse(low), parse(high))


def _parse_count(text: str) -> int:
    if not text.strip().isdigit():
        raise ParamsError(f"not a count: {text!r}")
    return int(text)


@dataclass(frozen=True, slots=True)
class BenchParams:
    """Every setting of one run (the ``params`` section of ``report.json``).

    Attributes:
        kind: The benchmark kind.
        message_size: Payload bytes per message (``-m``).
        messages_per_batch: Messages per send or poll (``-P``).
        message_batches: Batches per actor (``-b``); ``None`` when ``-T`` is given.
        total_data_bytes: User bytes for all actors together (``-T``).
        producers: Producer actors (``-p``).
        consumers: Consumer actors (``-c``).
        streams: Streams (``-s``); pinned kinds default to one per actor.
        partitions: Partitions per topic (``-a``).
        consumer_groups: Consumer groups (``-g``), for the group kinds.
        rate_limit_bytes_per_s: Aggregate user-data cap, split evenly over the actors
            (``-r``); consumers of producer+consumer kinds get ``read_amplification``
            times their share so they keep up.
        read_amplification: See ``rate_limit_bytes_per_s`` (``-R``).
        warmup_s: Each actor runs this long before it records (``-w``).
        sampling_s: Time-series bucket (``-t``).
        moving_average_window: Buckets in the throughput moving average (``-W``).
        username: Login (``-u``).
        password: Password (``--password``).
        durability: The bench topics' ``durability`` option.
        max_topic_size_bytes: The bench topics' ``max_topic_size`` (``None``: unlimited).
        message_expiry_s: The bench topics' ``message_expiry`` (``None``: never).
        reuse_streams: Keep existing bench streams instead of recreating them.
        server_addresses: ``HOST:PORT`` of the server(s) (``--server-address``).
        embedded: Start a node or a 3-node cluster instead of using an address.
        sdk: The client library of the load.
        seed: Seed of the payload and batch-length generator.
        poll_interval_s: Wait after an empty poll.
        processes: Load processes the actors are dealt to (``--processes``); ``None``:
            the number of cores, at most the number of actors. Actors that share a
            stream stay in one process.
        output_dir: ``output --output-dir``: write a report folder here.
        identifier: ``output --identifier``: who ran it (default: the host name).
        remark: ``output --remark``: free text stored in the report.
        open_charts: ``output --open-charts``: open the HTML charts when done.
    """

    kind: Kind
    message_size: Range = field(default_factory=lambda: Range(1000, 1000))
    messages_per_batch: Range = field(default_factory=lambda: Range(1000, 1000))
    message_batches: int | None = None
    total_data_bytes: int | None = None
    producers: int = 8
    consumers: int = 8
    streams: int | None = None
    partitions: int | None = None
    consumer_groups: int = 1
    rate_limit_bytes_per_s: int | None = None
    read_amplification: float = 1.05
    warmup_s: float = 0.0
    sampling_s: float = 0.010
    moving_average_window: int = 20
    username: str = "iggy"
    password: str = "iggy"
    durability: Durability = Durability.REPLICATED
    max_topic_size_bytes: int | None = None
    message_expiry_s: float | None = None
    reuse_streams: bool = False
    server_addresses: tuple[str, ...] = ("127.0.0.1:8090",)
    embedded: Embedded = Embedded.NONE
    sdk: SdkChoice = SdkChoice.OURS
    seed: int = 42
    poll_interval_s: float = 0.0005
    processes: int | None = None
    output_dir: str | None = None
    identifier: str | None = None
    remark: str | None = None
    open_charts: bool = False

    # --- derived -----------------------------------------------------------------------

    @property
    def producer_count(self) -> int:
        """Producer actors this kind runs (0 for consumer-only and end-to-end kinds)."""
        return self.producers if self.kind.has_producers else 0

    @property
    def consumer_count(self) -> int:
        """Consumer actors this kind runs (0 for producer-only and end-to-end kinds)."""
        return self.consumers if self.kind.has_consumers else 0

    @property
    def producing_consumer_count(self) -> int:
        """Producing-consumer actors (end-to-end kinds; their count is ``--producers``)."""
        return self.producers if self.kind.producing_consumers else 0

    @property
    def actors(self) -> int:
        return self.producer_count + self.consumer_count + self.producing_consumer_count

    @property
    def stream_count(self) -> int:
        if self.streams is not None:
            return self.streams
        if self.kind.pinned:
            return max(self.producer_count, self.consumer_count, self.producing_consumer_count)
        if self.kind is Kind.END_TO_END_PRODUCING_CONSUMER_GROUP:
            return self.consumer_groups
        return 1

    @property
    def partition_count(self) -> int:
        if self.partitions is not None:
            return self.partitions
        if self.kind.pinned:
            return 1
        if self.kind is Kind.END_TO_END_PRODUCING_CONSUMER_GROUP:
            # One partition per member, so each member owns exactly one partition.
            return max(1, math.ceil(self.producers / max(1, self.consumer_groups)))
        return 24

    @property
    def group_count(self) -> int:
        return self.consumer_groups if self.kind.uses_groups else 0

    def batches_per_actor(self) -> int:
        """``-b``, or ``-T`` over the data-writing actors and the mean batch size."""
        if self.message_batches is not None:
            return self.message_batches
        assert self.total_data_bytes is not None
        writers = max(1, self.producer_count + self.producing_consumer_count or self.actors)
        mean_batch = self.message_size.mean * self.messages_per_batch.mean
        return max(1, math.ceil(self.total_data_bytes / writers / mean_batch))

    def resolved(self) -> BenchParams:
        """These parameters checked, with ``-b`` defaulted when neither ``-b`` nor ``-T``.

        Raises:
            ParamsError: a combination the kind cannot run.
        """
        params = self
        if params.message_batches is not None and params.total_data_bytes is not None:
            raise ParamsError("--message-batches and --total-data are mutually exclusive")
        if params.message_batches is None and params.total_data_bytes is None:
            params = replace(params, message_batches=DEFAULTS.message_batches)
        kind = params.kind
        if kind.has_producers or kind.producing_consumers:
            _positive("--producers", params.producers)
        if kind.has_consumers:
            _positive("--consumers", params.consumers)
        _positive("--streams", params.stream_count)
        _positive("--partitions", params.partition_count)
        _positive("--message-batches", params.batches_per_actor())
        if kind.uses_groups:
            _positive("--consumer-groups", params.consumer_groups)
            if params.consumer_groups > params.stream_count:
                raise ParamsError("--consumer-groups cannot exceed --streams")
        if kind.pinned:
            for name, count in (
                ("--producers", params.producer_count),
                ("--consumers", params.consumer_count),
                ("--producers", params.producing_consumer_count),
            ):
                if count and params.stream_count < count:
                    raise ParamsError(f"pinned kinds need --streams >= {name} ({count})")
        if kind is Kind.END_TO_END_PRODUCING_CONSUMER_GROUP:
            members = math.ceil(params.producers / params.consumer_groups)
            if params.partition_count < members:
                raise ParamsError(
                    "e2ecg needs --partitions >= producing consumers per group "
                    f"({members}), so every member owns a partition"
                )
        if params.rate_limit_bytes_per_s is not None:
            _positive("--rate-limit", params.rate_limit_bytes_per_s)
        if params.processes is not None:
            _positive("--processes", params.processes)
        if params.warmup_s < 0 or params.sampling_s <= 0 or params.moving_average_window < 1:
            raise ParamsError(
                "--warmup-time >= 0, --sampling-time > 0, --moving-average-window >= 1"
            )
        if params.message_size.high > 16 * 2**20 or params.messages_per_batch.high > 100_000:
            raise ParamsError("messages up to 16 MiB and batches up to 100000 messages")
        if params.reuse_streams and not (
            kind in (Kind.PINNED_PRODUCER, Kind.BALANCED_PRODUCER) or kind.needs_preload
        ):
            raise ParamsError(
                "--reuse-streams works with pp, bp, pc and bcg (the other kinds read back "
                "what they wrote in this run, from offset 0)"
            )
        if params.embedded is not Embedded.NONE and params.reuse_streams:
            raise ParamsError("--reuse-streams makes no sense with a fresh --embedded server")
        return params

    def to_json(self) -> dict[str, Any]:
        """The ``params`` section of ``report.json`` (derived counts included)."""
        data: dict[str, Any] = asdict(self)
        for key, value in list(data.items()):
            if isinstance(value, enum.Enum):
                data[key] = value.value
            elif isinstance(value, tuple):
                data[key] = list(value)
        data["message_size"] = str(self.message_size)
        data["messages_per_batch"] = str(self.messages_per_batch)
        data["kind_alias"] = self.kind.alias
        data["producers_effective"] = self.producer_count
        data["consumers_effective"] = self.consumer_count
        data["producing_consumers_effective"] = self.producing_consumer_count
        data["streams_effective"] = self.stream_count
        data["partitions_effective"] = self.partition_count
        data["consumer_groups_effective"] = self.group_count
        data["batches_per_actor"] = self.batches_per_actor()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchParams:
        """The inverse of :meth:`to_json` (for ``compare`` and the performance page)."""
        return cls(
            kind=Kind(data["kind"]),
            message_size=parse_range(data["message_size"]),
            messages_per_batch=parse_range(data["messages_per_batch"]),
            message_batches=data["message_batches"],
            total_data_bytes=data["total_data_bytes"],
            producers=data["producers"],
            consumers=data["consumers"],
            streams=data["streams"],
            partitions=data["partitions"],
            consumer_groups=data["consumer_groups"],
            rate_limit_bytes_per_s=data["rate_limit_bytes_per_s"],
            read_amplification=data["read_amplification"],
            warmup_s=data["warmup_s"],
            sampling_s=data["sampling_s"],
            moving_average_window=data["moving_average_window"],
            username=data["username"],
            password=data["password"],
            durability=Durability(data["durability"]),
            max_topic_size_bytes=data["max_topic_size_bytes"],
            message_expiry_s=data["message_expiry_s"],
            reuse_streams=data["reuse_streams"],
            server_addresses=tuple(data["server_addresses"]),
            embedded=Embedded(data["embedded"]),
            sdk=SdkChoice(data["sdk"]),
            seed=data["seed"],
            poll_interval_s=data["poll_interval_s"],
            processes=data.get("processes"),
            output_dir=data["output_dir"],
            identifier=data["identifier"],
            remark=data["remark"],
            open_charts=data["open_charts"],
        )


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise ParamsError(f"{name} must be at least 1, got {value}")


@dataclass(frozen=True, slots=True)
class _Defaults:
    """iggy-bench's defaults (``core/bench/src/args/defaults.rs``)."""

    message_size: int = 1000
    messages_per_batch: int = 1000
    message_batches: int = 1000
    producers: int = 8
    consumers: int = 8
    consumer_groups: int = 1
    balanced_partitions: int = 24
    warmup: str = "0s"
    sampling_time: str = "10ms"
    moving_average_window: int = 20
    read_amplification: float = 1.05
    username: str = "iggy"
    password: str = "iggy"
    server_address: str = "127.0.0.1:8090"
    output_dir: str = "performance_results"


DEFAULTS: Final = _Defaults()
