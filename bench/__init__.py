"""Benchmarks (run by hand, never as timed tests): ``python -m bench.bench_engine --help``."""
