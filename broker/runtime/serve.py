"""Run one node in the foreground until SIGINT or SIGTERM: what ``viewstream serve`` does.

The node prints one line when its client listener is bound (``READY_PREFIX`` and the
address), so scripts and tests that start it on port 0 learn the port, and the root
password once if it generated one. Everything else goes to the log on stderr.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Final

import trio

from broker.runtime.config import Config
from broker.runtime.node import Node

READY_PREFIX: Final = "viewstream listening on "


def _announce(text: str) -> None:
    print(text, flush=True)


async def serve_until_signalled(config: Config) -> None:
    """Serve ``config``'s node; SIGINT or SIGTERM starts a graceful shutdown."""
    node = Node(config, announce=_announce)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(node.run)
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


def run_node(config: Config) -> None:
    """Configure logging and run the node in this process until it is signalled."""
    logging.basicConfig(
        level=config.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    trio.run(serve_until_signalled, config)
