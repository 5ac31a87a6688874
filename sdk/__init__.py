"""The viewstream Python SDK and its sans-IO wire codec (``sdk.wire``)."""
