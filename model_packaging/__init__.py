"""Turns a pinned model spec into a verified SageMaker model archive (`model.tar.gz`).

The archive's manifest (schema, hashing) is the `model_manifest` package, which the adapter
imports too.
"""

__version__ = "1.0.0"
