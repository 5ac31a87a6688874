"""Refusal logging: every refusal an operator should see, once, without flooding the log.

Purpose: a client refused for something other than a plain business answer (an invalid
frame, an eviction, a closed connection, a request refused for its identity, a failed
session check) is worth one log line naming the client id, the command and the reason,
never a payload or a password. A client that sends a flood of bad frames must not fill
the disk, so the lines are rate-limited per connection.

Invariants:

1. At most ``REFUSAL_LINES_PER_WINDOW_MAX`` lines per connection per
   ``REFUSAL_WINDOW_S``; the refusals beyond are counted, and the first line of the next
   window says how many were left out.
2. Pure: the time is an argument, and the caller writes the line it is handed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

REFUSAL_WINDOW_S: Final = 60.0
"""The window over which a connection's refusal lines are counted."""
REFUSAL_LINES_PER_WINDOW_MAX: Final = 10
"""Refusal lines one connection may write per window; the rest are only counted."""


@dataclass(slots=True)
class RefusalLimiter:
    """One connection's refusal-line budget (invariant 1)."""

    window_started_s: float = float("-inf")
    lines: int = 0
    suppressed: int = 0

    def admit(self, now_s: float) -> tuple[bool, int]:
        """Whether a refusal at ``now_s`` gets a line, and how many were left out before
        it (to be said in that line); a refusal without a line is counted."""
        if now_s - self.window_started_s >= REFUSAL_WINDOW_S:
            self.window_started_s = now_s
            self.lines = 0
        if self.lines >= REFUSAL_LINES_PER_WINDOW_MAX:
            self.suppressed += 1
            return False, 0
        self.lines += 1
        left_out, self.suppressed = self.suppressed, 0
        return True, left_out


def refusal_line(
    address: str, client_id: int, command: str, reason: str, *, left_out: int = 0
) -> str:
    """The text of one refusal line (no payload, no password: only these fields)."""
    line = f"refused {address} client {client_id:032x} {command}: {reason}"
    if left_out:
        line += f" ({left_out} more refusals of this connection not logged)"
    return line
