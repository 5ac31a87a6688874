"""Named PRNG streams derived from one seed.

Purpose: every source of randomness in a run (swarm options, network, each fault class,
the workload, each replica incarnation, each simulated disk) gets its own
``random.Random``, derived from the run's u64 seed and a stable name. Turning one fault
class on or off, or changing how often it draws, therefore never reshuffles the draws of
another stream (the VOPR and Iggy's simulator do the same).

Invariants:

1. ``stream(seed, name)`` depends only on its arguments: no clock, no process state,
   no ``hash()`` (which ``PYTHONHASHSEED`` would change).
2. Streams of different names are independent for all practical purposes: the sub-seed
   is a BLAKE2b digest of the seed and the name.
"""

from __future__ import annotations

import hashlib
import random
from typing import Final

SEED_MAX: Final = (1 << 64) - 1


def derive(seed: int, name: str) -> int:
    """The 64-bit sub-seed of stream ``name`` under ``seed``."""
    assert 0 <= seed <= SEED_MAX
    digest = hashlib.blake2b(
        seed.to_bytes(8, "little") + name.encode(), digest_size=8, person=b"viewstream-sim"
    ).digest()
    return int.from_bytes(digest, "little")


def stream(seed: int, name: str) -> random.Random:
    """A fresh PRNG for stream ``name`` of the run ``seed``."""
    return random.Random(derive(seed, name))
