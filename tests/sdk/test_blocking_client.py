"""The blocking client: same API shape as the trio client, same behaviour over sockets."""

from __future__ import annotations

import inspect
import socket
import threading

import pytest

from sdk import AsyncClient, Client, ConsumerRef, PollingStrategy
from sdk.errors import ClientClosed, ConnectionFailed, InvalidCredentials, StreamAlreadyExists
from sdk.wire import CommandCode
from tests.sdk.conftest import url
from tests.sdk.fake_server import FakeCluster


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if not name.startswith("_") and callable(member)
    }


def test_blocking_and_trio_clients_have_the_same_calls_and_parameters() -> None:
    trio_api = public_methods(AsyncClient)
    blocking_api = public_methods(Client)
    assert set(trio_api) == set(blocking_api)
    for name, signature in trio_api.items():
        other = blocking_api[name]
        assert list(signature.parameters) == list(other.parameters), name
        for parameter in signature.parameters.values():
            mirror = other.parameters[parameter.name]
            assert (parameter.kind, parameter.default) == (mirror.kind, mirror.default), name
        is_async = inspect.iscoroutinefunction(getattr(AsyncClient, name))
        assert not inspect.iscoroutinefunction(getattr(Client, name)), name
        if name not in ("new_session", "producer", "consumer", "from_connection_string"):
            assert is_async, f"AsyncClient.{name} should be async"


def test_blocking_client_round_trips_and_logs_out_on_close(fake: FakeCluster) -> None:
    with Client.from_connection_string(url(fake)) as client:
        client.ping()
        client.create_stream("s")
        with pytest.raises(StreamAlreadyExists):
            client.create_stream("s")
        client.create_topic("s", "t", 2)
        client.send_messages("s", "t", [b"x", b"y"], 0)
        polled = client.poll_messages(
            "s",
            "t",
            consumer=ConsumerRef.single(1),
            polling_strategy=PollingStrategy.first(),
            count=5,
            partition_id=0,
        )
        assert [m.payload for m in polled.messages] == [b"x", b"y"]
        assert client.get_stats().messages_count == 2
        (connection,) = client._connections.values()
        assert connection.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    assert not fake.clients
    with pytest.raises(ClientClosed):
        client.ping()


def test_blocking_client_retries_a_dropped_reply_and_a_closed_connection(fake: FakeCluster) -> None:
    with Client.from_connection_string(url(fake)) as client:
        fake.add_fault("drop_reply", code=CommandCode.GET_STREAMS)
        fake.add_fault("close_before", code=CommandCode.GET_STREAMS)
        assert client.get_streams() == []
        assert len(fake.requests_of(CommandCode.GET_STREAMS)) == 3


def test_blocking_client_fails_over_to_the_new_metadata_primary(fake3: FakeCluster) -> None:
    with Client.from_connection_string(url(fake3)) as client:
        client.create_stream("a")
        fake3.kill(0)
        fake3.view_change(0, steps=2)  # node 2 leads
        client.create_stream("b")
        assert client._core.cluster.metadata_primary.port == fake3.nodes[2].port


def test_threads_sharing_a_client_stay_lock_step_with_consecutive_request_numbers(
    fake: FakeCluster,
) -> None:
    with Client.from_connection_string(url(fake)) as client:
        client.create_stream("s")
        client.create_topic("s", "t", 1)
        errors: list[BaseException] = []

        def produce() -> None:
            try:
                for _ in range(20):
                    client.send_messages("s", "t", [b"m"], 0)
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=produce) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors
        requests = [r.request for r in fake.requests_of(CommandCode.SEND_MESSAGES)]
        assert sorted(requests) == list(range(requests[0], requests[0] + 80))
        assert len(fake.messages("s", "t", 0)) == 80


def test_blocking_client_errors_mirror_the_trio_client(fake: FakeCluster) -> None:
    client = Client.from_connection_string(url(fake).replace("iggy:iggy", "iggy:bad"))
    with pytest.raises(InvalidCredentials):
        client.connect()
    client.close()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    unreachable = Client.from_connection_string(
        f"iggy://iggy:iggy@127.0.0.1:{port}?retry_deadline=300ms&reconnection_interval=10ms"
    )
    with pytest.raises(ConnectionFailed):
        unreachable.ping()
