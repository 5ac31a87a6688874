"""Run one node in the foreground until SIGINT or SIGTERM: what ``viewstream serve`` does.

The node prints one line when its client listener is bound (``READY_PREFIX`` and the
address; its WebSocket listener's, ``WS_READY_PREFIX``, just before), so scripts and
tests that start it on port 0 learn the port, and the root
password once if it generated one. Everything else goes to the log on stderr.

Invariants:

1. Before anything is opened, the process's soft open-file limit (``RLIMIT_NOFILE``) is
   raised as far as the hard limit allows; default descriptor settings are shrunk to fit
   it (``fit_defaults``), and the node refuses to start (a fatal exit naming the
   settings) unless the descriptors it may need at once fit in it:
   ``limits.connections_max`` client connections, the replica bus's bound
   (``broker.runtime.bus.bus_descriptors_max``), ``limits.partition_descriptors_reserved``
   for partitions' journals and ``DESCRIPTORS_MARGIN`` for everything else. The
   partitions' reserve is enforced (``broker.runtime.group.PARTITION_DESCRIPTORS``): a
   partition beyond it is refused, not opened. Neither clients nor partitions can then
   take the descriptors of the others, of the bus or of the metadata group.
2. Running out of descriptors anyway (another process sharing the system's file table,
   files open for a moment beyond the margin) never ends the process: the listeners back
   off (trio's ``serve_listeners`` sleeps on ``EMFILE``/``ENFILE``), a partition group
   whose files cannot be opened is failed and retried (``broker.runtime.group``), and the
   listeners' complaints about it are rate-limited (``AcceptErrorFilter``).
"""

from __future__ import annotations

import logging
import resource
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import trio

from broker.runtime.bus import bus_descriptors_max
from broker.runtime.config import Config
from broker.runtime.group import PARTITION_DESCRIPTORS
from broker.runtime.node import Node

READY_PREFIX: Final = "viewstream listening on "
WS_READY_PREFIX: Final = "viewstream serves websocket clients on "
"""Printed (before ``READY_PREFIX``'s line) when the WebSocket listener is bound."""

DESCRIPTORS_MARGIN: Final = 128
"""Descriptors kept for what is neither a client connection, the bus nor a partition:
standard streams, the event loop's own (epoll, wake-up pipe), the client listeners, the
flusher's directory, the metadata group's journal, and files opened for a moment
(superblock and checkpoint writes, directory scans, a TLS certificate)."""
DESCRIPTORS_ROOM_MIN: Final = 64
"""Descriptors for clients and partitions together below which defaults are not shrunk
to fit: such a host cannot run a useful node, and the refusal names the settings."""
DESCRIPTORS_FALLBACK_MAX: Final = 1 << 20
"""Soft limit tried when the hard limit is unlimited (Linux caps it at ``fs.nr_open``,
1,048,576 by default)."""
ACCEPT_ERROR_LOG_INTERVAL_S: Final = 10.0
"""The listeners' "accept returned EMFILE" line is written at most once per this long (trio
writes one, with a traceback, every 0.1 s while the condition lasts)."""
ACCEPT_ERROR_LOGGER: Final = "trio.serve_listeners"

log = logging.getLogger("viewstream.serve")


def _announce(text: str) -> None:
    print(text, flush=True)


async def serve_until_signalled(config: Config) -> None:
    """Serve ``config``'s node; SIGINT or SIGTERM starts a graceful shutdown."""
    node = Node(config, announce=_announce)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(node.run)
            if node.ws_address is not None:
                _announce(f"{WS_READY_PREFIX}{node.ws_address[0]}:{node.ws_address[1]}")
            _announce(f"{READY_PREFIX}{host}:{port}")

            async def wait_signal() -> None:
                async for signum in signals:
                    logging.getLogger("viewstream").info(
                        "signal %s: shutting down", signal.Signals(signum).name
                    )
                    node.request_shutdown()
                    return

            nursery.start_soon(wait_signal)
            # node.run returns once the shutdown it was asked for is complete.
            await node.stopped.wait()
            nursery.cancel_scope.cancel()


# -- descriptors ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescriptorBudget:
    """The descriptors one node may hold at once, by what holds them."""

    connections: int
    """``limits.connections_max``."""
    bus: int
    """The replica bus's bound (0 for a cluster of one)."""
    partitions: int
    """``limits.partition_descriptors_reserved``."""
    margin: int = DESCRIPTORS_MARGIN

    @property
    def total(self) -> int:
        return self.connections + self.bus + self.partitions + self.margin

    def describe(self) -> str:
        return (
            f"{self.total} = limits.connections_max {self.connections} + replica bus "
            f"{self.bus} + limits.partition_descriptors_reserved {self.partitions} + "
            f"margin {self.margin}"
        )


def descriptor_budget(config: Config) -> DescriptorBudget:
    """What ``config``'s node may hold at once (invariant 1)."""
    limits = config.limits
    bus = bus_descriptors_max(config.replica_count) if config.replica_count > 1 else 0
    return DescriptorBudget(limits.connections_max, bus, limits.partition_descriptors_reserved)


def descriptor_limit_problem(budget: DescriptorBudget, limit: int) -> str | None:
    """Why a node with ``budget`` cannot start under a soft limit of ``limit``, or None."""
    if limit == resource.RLIM_INFINITY or budget.total <= limit:
        return None
    return (
        f"the open-file limit (RLIMIT_NOFILE, ulimit -n) is {limit}, but the node may need "
        f"{budget.describe()} descriptors at once: raise the hard limit (ulimit -Hn, "
        "systemd LimitNOFILE=) or lower limits.connections_max or "
        "limits.partition_descriptors_reserved"
    )


def raise_descriptor_limit() -> tuple[int, int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` as far as the hard limit lets it go.

    Returns:
        The soft limit before, the soft limit now, and the hard limit.
    """
    before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    targets = [hard] if hard != resource.RLIM_INFINITY else []
    targets.append(DESCRIPTORS_FALLBACK_MAX)
    for target in targets:
        if before == resource.RLIM_INFINITY or target <= before:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            continue  # above fs.nr_open, or a platform that caps it lower (macOS)
        return before, target, hard
    return before, before, hard


def fit_defaults(config: Config, limit: int) -> Config:
    """``config`` with its default descriptor settings shrunk to fit ``limit``.

    Settings the operator chose (``limits.connections_max``,
    ``limits.partition_descriptors_reserved``) are never changed: a node that cannot
    honour them refuses to start. Defaults are sized for a host with a generous hard
    limit; on a smaller one the room left after the bus and the margin is split between
    the two (half each at most for partitions), with a warning naming them, so that
    ``viewstream serve`` starts on any host.
    """
    limits = config.limits
    explicit = limits.model_fields_set & {"connections_max", "partition_descriptors_reserved"}
    budget = descriptor_budget(config)
    if explicit or descriptor_limit_problem(budget, limit) is None:
        return config
    room = limit - budget.bus - budget.margin
    if room < DESCRIPTORS_ROOM_MIN:
        return config  # too small for any node: refused with the settings named
    partitions = min(limits.partition_descriptors_reserved, room // 2)
    connections = min(limits.connections_max, room - partitions)
    log.warning(
        "the open-file limit %d is below what the default settings need (%s): using "
        "limits.connections_max %d and limits.partition_descriptors_reserved %d; raise "
        "the hard limit (ulimit -Hn, systemd LimitNOFILE=) for more",
        limit,
        budget.describe(),
        connections,
        partitions,
    )
    fitted = limits.model_copy(
        update={"connections_max": connections, "partition_descriptors_reserved": partitions}
    )
    return config.model_copy(update={"limits": fitted})


def prepare_descriptors(config: Config) -> Config:
    """Raise the open-file limit, fit default settings into it, refuse to start if the
    settings still cannot fit, and size the partitions' reserve (invariant 1). Returns
    the configuration to run with.

    Raises:
        SystemExit: the limit is too low for the settings (the message names them).
    """
    before, soft, hard = raise_descriptor_limit()
    config = fit_defaults(config, soft)
    budget = descriptor_budget(config)
    problem = descriptor_limit_problem(budget, soft)
    if problem is not None:
        raise SystemExit(f"viewstream: cannot start: {problem}")
    PARTITION_DESCRIPTORS.descriptors_max = budget.partitions
    log.info(
        "open-file limit %s (raised from %s, hard %s); the node may hold %s",
        _limit_text(soft),
        _limit_text(before),
        _limit_text(hard),
        budget.describe(),
    )
    return config


def _limit_text(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)


class AcceptErrorFilter(logging.Filter):
    """Lets one listener accept-error line through per ``interval_s``, without its
    traceback, and says in it how many were left out."""

    def __init__(
        self,
        interval_s: float = ACCEPT_ERROR_LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._clock = clock
        self._last_s = float("-inf")
        self._suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now_s = self._clock()
        if now_s - self._last_s < self._interval_s:
            self._suppressed += 1
            return False
        self._last_s = now_s
        text = record.getMessage()
        if self._suppressed:
            text += f" ({self._suppressed} more like it not logged)"
        self._suppressed = 0
        record.msg, record.args = text, ()
        record.exc_info, record.exc_text = None, None
        return True


def run_node(config: Config) -> None:
    """Configure logging, check the descriptor limit, and run the node in this process
    until it is signalled."""
    logging.basicConfig(
        level=config.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger(ACCEPT_ERROR_LOGGER).addFilter(AcceptErrorFilter())
    config = prepare_descriptors(config)
    try:
        trio.run(serve_until_signalled, config)
    except BaseExceptionGroup as group:
        # A fatal exit with a reason (a listener that cannot bind, an unreadable
        # certificate) comes out of the nurseries wrapped: exit with the reason alone.
        exits, rest = group.split(SystemExit)
        if exits is None or rest is not None:
            raise
        first: BaseException = exits
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
