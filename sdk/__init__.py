"""The viewstream Python SDK and its sans-IO wire codec (``sdk.wire``).

Public API (imported lazily, so ``import sdk.wire`` stays free of trio and sockets):

* clients: :class:`AsyncClient` (trio), :class:`Client` (blocking), :class:`ClientConfig`,
  :func:`parse_connection_string`;
* high level: :class:`AsyncProducer` / :class:`Producer`, :class:`Backpressure`,
  :class:`AsyncConsumer` / :class:`Consumer`, :class:`AutoCommit`;
* values: :class:`Message`, :class:`ReceivedMessage`, :class:`PolledMessages`,
  :class:`ConsumerRef`, :class:`Partitioning`, :class:`PollingStrategy`, :class:`Identifier`;
* errors: :class:`IggyError` and its subclasses in :mod:`sdk.errors`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sdk.blocking import Client as Client
    from sdk.client import AsyncClient as AsyncClient
    from sdk.connection_string import ClientConfig as ClientConfig
    from sdk.connection_string import NodeAddress as NodeAddress
    from sdk.connection_string import parse_connection_string as parse_connection_string
    from sdk.consumer import AsyncConsumer as AsyncConsumer
    from sdk.consumer import Consumer as Consumer
    from sdk.errors import IggyError as IggyError
    from sdk.producer import AsyncProducer as AsyncProducer
    from sdk.producer import Producer as Producer
    from sdk.types import AutoCommit as AutoCommit
    from sdk.types import Backpressure as Backpressure
    from sdk.types import ConsumerRef as ConsumerRef
    from sdk.types import ConsumerSettings as ConsumerSettings
    from sdk.types import Message as Message
    from sdk.types import Partitioning as Partitioning
    from sdk.types import PolledMessages as PolledMessages
    from sdk.types import ProducerSettings as ProducerSettings
    from sdk.types import ReceivedMessage as ReceivedMessage
    from sdk.types import TopicSettings as TopicSettings
    from sdk.wire import Identifier as Identifier
    from sdk.wire import PollingStrategy as PollingStrategy

_EXPORTS = {
    "AsyncClient": "sdk.client",
    "TopicSettings": "sdk.types",
    "Client": "sdk.blocking",
    "ClientConfig": "sdk.connection_string",
    "NodeAddress": "sdk.connection_string",
    "parse_connection_string": "sdk.connection_string",
    "AsyncConsumer": "sdk.consumer",
    "AutoCommit": "sdk.types",
    "Consumer": "sdk.consumer",
    "ConsumerSettings": "sdk.types",
    "IggyError": "sdk.errors",
    "AsyncProducer": "sdk.producer",
    "Backpressure": "sdk.types",
    "Producer": "sdk.producer",
    "ProducerSettings": "sdk.types",
    "ConsumerRef": "sdk.types",
    "Message": "sdk.types",
    "Partitioning": "sdk.types",
    "PolledMessages": "sdk.types",
    "ReceivedMessage": "sdk.types",
    "Identifier": "sdk.wire",
    "PollingStrategy": "sdk.wire",
}

__all__ = [
    "AsyncClient",
    "AsyncConsumer",
    "AsyncProducer",
    "AutoCommit",
    "Backpressure",
    "Client",
    "ClientConfig",
    "Consumer",
    "ConsumerRef",
    "ConsumerSettings",
    "Identifier",
    "IggyError",
    "Message",
    "NodeAddress",
    "Partitioning",
    "PolledMessages",
    "PollingStrategy",
    "Producer",
    "ProducerSettings",
    "ReceivedMessage",
    "TopicSettings",
    "parse_connection_string",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
