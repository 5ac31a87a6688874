"""``python -m sim``: the same as ``viewstream-sim``."""

from sim.cli import entry

entry()
