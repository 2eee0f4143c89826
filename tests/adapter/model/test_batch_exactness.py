"""Whether llama.cpp's CPU backend gives a sequence the same logits whatever other sequences share
its batches and KV cache (research/batch_exactness/study.py; the whole sweep of configurations is in
bench/results/, summed up in docs/scoring.md, "Requests at once").

The finding the adapter builds on, on every family of the matrix and the real bundled Gemma 3
270M and SmolLM2: with one KV stream per sequence (`kv_unified` off) every logit a request
reads is bit-identical alone and beside another request, whether they share the cache, a state
prefill, a question suffix or a generated token's step. With the unified cache that branching
needs (the decisions' context) they are not, so decisions keep their own forward passes.
"""

from __future__ import annotations

import pytest

from launcher.models import local_model
from research.batch_exactness.study import SCENARIOS, Configuration, measure
from tests.conftest import MODEL_THREADS
from tests.support.model_matrix import SERVED, ensure_matrix

# The chat streams' context as the adapter opens it (streams.StreamContext): llama.cpp's own
# flash-attention choice (on for the CPU) and repacked weights, one micro-batch per batch,
# sliding-window layers that keep only their window.
PER_SEQUENCE = Configuration(
    kv_unified=False,
    flash_attention=True,
    extra_buffer_types=True,
    partial_ubatch=False,
    swa_full=False,
)
UNIFIED = Configuration(
    kv_unified=True, flash_attention=True, extra_buffer_types=True, partial_ubatch=False
)
MODELS = [family.name for family in SERVED] + ["gemma3", "smollm2"]


def model_path(name: str):
    return ensure_matrix()[name] if name in ensure_matrix() else local_model(name)


@pytest.mark.parametrize("model", MODELS)
def test_one_stream_per_sequence_gives_the_same_bits_beside_another_request(model):
    differences = measure(model_path(model), PER_SEQUENCE, MODEL_THREADS)
    assert differences == dict.fromkeys(SCENARIOS, 0.0)


def test_the_unified_cache_moves_a_requests_logits_with_its_neighbours():
    """Why decisions are not batched across requests: on the bundled model a state decoded
    beside another's, or behind it in the cache, reads different logits."""
    differences = measure(model_path("gemma3"), UNIFIED, MODEL_THREADS)
    assert differences["prefill"] > 0.01
    assert max(differences.values()) > 0.1
