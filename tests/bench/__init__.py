"""Tests of viewstream-bench (bench/cli.py and bench/load/)."""
