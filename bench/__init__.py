"""settee's benchmark suite: ``settee bench`` / ``python -m bench`` (see bench/README.md)."""
