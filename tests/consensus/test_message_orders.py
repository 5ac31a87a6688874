"""Hypothesis chooses which message is delivered, dropped or duplicated next, and when
clients retry, replicas crash and time passes; replicas must agree on every committed op,
apply each request once, and finish every request once the network heals."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.consensus.harness import Cluster

CLIENTS = (1, 2, 3)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=st.data(),
    replica_count=st.sampled_from([1, 3, 5]),
    persisted=st.booleans(),
)
def test_any_message_order_keeps_agreement_and_exactly_once(
    data: st.DataObject, replica_count: int, persisted: bool
) -> None:
    cluster = Cluster(replica_count, persisted=persisted, seed=replica_count)
    next_request = dict.fromkeys(CLIENTS, 1)
    down: list[int] = []
    for _ in range(data.draw(st.integers(20, 120), label="steps")):
        choice = data.draw(
            st.sampled_from(
                ["deliver", "deliver", "deliver", "drop", "duplicate", "tick", "request", "crash"]
            )
        )
        if choice in ("deliver", "drop", "duplicate") and cluster.network:
            index = data.draw(st.integers(0, len(cluster.network) - 1), label="which")
            envelope = cluster.network.pop(index)
            if choice == "duplicate":
                cluster.network.append(envelope)
            if choice != "drop":
                cluster.deliver(envelope)
        elif choice == "tick":
            for node in cluster.live():
                cluster.tick_node(node.index)
        elif choice == "request":
            client = data.draw(st.sampled_from(CLIENTS))
            if cluster.committed(client, next_request[client]):
                next_request[client] += 1
            cluster.request(client, next_request[client], body=bytes([client]))
        elif choice == "crash" and replica_count > 1:
            if down:
                cluster.restart(down.pop())
            elif data.draw(st.booleans()):
                victim = data.draw(st.integers(0, replica_count - 1))
                cluster.crash(victim, lose_unsynced=persisted)
                down.append(victim)
        cluster.complete_io()
        cluster.check_safety()
    # Heal: everything restarts, the network is reliable, clients keep retrying.
    for index in down:
        cluster.restart(index)
    for _ in range(60):
        pending = [c for c in CLIENTS if not cluster.committed(c, next_request[c])]
        if not pending and cluster.converged():
            break
        for client in pending:
            cluster.request(client, next_request[client], body=bytes([client]))
        cluster.tick(25)
    assert all(cluster.committed(c, next_request[c]) for c in CLIENTS), "liveness"
    cluster.check_safety()
