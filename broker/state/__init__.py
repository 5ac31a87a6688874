"""Pure, deterministic state machines replicated by the consensus groups."""
