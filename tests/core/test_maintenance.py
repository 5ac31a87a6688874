"""The node's own requests (``broker.core.maintenance``)."""

from __future__ import annotations

from broker.core.maintenance import (
    AutoCommits,
    PurgesDue,
    PurgeView,
    RetentionsDue,
    RetentionView,
    root_user_due,
    tokens_expiry_due,
)
from broker.state.credentials import token_hash
from broker.state.metadata import (
    CreatePersonalAccessToken,
    CreateStream,
    Done,
    Durability,
    ExpireTokens,
    MetadataState,
    PartitionRef,
)
from tests.state.helpers import Driver, driver_with_root


def _ref(generation: int) -> PartitionRef:
    return PartitionRef(0, 0, 0, 5, generation, Durability.REPLICATED, Durability.REPLICATED)


def test_only_the_metadata_primary_of_a_cluster_without_users_proposes_the_root() -> None:
    empty = MetadataState()
    assert root_user_due(empty, is_primary=True, bootstrapping=False)
    assert not root_user_due(empty, is_primary=False, bootstrapping=False)
    assert not root_user_due(empty, is_primary=True, bootstrapping=True)  # one at a time
    driver: Driver = driver_with_root()
    driver.as_root(CreateStream("s"))
    assert not root_user_due(driver.state, is_primary=True, bootstrapping=False)


def test_a_committed_purge_is_truncated_once_by_the_primary_until_the_state_caught_up() -> None:
    purges = PurgesDue()
    refs = {7: _ref(2)}
    views: dict[int, PurgeView | None] = {7: PurgeView(None, True)}
    assert purges.due(refs, views.get) == []  # not watched: nothing committed yet
    purges.watch(7)
    assert purges.due(refs, views.get) == []  # still opening
    views[7] = PurgeView(1, False)
    assert purges.due(refs, views.get) == []  # a backup waits for the primary's truncation
    views[7] = PurgeView(1, True)
    assert purges.due(refs, views.get) == [(7, 2)]
    assert purges.due(refs, views.get) == []  # running: not started twice
    purges.finished(7)  # it failed (say, the primary lost its role): try again
    assert purges.due(refs, views.get) == [(7, 2)]
    purges.finished(7)
    views[7] = PurgeView(2, True)
    assert purges.due(refs, views.get) == []
    views[7] = PurgeView(1, True)
    assert purges.due(refs, views.get) == []  # it caught up: no longer watched


def test_a_deleted_or_unhosted_partition_is_no_longer_watched() -> None:
    purges = PurgesDue()
    purges.watch(7)
    purges.watch(8)
    views: dict[int, PurgeView | None] = {7: PurgeView(0, True)}
    assert purges.due({8: _ref(1)}, views.get) == []  # 7 deleted, 8 not hosted here
    assert purges.due({7: _ref(1), 8: _ref(1)}, views.get) == []


def test_auto_commits_run_one_at_a_time_and_keep_each_consumers_newest_offset() -> None:
    commits: AutoCommits[int] = AutoCommits()
    assert commits.add(3, "a", 10)  # start the runner
    assert not commits.add(3, "b", 20)
    assert not commits.add(3, "a", 11)  # a polled again: only its newest offset is stored
    assert commits.add(4, "a", 99)  # another group has its own runner
    assert [commits.next(3), commits.next(3), commits.next(3)] == [11, 20, None]
    assert commits.add(3, "a", 12)  # the runner ended: a new one starts
    commits.stopped(3)  # cancelled before it stored anything
    assert commits.add(3, "b", 21)
    assert [commits.next(3), commits.next(3), commits.next(3)] == [12, 21, None]
    assert commits.next(4) == 99


def test_expired_tokens_are_removed_by_the_primary_once_the_earliest_expiry_passed() -> None:
    driver = driver_with_root()
    driver.as_root(CreatePersonalAccessToken("short", 100, token_hash("a")))
    driver.as_root(CreatePersonalAccessToken("never", 0, token_hash("b")))
    expiry = 1_000 + 10 * (driver.op - 1) + 100
    state = driver.state
    assert not tokens_expiry_due(state, expiry - 1, is_primary=True, expiring=False)
    assert tokens_expiry_due(state, expiry, is_primary=True, expiring=False)
    assert not tokens_expiry_due(state, expiry, is_primary=False, expiring=False)
    assert not tokens_expiry_due(state, expiry, is_primary=True, expiring=True)  # one at a time
    # The op removes what expired at its own timestamp; then nothing is due any more.
    driver.op = expiry  # the driver stamps 1_000 + 10 * op: well past the expiry
    assert driver.apply(ExpireTokens()) == Done()
    assert not tokens_expiry_due(state, 1 << 63, is_primary=True, expiring=False)
    assert [t.name for t in state.personal_access_tokens(driver.root_session)] == ["never"]


PRIMARY = RetentionView(is_primary=True, readable=True)
BUSY = RetentionView(is_primary=True, readable=False)
BACKUP = RetentionView(is_primary=False, readable=True)


def test_retention_looks_at_every_primary_once_an_interval_starting_one_after_the_first() -> None:
    due = RetentionsDue(interval_us=1_000)
    views: dict[int, RetentionView | None] = {3: PRIMARY, 1: PRIMARY, 2: BACKUP}
    listed: list[int] = []

    def hosted() -> list[int]:
        listed.append(0)
        return list(views)

    assert due.due(0, hosted, views.get) == []  # the first look is one interval away
    assert due.due(999, hosted, views.get) == []
    assert listed == []  # nothing listed between intervals
    assert due.due(1_000, hosted, views.get) == [1, 3]  # in group order; the backup never
    assert due.due(1_500, hosted, views.get) == []  # once an interval
    assert due.due(2_000, hosted, views.get) == [1, 3]
    assert len(listed) == 2


def test_a_busy_journal_is_looked_at_on_the_next_pass_and_a_running_proposal_is_not_doubled() -> (
    None
):
    due = RetentionsDue(interval_us=100)
    views: dict[int, RetentionView | None] = {5: BUSY, 6: PRIMARY}
    assert due.due(0, lambda: list(views), views.get) == []
    assert due.due(100, lambda: list(views), views.get) == [6]
    due.proposing(6)
    views[5] = PRIMARY
    assert due.due(110, lambda: list(views), views.get) == [5]  # the next pass, not interval
    assert due.due(120, lambda: list(views), views.get) == []
    assert due.due(200, lambda: list(views), views.get) == [5]  # 6 still proposing
    due.finished(6)
    assert due.due(300, lambda: list(views), views.get) == [5, 6]


def test_a_group_gone_or_no_longer_primary_while_owed_a_look_is_dropped() -> None:
    due = RetentionsDue(interval_us=100)
    views: dict[int, RetentionView | None] = {1: BUSY, 2: BUSY}
    assert due.due(0, lambda: [1, 2], views.get) == []
    assert due.due(100, lambda: [1, 2], views.get) == []
    views[1] = None
    views[2] = BACKUP
    assert due.due(110, lambda: [1, 2], views.get) == []
    views[1] = views[2] = PRIMARY
    assert due.due(150, lambda: [1, 2], views.get) == []  # dropped until the next interval
    assert due.due(200, lambda: [1, 2], views.get) == [1, 2]
