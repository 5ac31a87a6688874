"""Golden vectors: client frames captured from the official apache-iggy 0.9.0 SDK.

`record.py` regenerates them (`python -m tests.golden.record`); `manifest.json` names every
frame; `tests/wire/test_golden.py` keeps our codec byte-exact against them.
"""
