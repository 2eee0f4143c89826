"""Decision adapter: llama.cpp decision scoring and chat behind the SageMaker contract."""

__version__ = "0.1.0"
