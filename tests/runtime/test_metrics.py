"""Prometheus metrics of a real node (in this process, on real sockets and files) while
clients load it, scraped over its HTTP listener (``GET /metrics``): the counters move as
the load does, and every series is documented.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio
from prometheus_client.parser import text_string_to_metric_families

from broker.runtime.config import load_config
from broker.runtime.metrics import metric_help, metric_names
from broker.runtime.node import Node
from sdk import AsyncClient, ClientConfig, ConsumerRef, Partitioning, PollingStrategy
from sdk.errors import IggyError
from sdk.wire import IggyErrorCode
from tests.runtime.processes import ROOT_PASSWORD

ROOT = Path(__file__).resolve().parents[2]
BATCHES = 40
BATCH_MESSAGES = 25
PARTITIONS = 3
TIMEOUT_S = 120.0

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(node: Node) -> Samples:
    """One scrape of ``GET /metrics`` on ``node``'s HTTP listener, as Prometheus scrapes
    it (no token: the route is public, as Iggy's), parsed as Prometheus parses it."""
    assert node.http_address is not None
    stream = await trio.open_tcp_stream(*node.http_address)
    async with stream:
        await stream.send_all(
            b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        response = bytearray()
        while chunk := await stream.receive_some(65536):
            response += chunk
    head, _, body = bytes(response).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 200"), lines[0]
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    assert int(headers["content-length"]) == len(body)
    samples: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))


@asynccontextmanager
async def running_node(data_dir: Path) -> AsyncIterator[Node]:
    config = load_config(
        address="127.0.0.1:0",
        http_address="127.0.0.1:0",
        ws_address="",
        data_dir=data_dir,
        root_password=ROOT_PASSWORD,
        no_sync=True,
        password_hash_cost_log2=10,
    )
    node = Node(config, announce=lambda _: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        try:
            yield node
        finally:
            node.request_shutdown()
            with trio.fail_after(30):
                await node.stopped.wait()


def client_config(node: Node) -> ClientConfig:
    assert node.address is not None
    address = f"{node.address[0]}:{node.address[1]}"
    return ClientConfig.one_node(address, username="iggy", password=ROOT_PASSWORD, timeout_s=30)


def test_metrics_move_with_the_load_and_messages_in_equal_messages_sent(tmp_path: Path) -> None:
    async def main() -> tuple[Samples, Samples, list[Samples]]:
        async with running_node(tmp_path / "data") as node:
            before = await scrape(node)
            during: list[Samples] = []
            async with AsyncClient(client_config(node)) as client:
                await client.create_stream("load")
                await client.create_topic("load", "t", PARTITIONS)
                loaded = trio.Event()

                async def load() -> None:
                    for batch in range(BATCHES):
                        messages = [f"m{batch}-{i}".encode() for i in range(BATCH_MESSAGES)]
                        partition = Partitioning.partition_id(batch % PARTITIONS)
                        await client.send_messages("load", "t", messages, partition)
                    loaded.set()

                async def scrape_meanwhile() -> None:
                    while not loaded.is_set():
                        during.append(await scrape(node))
                        await trio.sleep(0.01)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(load)
                    nursery.start_soon(scrape_meanwhile)
                polled = await client.poll_messages(
                    "load",
                    "t",
                    consumer=ConsumerRef.single(1),
                    polling_strategy=PollingStrategy.first(),
                    count=10,
                    partition_id=0,
                )
                assert len(polled.messages) == 10
                # A business rejection: the stream exists already.
                try:
                    await client.create_stream("load")
                except IggyError:
                    pass
                else:
                    raise AssertionError("a second stream of the same name was created")
            # A refusal before execution: a login with a wrong password.
            wrong = ClientConfig.one_node(
                str(client_config(node).seeds[0]), username="iggy", password="wrong"
            )
            try:
                async with AsyncClient(wrong):
                    pass
            except IggyError:
                pass
            after = await scrape(node)
            return before, after, during

    before, after, during = trio.run(main)
    sent = BATCHES * BATCH_MESSAGES
    # Messages in: every message sent, once, in the partitions' groups (one node: the
    # primary's count is the only one).
    partitions = [
        labels["group"]
        for (name, items), _ in after.items()
        if name == "viewstream_group_info" and (labels := dict(items))["kind"] == "partition"
    ]
    assert len(partitions) == PARTITIONS
    in_partitions = sum(
        total(after, "viewstream_group_prepare_messages_total", group=g) for g in partitions
    )
    assert in_partitions == sent
    assert total(before, "viewstream_group_prepare_messages_total") == 0
    sends = total(after, "viewstream_request_duration_seconds_count", command="SEND_MESSAGES")
    assert sends == BATCHES
    assert total(after, "viewstream_request_duration_seconds_count", command="POLL_MESSAGES") == 1
    # Each partition group is a series of its own, labelled with its ids.
    group_of = {
        labels["partition"]: labels["group"]
        for (name, items), _ in after.items()
        if name == "viewstream_group_info" and (labels := dict(items))["kind"] == "partition"
    }
    per_partition = [
        total(after, "viewstream_group_prepare_messages_total", group=group_of[str(p)])
        for p in range(PARTITIONS)
    ]
    batches = [len(range(p, BATCHES, PARTITIONS)) for p in range(PARTITIONS)]
    assert per_partition == [b * BATCH_MESSAGES for b in batches]
    retained = [
        total(after, "viewstream_group_retained_messages", group=group_of[str(p)])
        for p in range(PARTITIONS)
    ]
    assert retained == per_partition
    heads = [
        total(after, "viewstream_group_current_offset", group=group_of[str(p)])
        for p in range(PARTITIONS)
    ]
    assert heads == [count - 1 for count in per_partition]
    # The counters only grew while they were scraped under load, and ended where the
    # final scrape says.
    series = "viewstream_group_prepare_messages_total"
    seen = [total(s, series) for s in during] + [total(after, series)]
    assert seen == sorted(seen) and len(during) >= 1
    received = [total(s, "viewstream_client_received_bytes_total") for s in during]
    assert received == sorted(received)
    assert total(after, "viewstream_client_received_bytes_total") > sent * 48
    assert total(after, "viewstream_connections_accepted_total") >= 2
    commits = sum(total(after, "viewstream_group_commits_total", group=g) for g in partitions)
    assert commits >= BATCHES
    assert total(after, "viewstream_groups") == 1 + PARTITIONS
    assert total(after, "viewstream_group_primary") == 1 + PARTITIONS
    assert total(after, "viewstream_disk_used_bytes") > 0
    exists = int(IggyErrorCode.STREAM_NAME_ALREADY_EXISTS)
    assert total(after, "viewstream_requests_rejected_total", code=str(exists)) == 1
    # The wrong password: the login is answered with an eviction, as Iggy does.
    reason = "invalid_credentials"
    assert total(after, "viewstream_evictions_total", reason=reason) == 1
    assert total(after, "viewstream_requests_refused_total") == 0


def test_every_metric_is_documented_with_its_help() -> None:
    operations = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    missing = [
        name
        for name, help_text in metric_help().items()
        if f"`{name}`" not in operations or f"| {help_text} |" not in operations
    ]
    assert missing == []


def test_the_dashboard_uses_only_metrics_the_node_renders() -> None:
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text("utf-8"))
    expressions = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    ]
    used = {
        re.sub(r"_(bucket|count|sum)$", "", name)
        for expr in expressions
        for name in re.findall(r"viewstream_[a-z_]+", expr)
    }
    assert len(expressions) >= 10
    assert used - set(metric_names()) == set()
