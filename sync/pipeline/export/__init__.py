"""``edgeq export``: the journal as a date-partitioned Parquet dataset, and its retention."""
