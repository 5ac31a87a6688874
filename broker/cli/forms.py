"""The argument forms of the ``iggy`` CLI that the ``viewstream`` CLI takes as they are.

Purpose: parse, without any IO, what an operator types for a user's permissions
(``--global-permissions m_srv,r_usr`` and ``--stream-permissions 2:r_str#1:s_msg``),
for a personal access token's expiry (``15days 2min 2s``, ``none``), and print
permissions back in the same words, so the admin commands (:mod:`broker.cli.admin`)
deal in :class:`sdk.wire.Permissions` and seconds only.

Invariants:

1. A parser accepts exactly Iggy's long names (those of ``sdk.wire``'s permission
   fields) and its short names, and raises ``ValueError`` with the offending word for
   anything else; it never guesses.
2. ``describe_permissions(parse(...))`` names every flag that was set and no other.
3. An expiry is ``None`` (never expires) or a positive number of seconds within
   ``EXPIRY_S_MAX``.

Theory of operation: a stream entry is ``STREAM_ID[:FLAGS][#TOPIC_ID[:FLAGS]]...``;
split on ``#`` into the stream part and its topic parts, then each part on ``:`` into an
id and a comma-separated flag list. Durations are ``<number><unit>`` terms, each unit
one of humantime's (``s``, ``min``, ``h``, ``day``, ``week``, ... and their plurals),
summed.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Final

from sdk.wire import GlobalPermissions, Permissions, StreamPermissions, TopicPermissions

GLOBAL_SHORT: Final = {
    "m_srv": "manage_servers",
    "r_srv": "read_servers",
    "m_usr": "manage_users",
    "r_usr": "read_users",
    "m_str": "manage_streams",
    "r_str": "read_streams",
    "m_top": "manage_topics",
    "r_top": "read_topics",
    "p_msg": "poll_messages",
    "s_msg": "send_messages",
}
STREAM_SHORT: Final = {
    "m_str": "manage_stream",
    "r_str": "read_stream",
    "m_top": "manage_topics",
    "r_top": "read_topics",
    "p_msg": "poll_messages",
    "s_msg": "send_messages",
}
TOPIC_SHORT: Final = {
    "m_top": "manage_topic",
    "r_top": "read_topic",
    "p_msg": "poll_messages",
    "s_msg": "send_messages",
}
_GLOBAL_FLAGS: Final = tuple(f.name for f in fields(GlobalPermissions))
_STREAM_FLAGS: Final = tuple(STREAM_SHORT.values())
_TOPIC_FLAGS: Final = tuple(TOPIC_SHORT.values())
assert set(GLOBAL_SHORT.values()) == set(_GLOBAL_FLAGS)
assert set(_STREAM_FLAGS) < {f.name for f in fields(StreamPermissions)}
assert set(_TOPIC_FLAGS) < {f.name for f in fields(TopicPermissions)}

EXPIRY_S_MAX: Final = 100 * 365 * 86_400
"""A century: beyond it an expiry is a typo (``none`` says "never")."""

_UNIT_S: Final = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86_400),
    **dict.fromkeys(("w", "week", "weeks"), 7 * 86_400),
    **dict.fromkeys(("M", "month", "months"), 2_630_016),  # humantime's 30.44 days
    **dict.fromkeys(("y", "year", "years"), 31_557_600),  # and 365.25 days
}
_TERM: Final = re.compile(r"\s*([0-9]+)\s*([A-Za-z]+)\s*")


def _flags(text: str, short: dict[str, str], allowed: tuple[str, ...], what: str) -> set[str]:
    chosen: set[str] = set()
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        name = short.get(word, word)
        if name not in allowed:
            raise ValueError(
                f"unknown {what} permission {word!r}; choose from "
                + ", ".join(f"{long} / {abbr}" for abbr, long in short.items())
            )
        chosen.add(name)
    return chosen


def _id(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"a {what} id in permissions is a number, not {text!r}") from None
    if not 0 < value < 1 << 32:
        raise ValueError(f"{what} id {value} is out of range")
    return value


def parse_global_permissions(text: str) -> GlobalPermissions:
    """``manage_servers,r_usr,...`` (Iggy's long or short names) as the global flags."""
    chosen = _flags(text, GLOBAL_SHORT, _GLOBAL_FLAGS, "global")
    return GlobalPermissions(**dict.fromkeys(chosen, True))


def _topic_permissions(text: str) -> TopicPermissions:
    topic, _, flags = text.partition(":")
    chosen = _flags(flags, TOPIC_SHORT, _TOPIC_FLAGS, "topic")
    return TopicPermissions(_id(topic, "topic"), **dict.fromkeys(chosen, True))


def parse_stream_permissions(text: str) -> StreamPermissions:
    """``STREAM_ID[:FLAGS][#TOPIC_ID[:FLAGS]]...`` as one stream's entry."""
    stream_part, *topic_parts = text.split("#")
    stream, _, flags = stream_part.partition(":")
    chosen = _flags(flags, STREAM_SHORT, _STREAM_FLAGS, "stream")
    topics = tuple(_topic_permissions(part) for part in topic_parts)
    if len({t.topic_id for t in topics}) != len(topics):
        raise ValueError(f"a topic appears twice in {text!r}")
    return StreamPermissions(_id(stream, "stream"), topics=topics, **dict.fromkeys(chosen, True))


def parse_permissions(global_text: str | None, stream_texts: list[str]) -> Permissions | None:
    """The permission set of ``--global-permissions`` and ``--stream-permissions``;
    ``None`` (no permissions at all) when neither was given, as Iggy reads it."""
    if global_text is None and not stream_texts:
        return None
    global_ = parse_global_permissions(global_text or "")
    streams = tuple(parse_stream_permissions(text) for text in stream_texts)
    if len({s.stream_id for s in streams}) != len(streams):
        raise ValueError("a stream appears twice in --stream-permissions")
    return Permissions(global_, streams)


def _set_flags(value: object, names: tuple[str, ...]) -> str:
    chosen = [name for name in names if getattr(value, name)]
    return ",".join(chosen) if chosen else "none"


def describe_permissions(permissions: Permissions | None) -> list[str]:
    """One line for the global flags and one per stream and topic, in Iggy's long names."""
    if permissions is None:
        return ["permissions: none"]
    lines = [f"global: {_set_flags(permissions.global_, _GLOBAL_FLAGS)}"]
    for stream in permissions.streams:
        lines.append(f"stream {stream.stream_id}: {_set_flags(stream, _STREAM_FLAGS)}")
        lines += [
            f"  topic {topic.topic_id}: {_set_flags(topic, _TOPIC_FLAGS)}"
            for topic in stream.topics
        ]
    return lines


def parse_expiry(text: str | None) -> float | None:
    """``15days 2min 2s``, ``1day``, ``3weeks`` in seconds; ``None`` or ``none``: never."""
    if text is None or text.strip().lower() in ("none", "never", ""):
        return None
    position, total = 0, 0
    while position < len(text):
        match = _TERM.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(f"{text!r} is not a duration like '15days 2min 2s' or 'none'")
        unit = match.group(2)
        seconds = _UNIT_S.get(unit, _UNIT_S.get(unit.lower()))
        if seconds is None:
            raise ValueError(f"unknown unit {unit!r} in {text!r}")
        total += int(match.group(1)) * seconds
        position = match.end()
    if not 0 < total <= EXPIRY_S_MAX:
        raise ValueError(f"an expiry is more than 0 s and at most 100 years, not {text!r}")
    return float(total)
