"""GET_SNAPSHOT_FILE: which diagnostics a request gets, and the zip archive that carries them.

Purpose: Iggy's server answers GET_SNAPSHOT_FILE with a zip archive of diagnostics, one
text file per section asked for (``core/server/src/snapshot.rs``). This module judges a
request as Iggy's server judges it, says which sections this node fills, and builds the
archive from the texts the node gathered, so the runtime only collects facts it already
holds (its configuration, its counters, its disk) and sends the bytes.

Invariants:

1. A request is judged as Iggy judges it: a compression or section code Iggy does not
   define, or ``ALL`` beside another section, is ``INVALID_COMMAND`` (3). A compression
   Iggy defines that this node cannot write (Zstd and Xz: Python's ``zipfile`` has
   neither) is ``FEATURE_UNAVAILABLE`` (5), never silently replaced by another.
2. Sections this node has no source for are left out of the archive, as Iggy leaves out
   a section it failed to capture: the process list and the server logs (a node runs no
   shell commands and logs to its standard streams, which the operator's supervisor
   keeps). ``ALL`` is Iggy's list (every section but ``TEST``), filled where we can.
3. Each section is one file, named as Iggy names it (``server_config.txt``), at most once
   however often the request names it, in the order first named.
4. An archive above :data:`SNAPSHOT_ARCHIVE_BYTES_MAX` is refused with
   ``SNAPSHOT_FILE_COMPLETION_FAILED`` (9000), Iggy's answer to an archive its frame
   cannot carry, and nothing is sent.
5. Pure: the texts and the archive's timestamp are inputs; the same inputs give the same
   bytes.
"""

from __future__ import annotations

import datetime
import io
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from broker.state.errors import ErrorCode, StateError
from sdk import wire
from sdk.wire import SnapshotCompression, SnapshotSection

SNAPSHOT_ARCHIVE_BYTES_MAX: Final = 64 * 1024 * 1024 - wire.HEADER_SIZE
"""Largest archive sent: Iggy's clients read frames of at most 64 MiB, header included."""

SECTION_FILES: Final[Mapping[SnapshotSection, str]] = MappingProxyType(
    {
        SnapshotSection.FILESYSTEM_OVERVIEW: "filesystem_overview.txt",
        SnapshotSection.PROCESS_LIST: "process_list.txt",
        SnapshotSection.RESOURCE_USAGE: "resource_usage.txt",
        SnapshotSection.TEST: "test.txt",
        SnapshotSection.SERVER_LOGS: "server_logs.txt",
        SnapshotSection.SERVER_CONFIG: "server_config.txt",
    }
)
"""The file each section is written to, as Iggy names it."""

SECTIONS_OF_ALL: Final = (
    SnapshotSection.FILESYSTEM_OVERVIEW,
    SnapshotSection.PROCESS_LIST,
    SnapshotSection.RESOURCE_USAGE,
    SnapshotSection.SERVER_LOGS,
    SnapshotSection.SERVER_CONFIG,
)
"""What ``ALL`` stands for (Iggy's ``all_snapshot_types``: every section but ``TEST``)."""

SECTIONS_SERVED: Final = frozenset(
    {
        SnapshotSection.FILESYSTEM_OVERVIEW,
        SnapshotSection.RESOURCE_USAGE,
        SnapshotSection.TEST,
        SnapshotSection.SERVER_CONFIG,
    }
)
"""The sections this node fills (invariant 2)."""

TEST_SECTION_TEXT: Final = "test\n"
"""The ``TEST`` section's whole text (Iggy's is the output of ``echo test``)."""

_ZIP_METHODS: Final[Mapping[SnapshotCompression, int | None]] = MappingProxyType(
    {
        SnapshotCompression.STORED: zipfile.ZIP_STORED,
        SnapshotCompression.DEFLATED: zipfile.ZIP_DEFLATED,
        SnapshotCompression.BZIP2: zipfile.ZIP_BZIP2,
        SnapshotCompression.ZSTD: None,
        SnapshotCompression.LZMA: zipfile.ZIP_LZMA,
        SnapshotCompression.XZ: None,
    }
)
"""The ``zipfile`` method of each of Iggy's compressions; None: not writable here."""

_ZIP_EPOCH: Final = datetime.datetime(1980, 1, 1, tzinfo=datetime.UTC)
_UNIX_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
"""The earliest time a zip entry can carry."""


@dataclass(frozen=True, slots=True)
class SnapshotPlan:
    """What a request gets: its sections that this node fills, compressed with ``method``
    (a ``zipfile`` compression constant)."""

    method: int
    sections: tuple[SnapshotSection, ...]


def plan_snapshot(request: wire.GetSnapshot) -> SnapshotPlan:
    """The sections and compression of ``request`` (invariants 1 to 3).

    Raises:
        StateError: ``INVALID_COMMAND`` for a code Iggy does not define or ``ALL`` beside
            another section; ``FEATURE_UNAVAILABLE`` for a compression not writable here.
    """
    try:
        compression = SnapshotCompression(request.compression)
        asked = [SnapshotSection(code) for code in request.sections]
    except ValueError:
        raise StateError(ErrorCode.INVALID_COMMAND) from None
    if SnapshotSection.ALL in asked:
        if len(asked) > 1:
            raise StateError(ErrorCode.INVALID_COMMAND)
        asked = list(SECTIONS_OF_ALL)
    method = _ZIP_METHODS[compression]
    if method is None:
        raise StateError(ErrorCode.FEATURE_UNAVAILABLE)
    sections = tuple(dict.fromkeys(s for s in asked if s in SECTIONS_SERVED))
    return SnapshotPlan(method, sections)


def snapshot_archive(
    plan: SnapshotPlan, texts: Mapping[SnapshotSection, str], now_us: int
) -> bytes:
    """The zip archive of ``plan``'s sections, each from ``texts``, its entries stamped
    ``now_us`` (microseconds since the Unix epoch, UTC).

    Raises:
        StateError: ``SNAPSHOT_FILE_COMPLETION_FAILED`` when the archive would exceed
            :data:`SNAPSHOT_ARCHIVE_BYTES_MAX` (invariant 4).
    """
    assert set(texts) == set(plan.sections), (sorted(texts), plan.sections)
    # Calendar arithmetic on the given instant (no clock, no local time zone).
    stamp = max(_ZIP_EPOCH, _UNIX_EPOCH + datetime.timedelta(microseconds=now_us))
    date_time = (stamp.year, stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for section in plan.sections:
            entry = zipfile.ZipInfo(SECTION_FILES[section], date_time)
            entry.compress_type = plan.method
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, texts[section].encode("utf-8"))
            if buffer.tell() > SNAPSHOT_ARCHIVE_BYTES_MAX:
                raise StateError(ErrorCode.SNAPSHOT_FILE_COMPLETION_FAILED)
    data = buffer.getvalue()
    if len(data) > SNAPSHOT_ARCHIVE_BYTES_MAX:
        raise StateError(ErrorCode.SNAPSHOT_FILE_COMPLETION_FAILED)
    return data
