"""Turns a pinned model spec into a verified SageMaker model archive (`model.tar.gz`).

Kept import-light on purpose: the adapter image ships this file together with
`manifest.py` only, to read the archive's manifest at start-up.
"""

__version__ = "1.0.0"
