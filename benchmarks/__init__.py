"""edgeq's benchmark harness: edgeq side by side with its peers, every case in a fresh process.

Run ``make bench`` (or ``python -m benchmarks --help``); see ``benchmarks/README.md``.
"""
