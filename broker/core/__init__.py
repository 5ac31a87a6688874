"""The node core: what a viewstream node decides, as sans-IO code.

Everything here is pure (no trio, sockets, clocks, os or threads), so the runtime and the
simulator run the same decisions. Modules are named by concept:

- ``admission``: what a connection may cost the node before it has logged in.
- ``capacity``: whether a topic's partitions fit the node's reserve.
- ``commands``: which route each command takes, Iggy's answers to codes whatever their
  body (before login, legacy logins, codes not served), and what a write proposes to
  which group.
- ``connections``: what the node keeps of a connection, and what it answers with.
- ``diagnostics``: GET_SNAPSHOT_FILE's sections and the zip archive that carries them.
- ``execution``: what carrying out a replica's actions means for the node, and the storage
  work it leaves to the host.
- ``forwarding``: requests a backup hands to its primary's node, each answered once.
- ``groups``: a hosted group's client requests: queued, admitted, answered once.
- ``identity``: what tells a retried request from another that reuses its number.
- ``maintenance``: when the node's own requests are due: the root user, purges, auto-commits.
- ``reads``: whether a replica may serve a read of its committed state (the read barrier).
- ``reconcile``: group ids, and which partition groups to open, close or purge.
- ``refusals``: the budget of refusal log lines.
- ``sessions``: whether a request may act in the session it names.
- ``system``: the node's own client: its session, request numbers and retry rule.
- ``ticks``: which groups are due on which tick, so an idle group costs a tick nothing.
"""
