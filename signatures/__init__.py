"""signatures for sqlweave."""
