"""Shared builders for the state machine tests: a metadata state with a root session."""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.state.credentials import PasswordHash
from broker.state.metadata import (
    ApplyContext,
    CreateRootUser,
    CreateUser,
    MetadataCommand,
    MetadataResult,
    MetadataState,
    Register,
    Registered,
    UserCreated,
)
from broker.state.permissions import Permissions

# An opaque but well-formed hash: the metadata state stores hashes, it never computes them.
PASSWORD = PasswordHash(salt=b"s" * 16, hash=b"h" * 32, n=2, r=1, p=1)
ROOT_CLIENT_ID = 0xAAAA


@dataclass
class Driver:
    """Applies commands with consecutive op numbers and a timestamp that advances by 10."""

    state: MetadataState = field(default_factory=MetadataState)
    op: int = 0
    root_session: int = 0

    def apply(self, command: MetadataCommand, session: int | None = None) -> MetadataResult:
        self.op += 1
        result = self.state.apply(command, ApplyContext(self.op, 1_000 + 10 * self.op, session))
        problems = self.state.check_invariants()
        assert not problems, problems
        return result

    def as_root(self, command: MetadataCommand) -> MetadataResult:
        return self.apply(command, self.root_session)

    def login(self, client_id: int, user_id: int) -> int:
        result = self.apply(Register(client_id, user_id))
        assert isinstance(result, Registered), result
        assert result.session == self.op
        return result.session

    def add_user(self, username: str, permissions: Permissions | None) -> int:
        result = self.as_root(CreateUser(username, PASSWORD, permissions=permissions))
        assert isinstance(result, UserCreated), result
        return result.user.id


def driver_with_root() -> Driver:
    """A fresh state holding the root user (id 0) and a session for it."""
    driver = Driver()
    created = driver.apply(CreateRootUser("iggy", PASSWORD))
    assert isinstance(created, UserCreated)
    assert created.user.id == 0
    driver.root_session = driver.login(ROOT_CLIENT_ID, 0)
    return driver
