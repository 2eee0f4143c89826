"""llama-server's sampling defaults, for the chat fields a request leaves out.

Read from the engine's llama.cpp, b11434 (`common/common.h`,
`common_params_sampling`; tests/adapter/test_sampling_defaults.py reads them there again). Its
default chain is penalties, DRY, top-n-sigma, top_k, typical_p, top_p, min_p, XTC, temperature, then
the draw. At their defaults penalties, DRY, top-n-sigma, typical_p and XTC leave the candidates as
they are, so the chain here is top_k, top_p, min_p, temperature, draw (engine.generate). top_k
first is what keeps top_p cheap: nucleus sampling sorts 40 candidates, not Gemma's 262,144.
"""

from __future__ import annotations

TEMPERATURE = 0.8
TOP_K = 40  # 0: no top-k (llama.cpp: <= 0 keeps the whole vocabulary)
TOP_P = 0.95  # 1: no nucleus
MIN_P = 0.05  # 0: no min-p
# The samplers of llama-server's default chain that change nothing at their defaults.
NEUTRAL_AT_DEFAULTS = ("penalties", "dry", "top_n_sigma", "typical_p", "xtc")
CHAIN = ("top_k", "top_p", "min_p", "temperature")  # then the draw
