"""Settings shared by every test."""

from __future__ import annotations

import os

# The HTTP listener's default address is a fixed port (127.0.0.1:3000): a node a test
# builds would take it, and two such nodes, or another test run on the machine, collide.
# Tests that serve HTTP pass a free port of their own.
os.environ["VIEWSTREAM_HTTP_ADDRESS"] = ""
