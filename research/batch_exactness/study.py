"""Does a sequence get the same logits from llama.cpp's CPU backend whatever other sequences
share its batches and its KV cache? Measured per model and context configuration.

One request, A (a state prefix, a question suffix, then one generated token, as chat decodes),
is decoded alone, then beside a second request, B, in four ways a scheduler could share the
context:

- `cache`: B's state sits in the KV cache (its own sequence) while A is decoded alone, batch by
  batch as today: only the cells A lands in differ.
- `prefill`: A's and B's states in one batch.
- `suffix`: A's and B's question suffixes in one batch (their states decoded apart).
- `token`: one token of A and one of B in one batch (the step of two chat streams).

A scenario is exact when every logit A reads (each suffix position and the token's) has the
same bits as alone. `python -m research.batch_exactness` writes the sweep to
research/batch_exactness/results/<date>-<machine>-batch-exactness.json;
tests/adapter/model/test_batch_exactness.py asserts the finding the scheduler relies on.
"""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from decision_adapter.model.engine import Engine, EngineConfig

RESULTS = Path(__file__).resolve().parent / "results"  # the study's committed results

SCENARIOS = ("cache", "prefill", "suffix", "token")
# Sizes past llama.cpp's CPU kernel switches: A's state over 512 cells (flash attention splits
# the cache between threads there), its suffix over 64 tokens (the tiled kernel).
A_STATE = "Ledger: " + " ".join(f"invoice {i} paid {i % 13} times;" for i in range(90))
A_SUFFIX = (
    "\nQuestion: Which queue should handle this request?\n"
    + "".join(
        f"{label}. the {name} team, for {name} questions\n"
        for label, name in zip(
            "ABCDEFGH",
            (
                "account access",
                "billing",
                "shipping",
                "returns",
                "technical support",
                "sales",
                "legal",
                "other",
            ),
            strict=False,
        )
    )
    + "Answer:"
)
B_STATE = "Order 1182: two boxes of tea, shipped to Lyon, late by a week. " * 12
B_SUFFIX = "\nQuestion: Is the customer angry?\nAnswer:"
A_SEQ, B_SEQ = 0, 1
A_BRANCH, B_BRANCH = 2, 3


@dataclass(frozen=True)
class Configuration:
    kv_unified: bool
    flash_attention: bool
    extra_buffer_types: bool
    partial_ubatch: bool  # n_ubatch 16, below every batch here but the single tokens'
    swa_full: bool = True  # False: sliding-window layers keep only their window

    @property
    def name(self) -> str:
        return (
            f"kv_{'unified' if self.kv_unified else 'per_sequence'}"
            f"-fa_{'on' if self.flash_attention else 'off'}"
            f"-repack_{'on' if self.extra_buffer_types else 'off'}"
            f"-ubatch_{'16' if self.partial_ubatch else 'full'}"
        )


CONFIGURATIONS = tuple(
    Configuration(*values) for values in itertools.product((True, False), repeat=4)
)


def open_engine(gguf: Path, configuration: Configuration, threads: int) -> Engine:
    return Engine(
        gguf,
        EngineConfig(
            # Per-sequence KV divides the context between the sequences: 4 x 2048 cells.
            n_ctx=8192,
            n_batch=2048,
            n_threads=threads,
            n_gpu_layers=0,
            n_seq_max=4,
            extra_buffer_types=configuration.extra_buffer_types,
            n_ubatch=16 if configuration.partial_ubatch else None,
            kv_unified=configuration.kv_unified,
            flash_attention=configuration.flash_attention,
            swa_full=configuration.swa_full,
        ),
    )


class Probe:
    """A's logits under one scenario, on one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        start = [engine.bos_token] if engine.adds_bos else []
        self.a_state = start + engine.tokenize(A_STATE, special=False)
        self.b_state = start + engine.tokenize(B_STATE, special=False)
        self.a_suffix = engine.tokenize(A_SUFFIX, special=False)
        self.b_suffix = engine.tokenize(B_SUFFIX, special=False)

    def _entries(self, seq: int, tokens: list[int], start: int, logits: bool):
        return [(t, start + i, (seq,), logits) for i, t in enumerate(tokens)]

    def _rows(self, indexes) -> np.ndarray:
        return np.stack([self.engine._logits(i).copy() for i in indexes])

    def run(self, scenario: str | None) -> np.ndarray:
        """A's suffix logits and its next token's, stacked; scenario None: A alone."""
        engine = self.engine
        engine.reset()
        a_len, b_len = len(self.a_state), len(self.b_state)
        a_state = self._entries(A_SEQ, self.a_state, 0, False)
        b_state = self._entries(B_SEQ, self.b_state, 0, False)
        if scenario == "prefill":
            engine._decode(b_state + a_state)
        else:
            if scenario is not None:
                engine._decode(b_state)
            engine._decode(a_state)
        engine.copy_sequence(A_SEQ, A_BRANCH)
        a_suffix = self._entries(A_BRANCH, self.a_suffix, a_len, True)
        if scenario in ("suffix", "token"):
            engine.copy_sequence(B_SEQ, B_BRANCH)
            b_suffix = self._entries(B_BRANCH, self.b_suffix, b_len, True)
        if scenario == "suffix":
            engine._decode(b_suffix + a_suffix)
            offset = len(b_suffix)
        else:
            if scenario == "token":
                engine._decode(b_suffix)
            engine._decode(a_suffix)
            offset = 0
        suffix_rows = self._rows(range(offset, offset + len(a_suffix)))
        token = int(np.argmax(suffix_rows[-1]))
        a_token = (token, a_len + len(self.a_suffix), (A_BRANCH,), True)
        if scenario == "token":
            b_token = (token, b_len + len(self.b_suffix), (B_BRANCH,), True)
            engine._decode([b_token, a_token])
            token_row = self._rows([1])
        else:
            engine._decode([a_token])
            token_row = self._rows([0])
        engine.reset()
        return np.concatenate([suffix_rows, token_row])


def measure(gguf: Path, configuration: Configuration, threads: int) -> dict[str, float]:
    """Per scenario, the largest difference from alone in any logit A read (0.0: bit-exact)."""
    engine = open_engine(gguf, configuration, threads)
    try:
        probe = Probe(engine)
        alone = probe.run(None)
        if not np.array_equal(alone, probe.run(None)):
            raise AssertionError(f"{gguf.name}: A alone differs between two runs")
        return {
            scenario: float(np.max(np.abs(probe.run(scenario) - alone))) for scenario in SCENARIOS
        }
    finally:
        engine.close()


def sweep(models: dict[str, Path], threads: int) -> dict:
    rows = []
    for name, gguf in models.items():
        for configuration in CONFIGURATIONS:
            differences = measure(gguf, configuration, threads)
            rows.append({"model": name, "configuration": configuration.name, **differences})
            print(name, configuration.name, differences, file=sys.stderr, flush=True)
    return {"threads": threads, "scenarios": list(SCENARIOS), "rows": rows}


def main() -> None:
    from launcher.models import local_model
    from tests.support.model_matrix import SERVED, ensure_matrix

    matrix = ensure_matrix()
    models = {family.name: matrix[family.name] for family in SERVED}
    models.update({name: local_model(name) for name in ("gemma3", "smollm2")})
    import datetime

    from bench.report import BATCH_EXACTNESS_SUFFIX
    from bench.workloads import machine_name

    result = sweep(models, threads=2)
    today = datetime.date.today().isoformat()
    output = RESULTS / f"{today}-{machine_name()}{BATCH_EXACTNESS_SUFFIX}"
    output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
