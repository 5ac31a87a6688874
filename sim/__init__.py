"""Deterministic simulator: the real consensus and state machines, driven from a seed."""
