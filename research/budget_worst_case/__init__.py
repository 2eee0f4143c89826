"""The heaviest request the token budget admits, per readout, timed."""
