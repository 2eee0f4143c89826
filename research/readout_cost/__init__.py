"""`make bench`'s readout row alone: each readout's cost against the letters."""
