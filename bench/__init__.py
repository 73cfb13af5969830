"""Benchmarks, each run as ``python -m bench.<name>``; measured numbers in bench/RESULTS.md."""
