"""GET_SNAPSHOT_FILE's judgement and archive (broker.core.diagnostics), synchronously."""

from __future__ import annotations

import io
import zipfile

import pytest

from broker.core.diagnostics import (
    SECTION_FILES,
    SECTIONS_SERVED,
    SNAPSHOT_ARCHIVE_BYTES_MAX,
    SnapshotPlan,
    plan_snapshot,
    snapshot_archive,
)
from broker.state.errors import ErrorCode, StateError
from sdk import wire
from sdk.wire import SnapshotCompression, SnapshotSection

NOW_US = 1_800_000_000_000_000  # 2027-01-15


def _texts(plan: SnapshotPlan) -> dict[SnapshotSection, str]:
    return {section: f"{section.name}\n" for section in plan.sections}


def test_all_is_every_section_but_test_filled_where_the_node_has_a_source() -> None:
    plan = plan_snapshot(wire.GetSnapshot(SnapshotCompression.DEFLATED, (SnapshotSection.ALL,)))
    assert plan.method == zipfile.ZIP_DEFLATED
    assert plan.sections == (
        SnapshotSection.FILESYSTEM_OVERVIEW,
        SnapshotSection.RESOURCE_USAGE,
        SnapshotSection.SERVER_CONFIG,
    )


def test_sections_keep_their_first_order_once_each_and_unserved_ones_are_left_out() -> None:
    asked = (6, 4, 2, 6, 5, 4)  # config, test, process list, config, logs, test
    plan = plan_snapshot(wire.GetSnapshot(SnapshotCompression.STORED, asked))
    assert plan.sections == (SnapshotSection.SERVER_CONFIG, SnapshotSection.TEST)
    assert set(plan.sections) <= SECTIONS_SERVED


@pytest.mark.parametrize(
    ("compression", "sections", "code"),
    [
        (0, (4,), ErrorCode.INVALID_COMMAND),  # no such compression
        (7, (4,), ErrorCode.INVALID_COMMAND),
        (2, (0,), ErrorCode.INVALID_COMMAND),  # no such section
        (2, (7,), ErrorCode.INVALID_COMMAND),
        (2, (100, 4), ErrorCode.INVALID_COMMAND),  # all beside another
        (SnapshotCompression.ZSTD, (4,), ErrorCode.FEATURE_UNAVAILABLE),
        (SnapshotCompression.XZ, (4,), ErrorCode.FEATURE_UNAVAILABLE),
    ],
)
def test_a_bad_request_gets_iggys_code(
    compression: int, sections: tuple[int, ...], code: ErrorCode
) -> None:
    with pytest.raises(StateError) as raised:
        plan_snapshot(wire.GetSnapshot(compression, sections))
    assert raised.value.code is code


@pytest.mark.parametrize(
    "compression",
    [
        SnapshotCompression.STORED,
        SnapshotCompression.DEFLATED,
        SnapshotCompression.BZIP2,
        SnapshotCompression.LZMA,
    ],
)
def test_archive_holds_one_named_file_per_section_in_the_asked_compression(
    compression: SnapshotCompression,
) -> None:
    plan = plan_snapshot(wire.GetSnapshot(compression, (6, 4, 3, 1)))
    data = snapshot_archive(plan, _texts(plan), NOW_US)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
        infos = archive.infolist()
        assert [info.filename for info in infos] == [SECTION_FILES[s] for s in plan.sections]
        assert {info.compress_type for info in infos} == {plan.method}
        assert infos[0].date_time[:3] == (2027, 1, 15)
        for section in plan.sections:
            assert archive.read(SECTION_FILES[section]).decode() == f"{section.name}\n"


def test_same_inputs_give_the_same_archive() -> None:
    plan = plan_snapshot(wire.GetSnapshot(SnapshotCompression.DEFLATED, (100,)))
    assert snapshot_archive(plan, _texts(plan), NOW_US) == snapshot_archive(
        plan, _texts(plan), NOW_US
    )


def test_no_section_is_an_empty_archive() -> None:
    plan = plan_snapshot(wire.GetSnapshot(SnapshotCompression.DEFLATED, ()))
    with zipfile.ZipFile(io.BytesIO(snapshot_archive(plan, {}, NOW_US))) as archive:
        assert archive.namelist() == []


def test_an_archive_beyond_the_frame_bound_is_refused_with_9000() -> None:
    plan = SnapshotPlan(zipfile.ZIP_STORED, (SnapshotSection.TEST,))
    huge = {SnapshotSection.TEST: "x" * (SNAPSHOT_ARCHIVE_BYTES_MAX + 1)}
    with pytest.raises(StateError) as raised:
        snapshot_archive(plan, huge, NOW_US)
    assert raised.value.code is ErrorCode.SNAPSHOT_FILE_COMPLETION_FAILED
