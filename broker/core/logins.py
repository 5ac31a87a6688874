"""Failed logins: how long a client address waits before its next password check.

Purpose: the rule of the node's login throttle, as pure code: after ``FREE_FAILURES``
failed logins from one host (an unknown user counts), each further login from it first
waits ``BASE_DELAY_S``, doubling with each failure, up to ``MAX_DELAY_S``. The runtime
(``broker.runtime.throttle``) adds the concurrency bounds around it: two password checks
at once node-wide, one turn at a time per host.

Invariants:

1. A success from the host clears its count; a count is forgotten ``FORGET_AFTER_S``
   after its host's last failure.
2. At most ``HOSTS_MAX`` hosts are remembered, the least recently failed forgotten
   first, so memory is bounded however many addresses fail.
3. The clock is the caller's (seconds, as an argument): the same calls give the same
   delays, so the rule replays.

Theory of operation: the wait is per host, not per user, so a flood cannot lock a user
out from other addresses, and a user behind the attacker's address waits at most
``MAX_DELAY_S`` per attempt.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

FREE_FAILURES: Final = 3
BASE_DELAY_S: Final = 0.05
MAX_DELAY_S: Final = 2.0
FORGET_AFTER_S: Final = 60.0
HOSTS_MAX: Final = 10_000


@dataclass(slots=True)
class _Failures:
    count: int
    last_s: float


class LoginThrottle:
    """Failed-login counts per host and the wait they impose; see the module docstring."""

    def __init__(self) -> None:
        self._hosts: OrderedDict[str, _Failures] = OrderedDict()

    def delay_s(self, host: str, now_s: float) -> float:
        """How long a login from ``host`` waits before its password is checked."""
        failures = self._hosts.get(host)
        if failures is None:
            return 0.0
        if now_s - failures.last_s >= FORGET_AFTER_S:
            del self._hosts[host]
            return 0.0
        over = failures.count - FREE_FAILURES
        if over < 0:
            return 0.0
        return min(MAX_DELAY_S, BASE_DELAY_S * 2.0**over)

    def failed(self, host: str, now_s: float) -> None:
        failures = self._hosts.pop(host, None)
        if failures is None or now_s - failures.last_s >= FORGET_AFTER_S:
            failures = _Failures(0, now_s)
        failures.count += 1
        failures.last_s = now_s
        self._hosts[host] = failures  # now the most recently failed
        while len(self._hosts) > HOSTS_MAX:
            self._hosts.popitem(last=False)

    def succeeded(self, host: str) -> None:
        self._hosts.pop(host, None)

    def __len__(self) -> int:
        return len(self._hosts)
