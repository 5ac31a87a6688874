"""What a benchmark kind runs: its actors, the streams, topic and groups they use.

Purpose: a pure function from :class:`~bench.load.params.BenchParams` to a :class:`Plan`,
so the layout of every kind is stated in one place and tested without a server.

Layout (iggy-bench's): streams ``bench-stream-1 .. bench-stream-S``, each with one topic
``topic-1`` of ``partitions`` partitions (0-based ids) and the run's durability; consumer
groups ``cg-1 .. cg-G``, group ``g`` on stream ``g``.

* pinned kinds (``pp``, ``pc``, ``ppc``, ``e2e``): actor ``i`` of a role uses stream
  ``i`` and partition 0;
* ``bp``: producer ``i`` writes stream ``i mod S`` with balanced partitioning (the
  client's round robin over the partitions);
* ``bcg``: consumer ``i`` polls as a member of group ``i mod G``;
* ``bpcg``: both at once;
* ``e2ecg``: producing consumer ``i`` joins group ``i mod G`` and writes partition
  ``(i div G) mod partitions`` of its group's stream and polls whatever partitions the
  group assigns it (join order decides which), so with one partition per member each
  member reads back one writer's batches, not necessarily its own.

Invariants: actor names are unique; every stream an actor names is in ``streams``;
every group is on a stream of the plan.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from bench.load.params import BenchParams

__all__ = ["TOPIC", "ActorSpec", "Plan", "Role", "make_plan", "stream_name"]

TOPIC = "topic-1"


class Role(enum.Enum):
    """What an actor does; the value names its group in the report."""

    PRODUCER = "producer"
    CONSUMER = "consumer"
    PRODUCING_CONSUMER = "producing_consumer"


def stream_name(index: int) -> str:
    """The name of bench stream ``index`` (1-based, as iggy-bench numbers them)."""
    return f"bench-stream-{index}"


def group_name(index: int) -> str:
    return f"cg-{index}"


@dataclass(frozen=True, slots=True)
class ActorSpec:
    """One actor.

    Attributes:
        name: ``producer-1``, ``consumer-3``, ``producing_consumer-2`` (1-based).
        role: What it does.
        index: Its 1-based number among actors of its role.
        stream: The stream it writes or reads.
        partition: The partition it writes or polls; ``None``: balanced (producers) or
            assigned by its consumer group.
        group: The consumer group it polls in, if any.
        end_to_end: Its latency is ``now - origin_timestamp`` (see ``metrics``).
        rate_bytes_per_s: Its share of ``--rate-limit``, if any.
    """

    name: str
    role: Role
    index: int
    stream: str
    partition: int | None
    group: str | None
    end_to_end: bool
    rate_bytes_per_s: float | None


@dataclass(frozen=True, slots=True)
class Plan:
    """The layout of one run.

    Attributes:
        streams: Stream names, in creation order.
        partitions: Partitions of each stream's topic.
        groups: ``(group, stream)`` pairs to create.
        actors: Every actor.
        batches_per_actor: Batches each actor sends (producers, producing consumers) or
            polls (consumers of consumer-only kinds).
        preload_messages: Messages to write into each stream before the run
            (consumer-only kinds), spread evenly over its partitions.
    """

    streams: tuple[str, ...]
    partitions: int
    groups: tuple[tuple[str, str], ...]
    actors: tuple[ActorSpec, ...]
    batches_per_actor: int
    preload_messages: dict[str, int]


def make_plan(params: BenchParams) -> Plan:
    """The plan of ``params`` (which must be :meth:`~BenchParams.resolved`)."""
    kind = params.kind
    streams = tuple(stream_name(i + 1) for i in range(params.stream_count))
    groups = tuple(
        (group_name(g + 1), streams[g % len(streams)]) for g in range(params.group_count)
    )
    batches = params.batches_per_actor()
    rate = params.rate_limit_bytes_per_s
    writers = params.producer_count + params.producing_consumer_count
    consumers = params.consumer_count
    writer_rate = rate / writers if rate is not None and writers else None
    if rate is not None and consumers:
        share = rate / consumers
        consumer_rate: float | None = share * (params.read_amplification if writers else 1.0)
    else:
        consumer_rate = None
    actors: list[ActorSpec] = []
    for i in range(params.producer_count):
        actors.append(
            ActorSpec(
                name=f"producer-{i + 1}",
                role=Role.PRODUCER,
                index=i + 1,
                stream=streams[i % len(streams)],
                partition=0 if kind.pinned else None,
                group=None,
                end_to_end=False,
                rate_bytes_per_s=writer_rate,
            )
        )
    end_to_end = kind.has_producers
    for i in range(params.consumer_count):
        if kind.uses_groups:
            group, stream = groups[i % len(groups)]
            partition: int | None = None
        else:
            group, stream, partition = None, streams[i % len(streams)], 0
        actors.append(
            ActorSpec(
                name=f"consumer-{i + 1}",
                role=Role.CONSUMER,
                index=i + 1,
                stream=stream,
                partition=partition,
                group=group,
                end_to_end=end_to_end,
                rate_bytes_per_s=consumer_rate,
            )
        )
    for i in range(params.producing_consumer_count):
        if kind.uses_groups:
            group, stream = groups[i % len(groups)]
            partition = (i // len(groups)) % params.partition_count
        else:
            group, stream, partition = None, streams[i % len(streams)], 0
        actors.append(
            ActorSpec(
                name=f"producing_consumer-{i + 1}",
                role=Role.PRODUCING_CONSUMER,
                index=i + 1,
                stream=stream,
                partition=partition,
                group=group,
                end_to_end=True,
                rate_bytes_per_s=writer_rate,
            )
        )
    return Plan(
        streams=streams,
        partitions=params.partition_count,
        groups=groups,
        actors=tuple(actors),
        batches_per_actor=batches,
        preload_messages=_preload(params, streams, actors, batches),
    )


def _preload(
    params: BenchParams, streams: tuple[str, ...], actors: list[ActorSpec], batches: int
) -> dict[str, int]:
    """Messages each stream needs before a consumer-only run: enough for every reader's
    batches, plus one batch per partition of slack for uneven group assignments."""
    if not params.kind.needs_preload:
        return {}
    per_actor = math.ceil(batches * params.messages_per_batch.mean)
    need: dict[str, int] = dict.fromkeys(streams, 0)
    if params.kind.uses_groups:
        members: dict[tuple[str, str], int] = {}
        for actor in actors:
            assert actor.group is not None
            key = (actor.group, actor.stream)
            members[key] = members.get(key, 0) + 1
        for (_, stream), count in members.items():
            need[stream] = max(need[stream], count * per_actor)
        slack = params.partition_count * params.messages_per_batch.high
    else:
        for actor in actors:  # each pinned consumer reads its stream from offset 0
            need[actor.stream] = max(need[actor.stream], per_actor)
        slack = 0
    return {stream: count + slack for stream, count in need.items() if count}
