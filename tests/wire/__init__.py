"""Tests of the sans-IO wire codec (``sdk.wire``)."""
