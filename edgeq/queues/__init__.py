"""Queues: attributes, the catalog, the flash budget, expiry check points, backout, dead letters."""
