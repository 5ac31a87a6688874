"""Benchmarks: micro-benchmarks of the core pieces and the viewstream-bench CLI."""
