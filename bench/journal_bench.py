"""Journal micro-benchmarks, each beside its raw-IO baseline on the same disk in the same run.

Run ``python -m bench.journal_bench --dir DIR [--size 1G]``. It measures:

1. append+sync of 256 KiB records, with a sync after every record and group commits of 8
   and 64 records, against plain ``os.write`` + ``os.fdatasync`` of the same payloads with
   the same grouping;
2. a sequential read of ``--size`` bytes by offset range (``Journal.read_messages``)
   against plain ``os.pread`` of a copy of the same log in chunks of the same size, from a
   cold page cache (pages dropped with ``posix_fadvise(DONTNEED)``) and from a warm one;
3. the recovery time (``Journal.open``) of one segment of ``--size`` bytes, against a
   plain sequential ``os.pread`` of that segment, cold and warm.

Throughput counts payload (body) bytes for the journal, file bytes for raw reads; the
journal also writes a 128-byte header and a 32-byte index entry per record. Appends and
reads interleave the journal and the raw baseline step by step (a sync group, a range
read), so both meet the same disk and CPU weather: on a shared virtual machine that weather
changes by tens of percent from one second to the next. Appends total ``--runs`` runs,
reads take the median of ``--runs`` passes, recoveries alternate whole passes and take the
median of ``--runs``. The ratio is journal throughput over raw
throughput (for recovery, raw read time over recovery time). Nothing here is asserted:
the figures go in ``docs/journal.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from journal import Journal, JournalConfig, Record
from journal.journal import READ_SIZE_BYTES_MAX, SEGMENT_SIZE_BYTES_MAX
from journal.storage import FileStorage

MIB = 1024 * 1024
RECORD_SIZE_DEFAULT = 256 * 1024
READ_CHUNK_DEFAULT = 16 * MIB
GROUPS = (1, 8, 64)
UNITS = {"K": 1024, "M": MIB, "G": 1024 * MIB}


@dataclass(frozen=True)
class Row:
    """One line of the report."""

    case: str
    journal: float
    raw: float
    unit: str
    higher_is_better: bool = True

    @property
    def ratio(self) -> float:
        if self.higher_is_better:
            return self.journal / self.raw
        return self.raw / self.journal


def parse_size(text: str) -> int:
    """``1G``, ``64M``, ``4096`` -> bytes."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    if text and text[-1] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def drop_cache(path: Path) -> None:
    """Evicts a file's clean pages, so the next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def alternate(
    runs: int, journal: Callable[[], float], raw: Callable[[], float]
) -> tuple[float, float]:
    """Medians of ``runs`` measurements of each, taken in turns (who goes first alternates)."""
    journal_values: list[float] = []
    raw_values: list[float] = []
    for run in range(runs):
        if run % 2 == 0:
            journal_values.append(journal())
            raw_values.append(raw())
        else:
            raw_values.append(raw())
            journal_values.append(journal())
    return statistics.median(journal_values), statistics.median(raw_values)


def fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


# --- Append + sync --------------------------------------------------------------------------


def append_interleaved(
    directory: Path, payload: bytes, count: int, group: int
) -> tuple[float, float]:
    """Seconds for (journal, raw) to write ``count`` records, syncing every ``group``.

    The two take turns, one group of records each (which goes first alternates), so both
    meet the same disk weather; on a shared virtual disk that varies by tens of percent
    from one second to the next, separate runs would mostly measure the weather.
    """
    root = fresh(directory)
    raw_fd = os.open(root / "raw.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    storage = FileStorage(str(root / "journal"))
    journal = Journal.open(storage)
    seconds_raw = 0.0
    seconds_journal = 0.0
    try:
        for turn, first in enumerate(range(0, count, group)):
            last = min(first + group, count)
            for side in (0, 1) if turn % 2 == 0 else (1, 0):
                start = time.perf_counter()
                if side == 0:
                    for _ in range(first, last):
                        os.write(raw_fd, payload)
                    os.fdatasync(raw_fd)
                    seconds_raw += time.perf_counter() - start
                else:
                    for i in range(first, last):
                        journal.append(
                            payload,
                            op=i + 1,
                            view=1,
                            client_id=7,
                            request=i + 1,
                            offset=i,
                            message_count=1,
                            timestamp_us=i,
                        )
                    journal.sync()
                    seconds_journal += time.perf_counter() - start
    finally:
        journal.close()
        storage.close()
        os.close(raw_fd)
        shutil.rmtree(root)
        os.sync()
    return seconds_journal, seconds_raw


# --- Reads and recovery ---------------------------------------------------------------------


def build_journal(directory: Path, payload: bytes, count: int) -> Path:
    """A journal of ``count`` records in one segment (when it fits); returns its log path."""
    storage = FileStorage(str(fresh(directory)))
    journal = Journal.open(storage, JournalConfig(segment_size_bytes_max=SEGMENT_SIZE_BYTES_MAX))
    for i in range(count):
        journal.append(
            payload,
            op=i + 1,
            view=1,
            client_id=7,
            request=i + 1,
            offset=i,
            message_count=1,
            timestamp_us=i,
        )
        if (i + 1) % 64 == 0:
            journal.sync()
    journal.close()
    storage.close()
    logs = sorted(directory.glob("*.log"))
    return logs[0]


def raw_read(path: Path, chunk: int, *, cold: bool) -> tuple[float, float]:
    """(MB/s, seconds) of reading the whole file with os.pread in ``chunk`` pieces."""
    if cold:
        drop_cache(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        start = time.perf_counter()
        position = 0
        while position < size:
            data = os.pread(fd, chunk, position)
            position += len(data)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
    return size / elapsed / 1e6, elapsed


def raw_read_time(path: Path, chunk: int, *, cold: bool) -> float:
    return raw_read(path, chunk, cold=cold)[1]


def read_interleaved(
    directory: Path, raw_path: Path, chunk: int, *, cold: bool
) -> tuple[float, float]:
    """MB/s of (journal, raw) reading the same bytes, ``chunk`` bytes a step, in turns.

    The journal reads its log through ``Journal.read_messages``; raw ``os.pread`` reads a
    byte-for-byte copy of that log (so neither warms the other's cache). Each step the
    journal reads up to ``chunk`` body bytes and raw reads as many bytes as the journal's
    records took on disk; who goes first alternates.
    """
    storage = FileStorage(str(directory))
    journal = Journal.open(storage)
    raw_fd = os.open(raw_path, os.O_RDONLY)
    try:
        if cold:
            drop_cache(raw_path)
            for path in directory.glob("*.log"):
                drop_cache(path)
        seconds_journal = 0.0
        seconds_raw = 0.0
        body_bytes = 0
        disk_bytes = 0
        offset = 0
        position = 0
        step = 0
        while True:
            records: list[Record] = []
            for side in (0, 1) if step % 2 == 0 else (1, 0):
                start = time.perf_counter()
                if side == 0:
                    records = journal.read_messages(offset, count_max=1 << 30, size_max=chunk)
                    seconds_journal += time.perf_counter() - start
                else:
                    # The same span of the copy (the size of a 16 MiB step is near constant,
                    # so reading it before the journal has told us is a fair stand-in).
                    data = os.pread(raw_fd, chunk, position)
                    seconds_raw += time.perf_counter() - start
                    position += len(data)
                    disk_bytes += len(data)
            if not records:
                break
            body_bytes += sum(record.body.nbytes for record in records)
            offset = records[-1].header.offset_next
            step += 1
    finally:
        os.close(raw_fd)
        journal.close()
        storage.close()
    return body_bytes / seconds_journal / 1e6, disk_bytes / seconds_raw / 1e6


def journal_recovery(directory: Path, *, cold: bool) -> float:
    """Seconds Journal.open takes to recover the journal in ``directory``."""
    if cold:
        for path in directory.iterdir():
            drop_cache(path)
    storage = FileStorage(str(directory))
    start = time.perf_counter()
    journal = Journal.open(storage)
    elapsed = time.perf_counter() - start
    assert journal.recovery.tail_truncated_bytes == 0
    assert journal.recovery.indexes_rebuilt == ()
    journal.close()
    storage.close()
    return elapsed


# --- Driver ---------------------------------------------------------------------------------


def run(directory: Path, size: int, record_size: int, chunk: int, runs: int) -> list[Row]:
    payload = os.urandom(record_size)
    count = max(1, size // record_size)
    rows: list[Row] = []
    label = f"{record_size // 1024} KiB"
    for group in GROUPS:
        seconds_journal = 0.0
        seconds_raw = 0.0
        for _ in range(runs):
            journal_s, raw_s = append_interleaved(directory / "append", payload, count, group)
            seconds_journal += journal_s
            seconds_raw += raw_s
        megabytes = len(payload) * count * runs / 1e6
        name = "sync every record" if group == 1 else f"group commit of {group}"
        rows.append(
            Row(
                f"append+sync {label}, {name}",
                megabytes / seconds_journal,
                megabytes / seconds_raw,
                "MB/s",
            )
        )
        print(f"  {rows[-1].case}: {rows[-1].journal:.0f} vs {rows[-1].raw:.0f}", file=sys.stderr)

    built = directory / "read"
    log = build_journal(built, payload, count)
    raw_copy = directory / "raw-copy.log"
    shutil.copyfile(log, raw_copy)
    for cold in (True, False):
        state = "cold cache" if cold else "warm cache"
        if not cold:
            read_interleaved(built, raw_copy, chunk, cold=False)  # Warm both caches once.
        rates = [read_interleaved(built, raw_copy, chunk, cold=cold) for _ in range(runs)]
        journal = statistics.median(rate[0] for rate in rates)
        raw = statistics.median(rate[1] for rate in rates)
        rows.append(Row(f"sequential read by offset range, {state}", journal, raw, "MB/s"))
        print(f"  {rows[-1].case}: {journal:.0f} vs {raw:.0f} MB/s", file=sys.stderr)
    for cold in (True, False):
        state = "cold cache" if cold else "warm cache"
        journal, raw = alternate(
            runs,
            partial(journal_recovery, built, cold=cold),
            partial(raw_read_time, log, 8 * MIB, cold=cold),
        )
        rows.append(
            Row(
                f"recovery of one {log.stat().st_size / MIB:.0f} MiB segment, {state}",
                journal,
                raw,
                "s",
                higher_is_better=False,
            )
        )
        print(f"  {rows[-1].case}: {journal:.3f} vs {raw:.3f} s", file=sys.stderr)
    shutil.rmtree(built, ignore_errors=True)
    raw_copy.unlink()
    return rows


def report(rows: list[Row]) -> str:
    lines = [
        "| case | journal | raw baseline | journal / raw |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        digits = 0 if row.unit == "MB/s" else 3
        lines.append(
            f"| {row.case} | {row.journal:.{digits}f} {row.unit} | "
            f"{row.raw:.{digits}f} {row.unit} | {row.ratio:.0%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--dir", required=True, help="scratch directory on the disk to measure")
    parser.add_argument("--size", default="1G", help="bytes per workload, e.g. 64M or 1G")
    parser.add_argument("--record-size", default="256K", help="record body size")
    parser.add_argument("--read-chunk", default="16M", help="bytes per range read")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    args = parser.parse_args(argv)
    size = parse_size(args.size)
    record_size = parse_size(args.record_size)
    chunk = parse_size(args.read_chunk)
    assert 0 < record_size <= size
    assert 0 < chunk <= READ_SIZE_BYTES_MAX
    assert size <= SEGMENT_SIZE_BYTES_MAX, "recovery is measured on one segment"
    directory = Path(args.dir) / "journal_bench"
    directory.mkdir(parents=True, exist_ok=True)
    usage = shutil.disk_usage(directory)
    print(
        f"journal bench: {size / MIB:.0f} MiB per workload, {record_size // 1024} KiB records, "
        f"{chunk / MIB:.0f} MiB range reads, median of {args.runs}; "
        f"dir {directory} ({usage.free / 1e9:.0f} GB free); "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.platform()}",
        file=sys.stderr,
    )
    try:
        rows = run(directory, size, record_size, chunk, args.runs)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(report(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
