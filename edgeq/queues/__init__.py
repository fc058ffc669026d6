"""Queues: attributes, the catalog, the flash budget, expiry check points, backout and the dead-letter queue."""
