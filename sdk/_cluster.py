"""The client's view of the cluster: roster, node health, and which node is primary for
which group (sans-IO).

Purpose: decide where each request goes. Writes must reach the primary of their group:
the metadata group (group 0, primary ``view % n``, the node cluster metadata reports as
leader) for metadata operations and sessions, and the partition's own group (primary
``(view + group) % n``) for sends and offset writes. The client cannot compute a
partition's group number, so it learns primaries from replies:

* a successful write whose reply replica ``r`` made in view ``v`` makes ``r`` the cached
  primary of that group and records the group's residue ``(r - v) % n`` (= ``group % n``);
  ``r`` is the reply header's replica index (a backup that forwarded the write answers
  with the primary's reply), or the answering node when the roster is not known;
* a ``TransientNotAccepted`` (58) from node ``b`` in view ``v`` drops ``b`` as the cached
  primary and, when the residue is known, points the cache at ``(v + residue) % n``
  straight away; otherwise the caller rotates through the roster.

Invariants:

1. Every cache and table is bounded (``PRIMARY_CACHE_ENTRIES_MAX``); entries are
   addresses, so a roster reorder never makes them point at the wrong node.
2. A node that failed at the transport level is not chosen again before its backoff
   (exponential per node, ``backoff_min_s`` doubling to ``backoff_max_s``, with jitter
   from the injected ``random.Random``) has elapsed; an answer resets it.
3. ``choose`` never returns a node in ``tried``; when every node is tried or backing off
   it returns ``None`` and the caller waits, so retrying is never a busy loop.
4. Time is an argument (``now``); nothing here reads a clock or a socket.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple, TypeAlias, TypeVar

from sdk.connection_string import NodeAddress
from sdk.wire import ClusterMetadata, ClusterNodeRole

__all__ = [
    "METADATA",
    "PRIMARY_CACHE_ENTRIES_MAX",
    "Cluster",
    "PartitionGroup",
    "RouteKey",
]

PRIMARY_CACHE_ENTRIES_MAX: Final = 4096
"""Most groups whose primary (and residue) the client remembers."""

METADATA: Final = "metadata"
"""The route key of the metadata group (group 0)."""

_UNSPECIFIED_HOSTS: Final = ("", "0.0.0.0", "::", "[::]")


class PartitionGroup(NamedTuple):
    """The route key of one partition's group, named as the request names it (a tuple:
    hashed and compared in C, as the route tables look one up on every send)."""

    stream: int | str
    topic: int | str
    partition: int


RouteKey: TypeAlias = Literal["metadata"] | PartitionGroup


_V = TypeVar("_V")


def _remember(table: OrderedDict[PartitionGroup, _V], key: PartitionGroup, value: _V) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > PRIMARY_CACHE_ENTRIES_MAX:
        table.popitem(last=False)


@dataclass(slots=True)
class _Health:
    failures: int = 0
    down_until: float = 0.0


class Cluster:
    """Roster, node health and learned primaries.

    Args:
        seeds: The nodes to start from (roster until cluster metadata arrives).
        backoff_min_s: First per-node backoff after a transport failure.
        backoff_max_s: Longest per-node backoff.
        rng: Randomness for jitter.
    """

    def __init__(
        self,
        seeds: tuple[NodeAddress, ...],
        *,
        backoff_min_s: float,
        backoff_max_s: float,
        rng: random.Random,
    ) -> None:
        assert seeds
        self.nodes: list[NodeAddress] = list(dict.fromkeys(seeds))
        self.metadata_primary: NodeAddress = self.nodes[0]
        self.home: NodeAddress = self.nodes[0]
        self.roster_known = False
        self.stale = False
        self._backoff_min_s = backoff_min_s
        self._backoff_max_s = backoff_max_s
        self._rng = rng
        self._health: dict[NodeAddress, _Health] = {}
        self._primaries: OrderedDict[PartitionGroup, NodeAddress] = OrderedDict()
        self._residues: OrderedDict[PartitionGroup, int] = OrderedDict()

    def copy(self, rng: random.Random) -> Cluster:
        """An independent copy (roster and learned primaries, fresh node health)."""
        other = Cluster(
            tuple(self.nodes),
            backoff_min_s=self._backoff_min_s,
            backoff_max_s=self._backoff_max_s,
            rng=rng,
        )
        other.metadata_primary = self.metadata_primary
        other.home = self.home
        other.roster_known = self.roster_known
        other._primaries = OrderedDict(self._primaries)
        other._residues = OrderedDict(self._residues)
        return other

    # --- roster ------------------------------------------------------------------------

    def update_roster(self, metadata: ClusterMetadata, answered_by: NodeAddress) -> None:
        """Adopt the roster and metadata primary that cluster metadata reports.

        Nodes are kept in the order reported, which is taken as replica order. An
        unspecified advertised address (``0.0.0.0``) is replaced by the host we dialed.
        """
        if not metadata.nodes:
            return
        nodes: list[NodeAddress] = []
        leader: NodeAddress | None = None
        for node in metadata.nodes:
            host = answered_by.host if node.ip in _UNSPECIFIED_HOSTS else node.ip
            address = NodeAddress(host, node.tcp_port)
            nodes.append(address)
            if node.role is ClusterNodeRole.LEADER and leader is None:
                leader = address
        nodes = list(dict.fromkeys(nodes))
        if nodes != self.nodes:
            # Residues are indexes into the roster; they mean nothing in another one.
            self._residues.clear()
            for key in [k for k, v in self._primaries.items() if v not in nodes]:
                del self._primaries[key]
        self.nodes = nodes
        self.roster_known = True
        self.stale = False
        if leader is not None:
            self.metadata_primary = leader
        elif self.metadata_primary not in nodes:
            self.metadata_primary = nodes[0]
        if self.home not in nodes:
            self.home = answered_by if answered_by in nodes else self.metadata_primary

    # --- choosing a node ---------------------------------------------------------------

    def preferred(self, route: RouteKey | None) -> NodeAddress:
        """The node a request on ``route`` should try first."""
        if route is None:
            return self.home
        if route == METADATA:
            return self.metadata_primary
        assert isinstance(route, PartitionGroup)
        cached = self._primaries.get(route)
        if cached is not None:
            self._primaries.move_to_end(route)
            return cached
        return self.metadata_primary

    def choose(
        self, preferred: NodeAddress, tried: set[NodeAddress], now: float
    ) -> NodeAddress | None:
        """``preferred`` if it is usable, else the next usable node in roster order.

        Usable: not in ``tried`` and not backing off. ``None`` when no node is usable.
        """
        if preferred in self.nodes:
            start = self.nodes.index(preferred)
            order = self.nodes[start:] + self.nodes[:start]
        else:
            order = [preferred, *self.nodes]
        for address in order:
            if address not in tried and self._usable(address, now):
                return address
        return None

    def _usable(self, address: NodeAddress, now: float) -> bool:
        health = self._health.get(address)
        return health is None or health.down_until <= now

    def time_until_usable(self, now: float) -> float:
        """Seconds until the first backing-off node may be tried again (0 if one is)."""
        waits = [max(0.0, self._health_of(a).down_until - now) for a in self.nodes]
        return min(waits) if waits else 0.0

    def _health_of(self, address: NodeAddress) -> _Health:
        health = self._health.get(address)
        if health is None:
            health = _Health()
            self._health[address] = health
        return health

    # --- learning from outcomes ----------------------------------------------------------

    def on_transport_failure(self, address: NodeAddress, now: float) -> None:
        """A dial failed, a connection broke, or an attempt timed out on ``address``."""
        health = self._health_of(address)
        health.failures += 1
        backoff = min(
            self._backoff_max_s, self._backoff_min_s * (1 << min(health.failures - 1, 30))
        )
        health.down_until = now + backoff * (0.5 + 0.5 * self._rng.random())
        if address == self.metadata_primary and len(self.nodes) > 1:
            self.stale = True

    def on_answer(self, address: NodeAddress) -> None:
        """``address`` answered (with anything well-formed)."""
        health = self._health.get(address)
        if health is not None:
            health.failures = 0
            health.down_until = 0.0
        if address in self.nodes:
            self.home = address

    def on_primary(
        self, route: RouteKey, address: NodeAddress, view: int, replica: int | None = None
    ) -> None:
        """A write on ``route`` succeeded: ``address`` answered with a reply made in
        ``view`` by ``replica`` (the reply header's replica index).

        A node that is a backup of the group forwards the write to the primary's node, so
        the replica that made the reply may not be the node that answered; once the
        roster is known (replica order), the reply's replica names the primary and the
        next write goes there directly. Without it, the answering node is taken.
        """
        primary = address
        if replica is not None and self.roster_known and 0 <= replica < len(self.nodes):
            primary = self.nodes[replica]
        if route == METADATA:
            self.metadata_primary = primary
            return
        assert isinstance(route, PartitionGroup)
        _remember(self._primaries, route, primary)
        if primary in self.nodes:
            residue = (self.nodes.index(primary) - view) % len(self.nodes)
            _remember(self._residues, route, residue)

    def on_not_primary(self, route: RouteKey, address: NodeAddress, view: int) -> None:
        """``address`` answered 58: it is not the primary of ``route``'s group in ``view``.

        The metadata group is group 0, so its primary in ``view`` is ``view % n``; a
        partition group's primary is predicted from its learned residue. A prediction
        that names ``address`` itself is ignored (the reply's view is then useless).
        """
        n = len(self.nodes)
        if route == METADATA:
            predicted = self.nodes[view % n]
            if predicted != address:
                self.metadata_primary = predicted
            elif self.metadata_primary == address:
                self.stale = n > 1
            return
        assert isinstance(route, PartitionGroup)
        if self._primaries.get(route) == address:
            del self._primaries[route]
        residue = self._residues.get(route)
        if residue is not None:
            predicted = self.nodes[(view + residue) % n]
            if predicted != address:
                _remember(self._primaries, route, predicted)

    def cached_primary(self, route: PartitionGroup) -> NodeAddress | None:
        """The learned primary of a partition group, if any (for tests and stats)."""
        return self._primaries.get(route)
