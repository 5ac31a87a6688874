"""Permission rules: implied flags, scopes, and the root set; password hashing."""

from __future__ import annotations

from dataclasses import fields

import pytest

from broker.state.credentials import PasswordHash, hash_password, verify_password
from broker.state.permissions import (
    Action,
    GlobalPermissions,
    Permissions,
    StreamPermissions,
    TopicPermissions,
    canonical,
    permits,
    root_permissions,
)


def test_nothing_is_permitted_without_permissions() -> None:
    for action in Action:
        assert not permits(None, action, 0, 0)
        assert not permits(Permissions(), action, 0, 0)


def test_root_permits_every_action_everywhere() -> None:
    for action in Action:
        assert permits(root_permissions(), action, 3, 4)
        assert permits(root_permissions(), action)


@pytest.mark.parametrize(
    ("flag", "granted"),
    [
        ("manage_streams", {"read_streams", "create_stream", "read_stream", "manage_stream",
                            "create_topic", "read_topic", "manage_topic", "poll_messages",
                            "send_messages"}),
        ("read_streams", {"read_streams", "read_stream", "read_topic", "poll_messages"}),
        ("manage_topics", {"create_topic", "read_topic", "manage_topic", "poll_messages",
                           "send_messages"}),
        ("read_topics", {"read_topic", "poll_messages"}),
        ("poll_messages", {"poll_messages"}),
        ("send_messages", {"send_messages"}),
        ("manage_users", {"manage_users", "read_users"}),
        ("read_users", {"read_users"}),
        ("manage_servers", {"manage_servers", "read_servers"}),
        ("read_servers", {"read_servers"}),
    ],
)  # fmt: skip
def test_global_flag_grants_exactly_its_implied_actions(flag: str, granted: set[str]) -> None:
    permissions = Permissions(GlobalPermissions(**{flag: True}))
    allowed = sorted(a.value for a in Action if permits(permissions, a, 1, 2))
    assert allowed == sorted(granted)


@pytest.mark.parametrize(
    ("flag", "granted"),
    [
        ("manage_stream", {"read_stream", "manage_stream", "create_topic", "read_topic",
                           "manage_topic", "poll_messages", "send_messages"}),
        ("read_stream", {"read_stream", "read_topic", "poll_messages"}),
        ("manage_topics", {"create_topic", "read_topic", "manage_topic", "poll_messages",
                           "send_messages"}),
        ("read_topics", {"read_topic", "poll_messages"}),
        ("poll_messages", {"poll_messages"}),
        ("send_messages", {"send_messages"}),
    ],
)  # fmt: skip
def test_stream_flag_grants_only_inside_its_stream(flag: str, granted: set[str]) -> None:
    stream = StreamPermissions(7, **{flag: True})  # type: ignore[arg-type]
    permissions = Permissions(streams=(stream,))
    allowed = sorted(a.value for a in Action if permits(permissions, a, 7, 2))
    assert allowed == sorted(granted)
    assert not any(permits(permissions, a, 8, 2) for a in Action)
    assert not any(permits(permissions, a) for a in Action)


@pytest.mark.parametrize(
    ("flag", "granted"),
    [
        ("manage_topic", {"read_topic", "manage_topic", "poll_messages", "send_messages"}),
        ("read_topic", {"read_topic", "poll_messages"}),
        ("poll_messages", {"poll_messages"}),
        ("send_messages", {"send_messages"}),
    ],
)
def test_topic_flag_grants_only_on_its_topic(flag: str, granted: set[str]) -> None:
    stream = StreamPermissions(7, topics=(TopicPermissions(3, **{flag: True}),))
    permissions = Permissions(streams=(stream,))
    allowed = sorted(a.value for a in Action if permits(permissions, a, 7, 3))
    assert allowed == sorted(granted)
    assert not any(permits(permissions, a, 7, 4) for a in Action)
    assert not any(permits(permissions, a, 7) for a in Action)


def test_the_state_keeps_entries_sorted_and_refuses_duplicate_ids() -> None:
    unsorted = Permissions(
        streams=(
            StreamPermissions(2, topics=(TopicPermissions(5), TopicPermissions(1))),
            StreamPermissions(1),
        )
    )
    kept = canonical(unsorted)
    assert [stream.stream_id for stream in kept.streams] == [1, 2]
    assert [topic.topic_id for topic in kept.streams[1].topics] == [1, 5]
    assert canonical(kept) == kept
    with pytest.raises(ValueError, match="stream"):
        canonical(Permissions(streams=(StreamPermissions(1), StreamPermissions(1))))
    with pytest.raises(ValueError, match="topic"):
        canonical(Permissions(streams=(StreamPermissions(1, topics=(TopicPermissions(3),) * 2),)))


def test_root_sets_every_global_flag() -> None:
    root = root_permissions()
    assert all(getattr(root.global_, f.name) for f in fields(GlobalPermissions))
    assert root.streams == ()


def test_password_hash_is_deterministic_and_verifies() -> None:
    first = hash_password("secret", b"salt-1", n=16, r=1, p=1)
    assert first == hash_password("secret", b"salt-1", n=16, r=1, p=1)
    assert first.hash != hash_password("secret", b"salt-2", n=16, r=1, p=1).hash
    assert verify_password(first, "secret")
    assert not verify_password(first, "Secret")


def test_verify_refuses_malformed_hashes() -> None:
    good = hash_password("secret", b"salt", n=16, r=1, p=1)
    for bad in (
        PasswordHash(good.salt, good.hash, n=15, r=1, p=1),
        PasswordHash(good.salt, good.hash[:-1], n=16, r=1, p=1),
        PasswordHash(b"", good.hash, n=16, r=1, p=1),
        PasswordHash(good.salt, good.hash, n=1 << 30, r=1, p=1),
    ):
        assert not bad.is_well_formed()
        assert not verify_password(bad, "secret")
