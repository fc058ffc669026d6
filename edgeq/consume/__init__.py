"""Handing messages to application code: waiting gets, the asyncio doorbell, consumer loops, listeners."""
