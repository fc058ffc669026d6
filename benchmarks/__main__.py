"""``python -m benchmarks``: run the benchmark suite (see :mod:`benchmarks.cli`)."""

from benchmarks.cli import main

raise SystemExit(main())
