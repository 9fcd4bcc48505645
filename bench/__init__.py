"""rafka benchmarks (not timed tests): run with ``make bench`` / ``python -m bench``."""
