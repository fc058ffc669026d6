"""The storage layer: SQLite policy and the write paths, the schema, the SQL contract (``tx``)
and its rows."""
