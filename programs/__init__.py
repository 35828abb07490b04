"""programs for sqlweave."""
