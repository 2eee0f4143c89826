"""`GET /execution-parameters`: what a SageMaker batch transform job should send this container,
when the job does not say. SageMaker asks once the container answers /ping."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..settings import Settings

MODEL_SLOTS = 1  # one llama.cpp context, one job at a time (admission.py)
MIB = 1 << 20


def preferred(settings: Settings) -> dict[str, Any]:
    """One transform per model slot (a second would wait for it, or get a 503); several lines
    per request (one admission for all of them); payloads in whole MB within the JSON Lines
    body limit, rounded down (SageMaker's MB may be 10^6 or 2^20 bytes: either fits).
    BatchStrategy is written as AWS's documented answer writes it (`MULTI_RECORD`), not as
    CreateTransformJob's own enum (`MultiRecord`)."""
    return {
        "MaxConcurrentTransforms": MODEL_SLOTS,
        "BatchStrategy": "MULTI_RECORD",
        "MaxPayloadInMB": settings.max_jsonlines_bytes // MIB,
    }


async def execution_parameters(request: Request) -> Response:
    return JSONResponse(preferred(request.app.state.settings))
