"""Topic options as Iggy's wire carries them: read into a patch, reported back, described.

Purpose: a create or update of a topic carries an options block (key, kind and value
entries, as the official SDK sends them). :func:`topic_options` reads it into the domain's
``TopicOptionsPatch`` with Iggy's rules for keys and values; :func:`topic_option_entries`
writes a topic's options back as entries for its details; :func:`options_catalog` answers
DESCRIBE_OPTIONS. The text parsers the rules use (durations, sizes) are in
:mod:`broker.state.option_values`.

Invariants:

1. An unknown key is refused (``UNSUPPORTED_OPTION_KEY``), as Iggy refuses it; a value of
   a kind the key does not take, or out of its range, is ``INVALID_OPTION_VALUE``.
2. A numeric 0 means "server default", as in Iggy, and is the same as leaving the key out.
3. ``enforce_fsync`` true makes the durability ``persisted``, whatever ``durability`` says.
4. Reported entries come in the wire's (sorted) key order, with the kinds the SDK sends.
5. Pure: no clock, no randomness; the same block always gives the same patch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from broker.state.errors import ErrorCode, StateError
from broker.state.metadata import (
    EXPIRY_NEVER,
    MESSAGES_REQUIRED_TO_SAVE_MAX,
    SEGMENT_SIZE_ALIGNMENT_BYTES,
    SEGMENT_SIZE_BYTES_MAX,
    SEGMENT_SIZE_BYTES_MIN,
    SIZE_REQUIRED_TO_SAVE_BYTES_MAX,
    SIZE_UNLIMITED,
    U32_MAX,
    TopicOptions,
    TopicOptionsPatch,
)
from broker.state.metadata import Compression as DomainCompression
from broker.state.metadata import Durability as DomainDurability
from broker.state.option_values import parse_duration_us, parse_size_bytes
from sdk import wire
from sdk.wire.primitives import HeaderValue

# Topic option keys on the wire (captured from the official SDK) and their domain fields.
_TOPIC_OPTION_KEYS: Final[dict[str, str]] = {
    "message_expiry": "message_expiry_us",
    "max_topic_size": "max_topic_size_bytes",
    "compression_algorithm": "compression",
    "segment_size": "segment_size_bytes",
    "durability": "durability",
    "consumer_offset_durability": "consumer_offset_durability",
    "messages_required_to_save": "messages_required_to_save",
    "size_of_messages_required_to_save": "size_of_messages_required_to_save_bytes",
    "preallocate_segments": "preallocate_segments",
}
WIRE_KEY_BY_FIELD: Final = {field: key for key, field in _TOPIC_OPTION_KEYS.items()}
_UNSIGNED_KINDS: Final = (
    wire.HeaderKind.UINT8,
    wire.HeaderKind.UINT16,
    wire.HeaderKind.UINT32,
    wire.HeaderKind.UINT64,
)


def options_catalog(scope: int, segment_size_default: int) -> wire.OptionsCatalog:
    """DESCRIBE_OPTIONS: every option key a ``scope`` accepts, with the kind it is stored
    as, its default and what it does here (Iggy's layout; our keys, described as this
    broker honours them). Streams and users take no options: their catalogs are empty.

    Args:
        scope: ``wire.OptionsScope``.
        segment_size_default: The node's ``segment_size_bytes``, the default of a topic
            created without one.

    Raises:
        StateError: ``INVALID_COMMAND`` for an unknown scope, as Iggy answers it.
    """
    if scope in (wire.OptionsScope.STREAM, wire.OptionsScope.USER):
        return wire.OptionsCatalog(())
    if scope != wire.OptionsScope.TOPIC:
        raise StateError(ErrorCode.INVALID_COMMAND, f"unknown options scope {scope}")
    defaults = TopicOptions()
    kind = wire.HeaderKind

    def entry(
        key: str, value_kind: wire.HeaderKind, value: HeaderValue, text: str
    ) -> wire.OptionDescriptor:
        encoded = wire.encode_header_value(value_kind, value)
        return wire.OptionDescriptor(key, int(value_kind), encoded, text)

    return wire.OptionsCatalog(
        (
            entry(
                "compression_algorithm",
                kind.STRING,
                defaults.compression.value,
                "none or gzip: recorded and reported, messages are stored as sent",
            ),
            entry(
                "message_expiry",
                kind.UINT64,
                defaults.message_expiry_us,
                "Message expiry in microseconds, or a humantime string (e.g. 7 days); "
                "u64::MAX or never_expire: never; 0: the server default",
            ),
            entry(
                "max_topic_size",
                kind.UINT64,
                defaults.max_topic_size_bytes,
                "Topic size cap in bytes, or a byte-size string (e.g. 1 GiB); u64::MAX or "
                "unlimited: no cap; at least the segment size",
            ),
            entry(
                "segment_size",
                kind.UINT64,
                segment_size_default,
                f"Segment size in bytes, or a byte-size string (e.g. 128 MiB): a "
                f"{SEGMENT_SIZE_ALIGNMENT_BYTES}-byte multiple "
                f"within {SEGMENT_SIZE_BYTES_MIN}..={SEGMENT_SIZE_BYTES_MAX}; fixed at create",
            ),
            entry(
                "durability",
                kind.STRING,
                defaults.durability.value,
                "When a send is acknowledged: replicated (a quorum holds it) or persisted "
                "(a quorum synced it); fixed at create",
            ),
            entry(
                ENFORCE_FSYNC_KEY,
                kind.BOOL,
                defaults.durability is DomainDurability.PERSISTED,
                "true: durability persisted (acknowledged once a quorum synced the write), "
                "whatever durability says; false: durability decides; reported as durability",
            ),
            entry(
                "consumer_offset_durability",
                kind.STRING,
                defaults.consumer_offset_durability.value,
                "The same for stored consumer offsets; fixed at create",
            ),
            entry(
                "messages_required_to_save",
                kind.UINT32,
                defaults.messages_required_to_save,
                f"1..={MESSAGES_REQUIRED_TO_SAVE_MAX}: recorded and reported; the journal "
                "syncs by durability level and group commit instead",
            ),
            entry(
                "size_of_messages_required_to_save",
                kind.UINT64,
                defaults.size_of_messages_required_to_save_bytes,
                f"Bytes, at most {SIZE_REQUIRED_TO_SAVE_BYTES_MAX}: recorded and reported "
                "only, as messages_required_to_save",
            ),
            entry(
                "preallocate_segments",
                kind.BOOL,
                defaults.preallocate_segments,
                "Recorded and reported; segments are not preallocated",
            ),
        )
    )


def topic_options(options: Sequence[wire.OptionEntry]) -> TopicOptionsPatch:
    """The options patch an options block asks for.

    A numeric 0 means "server default", as in Iggy, and is the same as leaving the key
    out. Unknown keys are refused, as Iggy refuses them.

    Raises:
        StateError: ``UNSUPPORTED_OPTION_KEY`` or ``INVALID_OPTION_VALUE``.
    """
    values: dict[str, Any] = {}
    enforced = False
    for option in options:
        field = _TOPIC_OPTION_KEYS.get(option.key)
        if field is None and option.key != ENFORCE_FSYNC_KEY:
            raise StateError(ErrorCode.UNSUPPORTED_OPTION_KEY, option.key)
        try:
            value = wire.decode_header_value(option.kind, option.value)
        except wire.ProtocolError:
            raise StateError(ErrorCode.INVALID_OPTION_VALUE, option.key) from None
        if field is None:
            # Iggy's key for syncing writes: true asks for at least `persisted`.
            enforced = enforced or _bool_option(option, value)
        elif field in ("durability", "consumer_offset_durability"):
            values[field] = _enum_option(DomainDurability, option, value)
        elif field == "compression":
            values[field] = _enum_option(DomainCompression, option, value)
        elif field == "preallocate_segments":
            values[field] = _bool_option(option, value)
        else:
            number = _number_option(field, option, value)
            if number != 0:
                values[field] = number
    if enforced:
        # Stronger than any durability it meets: the official SDK always sends one.
        values["durability"] = DomainDurability.PERSISTED
    return TopicOptionsPatch(**values)


ENFORCE_FSYNC_KEY: Final = "enforce_fsync"
"""Iggy's topic option for syncing each write. true makes the topic's durability
``persisted`` (a send is acknowledged once a quorum synced it), whatever ``durability``
says, since the official SDK sends ``durability`` on every create; false leaves
``durability`` to decide. Reported as ``durability``."""


_EXPIRY_NEVER_WORDS: Final = frozenset({"unlimited", "none", "None", "Unlimited", "never_expire"})
_SERVER_DEFAULT_WORDS: Final = frozenset({"default", "server_default", "Default", "Server_default"})
_SIZE_ZERO_WORDS: Final = frozenset({"0", "unlimited", "Unlimited", "none", "None"})
_SIZE_FIELDS: Final = frozenset(
    {"max_topic_size_bytes", "segment_size_bytes", "size_of_messages_required_to_save_bytes"}
)
_DURATION_SECONDS_MAX: Final = (1 << 32) - 1
"""Iggy's bound on an expiry given as text: u32::MAX seconds."""


def _bool_option(option: wire.OptionEntry, value: object) -> bool:
    """A Bool, or the text ``true`` / ``false`` (exactly, as Rust parses a bool)."""
    if option.kind == wire.HeaderKind.BOOL and isinstance(value, bool):
        return value
    if option.kind == wire.HeaderKind.STRING and value in ("true", "false"):
        return value == "true"
    raise StateError(ErrorCode.INVALID_OPTION_VALUE, option.key)


def _number_option(field: str, option: wire.OptionEntry, value: object) -> int:
    """An unsigned integer option, given typed or as text the way Iggy reads it: a
    duration for the expiry, a byte size for sizes, digits for a count. 0 means the server
    default."""
    if option.kind in _UNSIGNED_KINDS and isinstance(value, int):
        return value
    if option.kind != wire.HeaderKind.STRING or not isinstance(value, str):
        raise StateError(ErrorCode.INVALID_OPTION_VALUE, option.key)
    parsed = _number_from_text(field, value)
    if parsed is None:
        raise StateError(ErrorCode.INVALID_OPTION_VALUE, option.key)
    return parsed


def _number_from_text(field: str, text: str) -> int | None:
    if field == "message_expiry_us":
        if text in _EXPIRY_NEVER_WORDS:
            return EXPIRY_NEVER
        if text in _SERVER_DEFAULT_WORDS:
            return 0
        micros = parse_duration_us(text)
        if micros is None or micros // 1_000_000 > _DURATION_SECONDS_MAX:
            return None
        return micros
    if field == "max_topic_size_bytes":
        if text == "unlimited":
            return SIZE_UNLIMITED
        if text == "server_default":
            return 0
    if field in _SIZE_FIELDS:
        return 0 if text in _SIZE_ZERO_WORDS else parse_size_bytes(text)
    # A count: digits, as Rust parses a u32 (a leading + allowed).
    digits = text[1:] if text.startswith("+") else text
    if not digits.isascii() or not digits.isdigit() or int(digits) > U32_MAX:
        return None
    return int(digits)


def _enum_option(
    kind: type[DomainDurability] | type[DomainCompression],
    option: wire.OptionEntry,
    value: object,
) -> DomainDurability | DomainCompression:
    if option.kind != wire.HeaderKind.STRING or not isinstance(value, str):
        raise StateError(ErrorCode.INVALID_OPTION_VALUE, option.key)
    try:
        return kind(value.lower())
    except ValueError:
        raise StateError(ErrorCode.INVALID_OPTION_VALUE, option.key) from None


def topic_option_entries(
    options: TopicOptions, names: Sequence[str]
) -> tuple[wire.OptionEntry, ...]:
    """Option entries for ``names``, in the wire's (sorted) key order, kinds as the SDK
    sends them."""
    entries: list[wire.OptionEntry] = []
    for name in sorted(names, key=lambda field: WIRE_KEY_BY_FIELD[field]):
        key = WIRE_KEY_BY_FIELD[name]
        value = getattr(options, name)
        if isinstance(value, DomainDurability | DomainCompression):
            entries.append(wire.OptionEntry.of(key, value.value, wire.HeaderKind.STRING))
        elif isinstance(value, bool):
            entries.append(wire.OptionEntry.of(key, value, wire.HeaderKind.BOOL))
        elif name == "messages_required_to_save":
            entries.append(wire.OptionEntry.of(key, value, wire.HeaderKind.UINT32))
        else:
            entries.append(wire.OptionEntry.of(key, value, wire.HeaderKind.UINT64))
    return tuple(entries)
