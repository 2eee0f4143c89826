"""Benchmarks that write JSON results to bench/results/ (run with `make bench`)."""
