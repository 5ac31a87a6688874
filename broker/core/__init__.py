"""The node core: what a viewstream node decides, as sans-IO code.

Everything here is pure (no trio, sockets, clocks, os or threads), so the runtime and the
simulator run the same decisions. Modules are named by concept:

- ``identity``: what tells a retried request from another that reuses its number.
- ``ticks``: which groups are due on which tick, so an idle group costs a tick nothing.
"""
