"""The fault proxy: a process that sits on every replica-bus link and misbehaves on demand.

Purpose: give the chaos harness a network it controls. Every pair of nodes talks through
one proxy link: the lower replica index dials (``docs/operations.md``, ``bus.py``
invariant 1), so its ``replicas`` entry for the higher node names the proxy's port, and the
proxy forwards to the real bus port of the higher node. Per link and direction the proxy
can drop frames (each with a probability), delay them (with jitter, order kept), cut the
direction (every frame dropped while TCP stays up, a one-way partition), stall it (stop
reading, so TCP backpressure builds), and per link it can reset the connections and refuse
new ones (a partition that kills connections) or heal everything.

Invariants:

1. The proxy understands just enough of the bus to drop whole frames: the handshake
   (``HANDSHAKE_ACCEPTOR_BYTES`` one way, ``HANDSHAKE_DIALER_BYTES`` the other) is passed
   through untouched, then frames of ``[size u32][kind u8][3 zero bytes]`` + payload.
   A frame header that does not look like one (unknown kind, nonzero padding, size above
   ``BUS_FRAME_SIZE_MAX``) means the proxy no longer follows the stream: it counts a
   ``desync`` and closes that connection (the nodes redial) rather than forward bytes it
   cannot frame; the harness treats any desync as its own failure, not the cluster's.
2. Bounded: each direction queues at most ``QUEUE_BYTES_MAX`` bytes of delayed frames;
   more are dropped and counted (a congested network loses packets, VSR retransmits).
3. Order is kept per direction: a frame is never delivered before one read before it.
4. Opaque mode (``"opaque": true``, for a bus over TLS, whose frames the proxy cannot
   read): each chunk read from a socket stands for a frame. Rules act on chunks the
   same way, so dropping one leaves a gap in the TLS stream, which its receiver refuses
   and closes: under TLS, loss and one-way cuts reach the nodes as broken connections
   and failed handshakes, as on a real network where TCP cannot deliver past a gap.
   Delays, stalls, blocks and resets behave as in frame mode. Nothing desyncs.
5. Binds 127.0.0.1 only. The process exits when its standard input closes, so it cannot
   outlive the harness that started it.

Control protocol: one JSON object per line on stdin, one JSON answer per line on stdout.
``{"op": "rule", "link": "0-1", "direction": "fwd"|"back"|"both", "rule": {...}}`` sets a
:class:`Rule`; ``{"op": "block", "link": ..., "blocked": bool}`` resets the link's
connections and refuses new ones (or stops refusing); ``{"op": "reset", "link": ...}``
closes its connections once; ``{"op": "heal"}`` clears every rule and block;
``{"op": "stats"}`` returns the counters. ``fwd`` is dialer to acceptor (lower index to
higher), ``back`` the other way. The first line the proxy prints is
``{"ready": true, "ports": {link: port}}``.

Run as ``python -m bench.chaos.proxy '<config json>'`` with ``{"links": [{"name": "0-1",
"port": 0, "target": "127.0.0.1:9091"}, ...], "seed": 7, "opaque": false}``.
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import trio

# The bus's constants, restated so that the proxy starts without importing the runtime;
# tests/cluster/test_proxy.py checks that they match broker/runtime/bus.py.
NONCE_SIZE: Final = 32
MAC_SIZE: Final = 32
BUS_FRAME_SIZE_MAX: Final = 64 * 1024 * 1024 + 64 * 1024 + 1024
FRAME_KINDS: Final = frozenset({1, 2, 3, 4, 5})
MAGIC_SIZE: Final = 8
"""Length of the acceptor's protocol magic (``bus._MAGIC``), sent before its nonce."""
HANDSHAKE_ACCEPTOR_BYTES: Final = MAGIC_SIZE + NONCE_SIZE + MAC_SIZE
"""Acceptor to dialer before the first frame: magic and nonce, then its proof."""
HANDSHAKE_DIALER_BYTES: Final = 1 + NONCE_SIZE + MAC_SIZE
"""Dialer to acceptor before the first frame: its replica index, nonce and proof."""
BUS_FRAME_HEADER: Final = struct.Struct("<IB3s")  # payload size, kind, padding (zero)
assert BUS_FRAME_HEADER.size == 8
QUEUE_BYTES_MAX: Final = 64 * 1024 * 1024
RECEIVE_BYTES_MAX: Final = 1 << 20
CONNECT_TIMEOUT_S: Final = 2.0
DIRECTIONS: Final = ("fwd", "back")


@dataclass(slots=True)
class Rule:
    """What one direction of a link does to the frames it carries."""

    drop_p: float = 0.0
    """Probability that a frame is dropped."""
    delay_ms: float = 0.0
    """Added one-way latency."""
    jitter_ms: float = 0.0
    """Extra latency drawn uniformly from ``[0, jitter_ms]`` (order is still kept)."""
    cut: bool = False
    """Drop every frame (a one-way partition that TCP does not notice)."""
    stall: bool = False
    """Stop reading: nothing is lost, the sender's socket and queue fill up."""

    @classmethod
    def from_plain(cls, plain: dict[str, Any]) -> Rule:
        rule = cls(
            drop_p=float(plain.get("drop_p", 0.0)),
            delay_ms=float(plain.get("delay_ms", 0.0)),
            jitter_ms=float(plain.get("jitter_ms", 0.0)),
            cut=bool(plain.get("cut", False)),
            stall=bool(plain.get("stall", False)),
        )
        if not 0.0 <= rule.drop_p <= 1.0 or rule.delay_ms < 0 or rule.jitter_ms < 0:
            raise ValueError(f"bad rule {plain!r}")
        return rule


@dataclass(slots=True)
class DirectionCounters:
    frames: int = 0
    frames_dropped: int = 0
    frames_overflowed: int = 0
    bytes_forwarded: int = 0


@dataclass(eq=False)
class Link:
    """One node pair: its listener, rules, live connections and counters."""

    name: str
    target: tuple[str, int]
    rules: dict[str, Rule] = field(default_factory=lambda: {d: Rule() for d in DIRECTIONS})
    counters: dict[str, DirectionCounters] = field(
        default_factory=lambda: {d: DirectionCounters() for d in DIRECTIONS}
    )
    blocked: bool = False
    changed: trio.Event = field(default_factory=trio.Event)
    scopes: set[trio.CancelScope] = field(default_factory=set)
    accepted: int = 0
    refused: int = 0
    desyncs: int = 0

    def notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def reset(self) -> None:
        for scope in list(self.scopes):
            scope.cancel()


class Desync(Exception):
    """The byte stream stopped looking like bus frames."""


@dataclass(slots=True)
class _Queue:
    items: deque[tuple[float, bytes]] = field(default_factory=deque)
    size_bytes: int = 0
    last_due: float = 0.0
    wake: trio.Event = field(default_factory=trio.Event)


class Proxy:
    """Every link of one cluster; see the module docstring."""

    def __init__(self, links: list[Link], rng: random.Random, *, opaque: bool = False) -> None:
        self.links = {link.name: link for link in links}
        self._rng = rng
        self.opaque = opaque

    # -- control ----------------------------------------------------------------------------

    def control(self, command: dict[str, Any]) -> dict[str, Any]:
        """Apply one control command; returns the answer (``ok`` false on a bad one)."""
        op = command.get("op")
        try:
            if op == "heal":
                for link in self.links.values():
                    link.rules = {d: Rule() for d in DIRECTIONS}
                    link.blocked = False
                    link.notify()
                return {"ok": True}
            if op == "stats":
                stats = {name: _link_stats(link) for name, link in self.links.items()}
                return {"ok": True, "links": stats}
            link = self.links[str(command["link"])]
            if op == "rule":
                direction = str(command.get("direction", "both"))
                rule = Rule.from_plain(dict(command.get("rule", {})))
                chosen = DIRECTIONS if direction == "both" else (direction,)
                for name in chosen:
                    if name not in DIRECTIONS:
                        raise ValueError(f"unknown direction {name!r}")
                    link.rules[name] = Rule(**asdict(rule))
                link.notify()
                return {"ok": True}
            if op == "block":
                link.blocked = bool(command["blocked"])
                if link.blocked:
                    link.reset()
                link.notify()
                return {"ok": True}
            if op == "reset":
                link.reset()
                return {"ok": True}
        except (KeyError, TypeError, ValueError) as error:
            return {"ok": False, "error": f"{type(error).__name__}: {error}"}
        return {"ok": False, "error": f"unknown op {op!r}"}

    # -- forwarding -------------------------------------------------------------------------

    async def serve(self, link: Link, listener: trio.SocketListener) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                stream = await listener.accept()
                if link.blocked:
                    link.refused += 1
                    await trio.aclose_forcefully(stream)
                    continue
                link.accepted += 1
                nursery.start_soon(self._connection, link, stream)

    async def _connection(self, link: Link, downstream: trio.SocketStream) -> None:
        upstream: trio.SocketStream | None = None
        try:
            with trio.move_on_after(CONNECT_TIMEOUT_S):
                upstream = await trio.open_tcp_stream(*link.target)
        except OSError:
            upstream = None
        if upstream is None:  # the peer is down: so is the link, as without a proxy
            await trio.aclose_forcefully(downstream)
            return
        scope = trio.CancelScope()
        link.scopes.add(scope)
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    for direction, source, sink, handshake in (
                        ("fwd", downstream, upstream, HANDSHAKE_DIALER_BYTES),
                        ("back", upstream, downstream, HANDSHAKE_ACCEPTOR_BYTES),
                    ):
                        queue = _Queue()
                        nursery.start_soon(
                            self._read, link, direction, source, queue, handshake, scope
                        )
                        nursery.start_soon(self._write, link, direction, sink, queue, scope)
        finally:
            link.scopes.discard(scope)
            await trio.aclose_forcefully(downstream)
            await trio.aclose_forcefully(upstream)

    async def _read(
        self,
        link: Link,
        direction: str,
        source: trio.SocketStream,
        queue: _Queue,
        handshake_bytes: int,
        scope: trio.CancelScope,
    ) -> None:
        buffer = bytearray()
        counters = link.counters[direction]
        try:
            while True:
                while link.rules[direction].stall:
                    await link.changed.wait()
                data = await source.receive_some(RECEIVE_BYTES_MAX)
                if not data:
                    break
                if self.opaque:
                    # Invariant 4: the chunk is the unit a rule drops.
                    kept = self._chunk(link.rules[direction], data, counters)
                    if kept:
                        self._enqueue(link.rules[direction], queue, kept, counters)
                    continue
                buffer += data
                outgoing = bytearray()
                if handshake_bytes:
                    taken = min(handshake_bytes, len(buffer))
                    outgoing += buffer[:taken]
                    del buffer[:taken]
                    handshake_bytes -= taken
                if not handshake_bytes:
                    outgoing += self._frames(link, direction, buffer, counters)
                if outgoing:
                    self._enqueue(link.rules[direction], queue, bytes(outgoing), counters)
        except Desync:
            link.desyncs += 1
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        scope.cancel()

    def _chunk(self, rule: Rule, data: bytes, counters: DirectionCounters) -> bytes:
        """One chunk of an opaque stream, or nothing if the rule drops it."""
        counters.frames += 1
        if rule.cut or (rule.drop_p > 0 and self._rng.random() < rule.drop_p):
            counters.frames_dropped += 1
            return b""
        return data

    def _frames(
        self, link: Link, direction: str, buffer: bytearray, counters: DirectionCounters
    ) -> bytes:
        """Take every whole frame off ``buffer``; return those the rule lets through."""
        kept = bytearray()
        position = 0
        while len(buffer) - position >= BUS_FRAME_HEADER.size:
            size, kind, padding = BUS_FRAME_HEADER.unpack_from(buffer, position)
            if kind not in FRAME_KINDS or padding != b"\0\0\0" or size > BUS_FRAME_SIZE_MAX:
                raise Desync(f"{link.name} {direction}: kind {kind} size {size}")
            end = position + BUS_FRAME_HEADER.size + size
            if end > len(buffer):
                break
            counters.frames += 1
            rule = link.rules[direction]
            if rule.cut or (rule.drop_p > 0 and self._rng.random() < rule.drop_p):
                counters.frames_dropped += 1
            else:
                kept += buffer[position:end]
            position = end
        del buffer[:position]
        return bytes(kept)

    def _enqueue(
        self, rule: Rule, queue: _Queue, chunk: bytes, counters: DirectionCounters
    ) -> None:
        if queue.size_bytes + len(chunk) > QUEUE_BYTES_MAX:
            counters.frames_overflowed += 1
            return
        delay_s = (rule.delay_ms + self._rng.uniform(0.0, rule.jitter_ms)) / 1000.0
        due = max(queue.last_due, trio.current_time() + delay_s)
        queue.last_due = due
        queue.items.append((due, chunk))
        queue.size_bytes += len(chunk)
        queue.wake.set()

    async def _write(
        self,
        link: Link,
        direction: str,
        sink: trio.SocketStream,
        queue: _Queue,
        scope: trio.CancelScope,
    ) -> None:
        counters = link.counters[direction]
        try:
            while True:
                if not queue.items:
                    await queue.wake.wait()
                    queue.wake = trio.Event()
                    continue
                due, chunk = queue.items[0]
                await trio.sleep_until(due)
                queue.items.popleft()
                queue.size_bytes -= len(chunk)
                await sink.send_all(chunk)
                counters.bytes_forwarded += len(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            scope.cancel()


def _link_stats(link: Link) -> dict[str, Any]:
    return {
        "accepted": link.accepted,
        "refused": link.refused,
        "desyncs": link.desyncs,
        "blocked": link.blocked,
        "connections": len(link.scopes),
        **{direction: asdict(link.counters[direction]) for direction in DIRECTIONS},
    }


def _answer(answer: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


async def _control_loop(proxy: Proxy, cancel: trio.CancelScope) -> None:
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    pending = bytearray()
    async with stdin:
        while True:
            data = await stdin.receive_some(65536)
            if not data:
                cancel.cancel()  # the harness is gone: so is the proxy
                return
            pending += data
            while b"\n" in pending:
                line, _, rest = bytes(pending).partition(b"\n")
                pending = bytearray(rest)
                if not line.strip():
                    continue
                try:
                    command = json.loads(line)
                except ValueError as error:
                    _answer({"ok": False, "error": f"bad json: {error}"})
                    continue
                if not isinstance(command, dict):
                    _answer({"ok": False, "error": "a command is a JSON object"})
                    continue
                _answer(proxy.control(command))


async def run_proxy(config: dict[str, Any]) -> None:
    """Bind every link, announce the ports, forward until stdin closes."""
    links: list[Link] = []
    for plain in config["links"]:
        host, _, port = str(plain["target"]).rpartition(":")
        links.append(Link(str(plain["name"]), (host, int(port))))
    proxy = Proxy(
        links, random.Random(int(config.get("seed", 0))), opaque=bool(config.get("opaque", False))
    )
    listeners: dict[str, trio.SocketListener] = {}
    for plain, link in zip(config["links"], links, strict=True):
        bound = await trio.open_tcp_listeners(int(plain.get("port", 0)), host="127.0.0.1")
        listeners[link.name] = bound[0]
    ports = {name: listener.socket.getsockname()[1] for name, listener in listeners.items()}
    async with trio.open_nursery() as nursery:
        for link in links:
            nursery.start_soon(proxy.serve, link, listeners[link.name])
        _answer({"ready": True, "ports": ports})
        await _control_loop(proxy, nursery.cancel_scope)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.chaos.proxy '<config json>'", file=sys.stderr)
        return 2
    trio.run(run_proxy, json.loads(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
