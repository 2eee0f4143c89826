"""Which readout should read a decision from a small model: the study behind the adapter's
readouts (study.py) and its report (results/readout_study.md)."""
