"""The management API, ``/api/v1``: JSON over the home server's store, served by the console's process
(docs/management-api.md)."""
