"""Bridges between edgeq queues and other messaging systems (MQTT 5 in and out): docs/bridges.md."""
