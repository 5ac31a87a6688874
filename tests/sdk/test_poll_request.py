"""The core's POLL_MESSAGES body: the same bytes ``PollMessages.encode`` writes, from a
prefix kept per poll target."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sdk._protocol import POLL_PREFIXES_MAX
from sdk.types import ConsumerRef, to_identifier
from sdk.wire import Identifier, PollingKind, PollingStrategy, PollMessages
from tests.sdk.script import make_core

_ids = st.one_of(
    st.integers(min_value=0, max_value=2**32 - 1),
    st.text(alphabet="abcxyz-_.0", min_size=1, max_size=20).filter(lambda s: not s.isdecimal()),
)


@given(
    consumer_id=_ids,
    group=st.booleans(),
    stream=_ids,
    topic=_ids,
    partition=st.one_of(st.none(), st.integers(min_value=0, max_value=2**32 - 1)),
    kind=st.sampled_from(list(PollingKind)),
    value=st.integers(min_value=0, max_value=2**64 - 1),
    count=st.integers(min_value=0, max_value=2**32 - 1),
    auto_commit=st.booleans(),
)
def test_the_poll_body_is_what_poll_messages_encodes_and_stays_so_from_the_cache(
    consumer_id: int | str,
    group: bool,
    stream: int | str,
    topic: int | str,
    partition: int | None,
    kind: PollingKind,
    value: int,
    count: int,
    auto_commit: bool,
) -> None:
    core, _ = make_core()
    consumer = ConsumerRef(consumer_id, group)
    stream_id, topic_id = to_identifier(stream), to_identifier(topic)
    strategy = PollingStrategy(kind, value)
    expected = PollMessages(
        consumer.wire(), stream_id, topic_id, partition, strategy, count, auto_commit
    ).encode()
    for _ in range(2):  # encoded, then from the kept prefix
        body = core._poll_body(
            consumer, stream_id, topic_id, partition, strategy, count, auto_commit
        )
        assert body == expected
    other = PollingStrategy(PollingKind.OFFSET, value // 2)
    assert (
        core._poll_body(consumer, stream_id, topic_id, partition, other, 1, not auto_commit)
        == PollMessages(
            consumer.wire(), stream_id, topic_id, partition, other, 1, not auto_commit
        ).encode()
    )


def test_the_kept_prefixes_are_bounded_and_the_oldest_go_first() -> None:
    core, _ = make_core()
    consumer = ConsumerRef.single(1)
    topic = Identifier.named("events")
    strategy = PollingStrategy.offset(0)
    for stream in range(POLL_PREFIXES_MAX + 5):
        core._poll_body(consumer, Identifier.numeric(stream), topic, 0, strategy, 10, False)
    kept = list(core._poll_prefixes)
    assert len(kept) == POLL_PREFIXES_MAX
    assert kept[0] == (consumer, Identifier.numeric(5), topic, 0)
