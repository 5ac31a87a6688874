"""Option values written as text: durations ("7 days") and sizes ("1 GiB"), as Iggy reads them.

Purpose: Iggy's clients send topic options as strings as readily as typed values (the
official SDK sends every value of ``options=`` as a string), so ``"7 days"``, ``"128 MiB"``
and ``"true"`` must mean what they mean to Iggy's server. These are the parsers; the
topic option rules that use them live in ``broker.state.options``.

Invariants:

1. A duration is one or more ``<number><unit>`` terms, spaces allowed between and within
   terms, summed: ``"1h 30m"``, ``"7 days"``, ``"15days 2min 2s"``. Numbers are whole;
   units are humantime's (ns, us, ms, s, m, h, d, w, M = 30.44 days, y = 365.25 days, with
   their long forms). Anything else is refused.
2. A size is a number (whole or decimal) with an optional unit: B, decimal kB/KB, MB, GB,
   TB, PB, EB (powers of 1,000) or binary KiB, MiB, GiB, TiB, PiB, EiB (powers of 1,024),
   units case-insensitive, space optional: ``"1 GiB"``, ``"128MiB"``, ``"1.5 GB"``,
   ``"4096"``. The result is whole bytes (a fraction is cut) and fits a u64.
3. Refusals are ``None`` results, never exceptions: the caller names the option.
4. Pure: no clock; the same text always gives the same value.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Final

U64_MAX: Final = (1 << 64) - 1

_UNITS: Final = (
    (("nsec", "ns"), 0),  # below a microsecond: summed apart, then whole µs kept
    (("usec", "us", "\u00b5s"), 1),
    (("msec", "ms"), 1_000),
    (("seconds", "second", "secs", "sec", "s"), 1_000_000),
    (("minutes", "minute", "mins", "min", "m"), 60_000_000),
    (("hours", "hour", "hrs", "hr", "h"), 3_600_000_000),
    (("days", "day", "d"), 86_400_000_000),
    (("weeks", "week", "w"), 7 * 86_400_000_000),
    (("months", "month", "M"), 2_630_016_000_000),  # 30.44 days, as humantime
    (("years", "year", "y"), 31_557_600_000_000),  # 365.25 days, as humantime
)
_US_PER: Final = {name: us for names, us in _UNITS for name in names}
_NANOS: Final = frozenset({"nsec", "ns"})
_TERM: Final = re.compile(r"\s*(\d+)\s*([A-Za-z\u00b5]+)\s*")

_SIZE: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")
_BYTES_PER: Final[dict[str, int]] = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "pb": 1000**5,
    "eb": 1000**6,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    "pib": 1024**5,
    "eib": 1024**6,
}


def parse_duration_us(text: str) -> int | None:
    """The microseconds a humantime duration stands for (invariant 1), or None."""
    position, total, nanos, terms = 0, 0, 0, 0
    while position < len(text):
        match = _TERM.match(text, position)
        if match is None:
            return None
        number, unit = int(match.group(1)), match.group(2)
        per = _US_PER.get(unit)
        if per is None:
            return None
        if unit in _NANOS:
            nanos += number
        else:
            total += number * per
        position, terms = match.end(), terms + 1
    if terms == 0:
        return None
    return total + nanos // 1000


def parse_size_bytes(text: str) -> int | None:
    """The bytes a size stands for (invariant 2), or None."""
    match = _SIZE.fullmatch(text)
    if match is None:
        return None
    per = _BYTES_PER.get(match.group(2).lower())
    if per is None:
        return None
    try:
        size = int(Decimal(match.group(1)) * per)
    except InvalidOperation:
        return None
    return size if size <= U64_MAX else None
