"""optimizers for sqlweave."""
