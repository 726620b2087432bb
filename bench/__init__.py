"""Weir's benchmark harness: `python -m bench.run` (see `docs/performance.md`)."""
