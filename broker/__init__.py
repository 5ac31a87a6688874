"""The viewstream broker: pure state machines (``broker.state``) and the trio runtime."""

__version__ = "0.1.0"
