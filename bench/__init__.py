"""The benchmark `make bench` runs, writing JSON results to bench/results/."""
