"""settee.spec: the contract (FORMAT.md, SEMANTICS.md) and the pure functions
that engine and reference share."""
