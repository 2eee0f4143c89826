"""Wire formats: each one a pydantic request schema plus an encoder of engine results."""
