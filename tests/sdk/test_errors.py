"""Typed errors carry Iggy's codes."""

from __future__ import annotations

import pytest

from sdk import errors
from sdk.errors import IggyError, error_for_code, error_for_eviction
from sdk.wire import EvictionReason, IggyErrorCode


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (3, errors.InvalidCommand),
        (40, errors.Unauthenticated),
        (41, errors.Unauthorized),
        (42, errors.InvalidCredentials),
        (57, errors.TransientNotCommitted),
        (58, errors.TransientNotAccepted),
        (59, errors.RequestAlreadyApplied),
        (1009, errors.StreamNotFound),
        (1010, errors.StreamNotFound),
        (1012, errors.StreamAlreadyExists),
        (2010, errors.TopicNotFound),
        (2013, errors.TopicAlreadyExists),
        (3007, errors.PartitionNotFound),
        (5004, errors.ConsumerGroupAlreadyExists),
        (5006, errors.ConsumerGroupMemberNotFound),
    ],
)
def test_error_for_code_picks_the_named_class_and_keeps_the_code(code: int, cls: type) -> None:
    error = error_for_code(code)
    assert type(error) is cls
    assert error.code == code
    assert isinstance(error, IggyError)


def test_unknown_codes_become_plain_iggy_errors() -> None:
    error = error_for_code(777_777)
    assert type(error) is IggyError and error.code == 777_777 and error.name == "unknown"


def test_only_transient_and_transport_failures_are_retryable() -> None:
    assert error_for_code(IggyErrorCode.TRANSIENT_NOT_ACCEPTED).retryable
    assert error_for_code(IggyErrorCode.TRANSIENT_NOT_COMMITTED).retryable
    assert errors.RequestTimeout(outcome_unknown=True).retryable
    assert errors.Disconnected(outcome_unknown=False).retryable
    assert errors.ConnectionFailed().retryable
    assert not error_for_code(IggyErrorCode.REQUEST_ALREADY_APPLIED).retryable
    assert not error_for_code(IggyErrorCode.STREAM_ID_NOT_FOUND).retryable
    assert not error_for_code(IggyErrorCode.UNAUTHORIZED).retryable


def test_not_found_and_already_exists_families_share_a_base() -> None:
    assert isinstance(error_for_code(2011), errors.NotFound)
    assert isinstance(error_for_code(5004), errors.AlreadyExists)


def test_evictions_map_to_the_error_of_their_reason() -> None:
    credentials = error_for_eviction(EvictionReason.INVALID_CREDENTIALS)
    assert isinstance(credentials, errors.InvalidCredentials)
    assert credentials.code == 42 and credentials.eviction is EvictionReason.INVALID_CREDENTIALS
    incompatible = error_for_eviction(EvictionReason.INCOMPATIBLE_PROTOCOL, 12291, 12288)
    assert isinstance(incompatible, errors.IncompatibleProtocol)
    assert incompatible.server_protocol_version == 12291
    stale = error_for_eviction(EvictionReason.STALE_CLIENT)
    assert isinstance(stale, errors.SessionEvicted) and stale.code == 30
    other = error_for_eviction(EvictionReason.SESSION_TOO_LOW)
    assert isinstance(other, errors.SessionEvicted) and other.code == 14001


def test_error_text_names_the_code() -> None:
    assert "stream_name_already_exists (1012)" in str(error_for_code(1012))
    assert "task_timeout (12001)" in str(errors.RequestTimeout(outcome_unknown=False))


def test_invalid_connection_string_is_also_a_value_error() -> None:
    assert issubclass(errors.InvalidConnectionString, ValueError)
