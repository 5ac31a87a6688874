"""Segment journals: durable, checksummed, recoverable logs, one per VSR group."""
