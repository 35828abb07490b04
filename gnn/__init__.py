"""gnn for sqlweave."""
