"""The evaluation tool, `python -m evaluation FILE.jsonl`: accuracy and calibration of a served
decision model on labelled decisions, and the maker of the calibration profiles the adapter and
the model archives ship (`--choose-readout`, `--fit-temperature`). docs/evaluation.md."""
