"""What the producers and consumers need of a client: the two driver protocols.

Purpose: :mod:`sdk.producer` and :mod:`sdk.consumer` run the sans-IO core's steps
through a client without knowing which client it is. The trio client
(:class:`sdk.client.AsyncClient`) is an :class:`AsyncDriver`, the blocking client
(:class:`sdk.blocking.Client`) a :class:`Driver`; neither client module is imported
here or by the producers and consumers, so the import graph of the SDK has no circle:
the clients import the high-level modules, never the other way round.

Invariants:

1. A driver runs one step at a time per session (the clients' locks); ``new_session``
   is how a producer or consumer gets a session of its own.
2. ``_core`` is the session's core: steps built from it run through the same driver.
3. ``_rng`` is the driver's randomness, from which a producer seeds its own.
"""

from __future__ import annotations

import random
from typing import Protocol, TypeVar

from sdk._protocol import ClientCore, Step

__all__ = ["AsyncDriver", "Driver"]

_T = TypeVar("_T")


class Driver(Protocol):
    """A blocking client: runs a step on the calling thread."""

    _core: ClientCore
    _rng: random.Random

    def new_session(self) -> Driver:
        """Another client with the same settings and credentials, and its own session."""
        ...

    def _run(self, step: Step[_T]) -> _T:
        """Run ``step`` to its end and return its value."""
        ...

    def close(self) -> None:
        """Log out (best effort) and close every connection."""
        ...


class AsyncDriver(Protocol):
    """A trio client: runs a step in the calling task."""

    _core: ClientCore
    _rng: random.Random

    def new_session(self) -> AsyncDriver:
        """Another client with the same settings and credentials, and its own session."""
        ...

    async def _run(self, step: Step[_T]) -> _T:
        """Run ``step`` to its end and return its value."""
        ...

    async def close(self) -> None:
        """Log out (best effort) and close every connection."""
        ...
