"""GET_SNAPSHOT_FILE (11) against a real node: a zip of the node's diagnostics, as Iggy's
server answers it, with Iggy's codes for requests it refuses."""

from __future__ import annotations

import io
import json
import zipfile

from sdk import wire
from sdk.wire import CommandCode, IggyErrorCode, SnapshotCompression, SnapshotSection
from tests.runtime.processes import ROOT_PASSWORD, NodeProcess
from tests.wire_client import WireClient


def _snapshot(client: WireClient, compression: int, *sections: int) -> wire.Frame:
    return client.call_raw(
        int(CommandCode.GET_SNAPSHOT_FILE), wire.GetSnapshot(compression, sections).encode()
    )


def test_snapshot_of_all_is_a_zip_of_the_nodes_disk_counters_and_settings(
    node: NodeProcess,
) -> None:
    with WireClient(node.address) as client:
        client.login("iggy", ROOT_PASSWORD)
        client.call(CommandCode.CREATE_STREAM, wire.CreateStream("snapshot"))
        reply = _snapshot(client, SnapshotCompression.DEFLATED, SnapshotSection.ALL)
        assert reply.reply_header().status == 0
        with zipfile.ZipFile(io.BytesIO(bytes(reply.body))) as archive:
            assert archive.testzip() is None
            assert archive.namelist() == [
                "filesystem_overview.txt",
                "resource_usage.txt",
                "server_config.txt",
            ]
            assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
            config = json.loads(archive.read("server_config.txt"))
            usage = json.loads(archive.read("resource_usage.txt"))
            disk = archive.read("filesystem_overview.txt").decode()
        assert config["cluster_name"] == "viewstream"
        assert config["root_password"] == "**********"  # a secret never leaves the node
        assert ROOT_PASSWORD not in json.dumps(config)
        assert usage["stats"]["streams_count"] == 1
        assert usage["groups"]  # the per-group counters of `viewstream stats`
        assert "free_disk_space_bytes: " in disk


def test_snapshot_sections_are_the_ones_asked_for_stored_when_asked(node: NodeProcess) -> None:
    with WireClient(node.address) as client:
        client.login("iggy", ROOT_PASSWORD)
        reply = _snapshot(client, SnapshotCompression.STORED, 4, 2, 4)  # test, processes, test
        with zipfile.ZipFile(io.BytesIO(bytes(reply.body))) as archive:
            assert archive.namelist() == ["test.txt"]  # no process list: we run no `ps`
            assert archive.infolist()[0].compress_type == zipfile.ZIP_STORED
            assert archive.read("test.txt") == b"test\n"


def test_bad_snapshot_requests_get_iggys_codes_and_keep_the_connection(
    node: NodeProcess,
) -> None:
    with WireClient(node.address) as client:
        client.login("iggy", ROOT_PASSWORD)
        for compression, sections, status in (
            (9, (4,), IggyErrorCode.INVALID_COMMAND),  # no such compression
            (2, (7,), IggyErrorCode.INVALID_COMMAND),  # no such section
            (2, (100, 4), IggyErrorCode.INVALID_COMMAND),  # all beside another
            (SnapshotCompression.XZ, (4,), IggyErrorCode.FEATURE_UNAVAILABLE),
        ):
            reply = _snapshot(client, compression, *sections)
            assert reply.reply_header().status == status, (compression, sections)
        short = client.call_raw(int(CommandCode.GET_SNAPSHOT_FILE), bytes([2, 3, 4]))
        assert short.reply_header().status == IggyErrorCode.INVALID_COMMAND
        client.ping()
