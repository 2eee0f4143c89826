"""The served model: engine, prompt renderer and identity, and the operations the routes call."""

from __future__ import annotations

import asyncio
import importlib.metadata
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

from . import __version__
from .admission import ModelRunner
from .calibration import Calibration, load_calibration
from .engine import Engine, EngineConfig
from .errors import RequestError
from .formats import decision as decision_format
from .formats import systemone
from .formats.openai_chat import ChatRequest
from .generation import GenerationResult, text_deltas
from .model_files import ModelFile, load_model_file
from .prompts import PROMPT_VERSION, PromptRenderer, state_text
from .scoring import (
    BudgetError,
    Question,
    QuestionScores,
    ScoringPlan,
    build_plan,
    score,
)
from .settings import Settings
from .state_cache import StateCache
from .tokenizer import TokenLimitExceeded

T = TypeVar("T")

# llama.cpp's `general.file_type` values for the quantizations people actually serve.
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    28: "IQ4_XS",
    32: "BF16",
}


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


def _request_timing(groups: list[Scored]) -> dict[str, Any]:
    """One request's timing: its only state's, or the states' model work added up."""
    if len(groups) == 1:
        return groups[0].timing
    timing = dict(groups[0].timing)
    for key in ("prefill_ms", "branches_ms", "prefix_tokens"):
        timing[key] = round(sum(group.timing[key] for group in groups), 3)
    timing["state_cache"] = ",".join(group.timing["state_cache"] for group in groups)
    timing["states"] = len(groups)
    return timing


@dataclass
class Scored:
    plan: ScoringPlan
    scores: list[QuestionScores]
    timing: dict[str, Any]


class DecisionService:
    """Everything a request needs after validation; owns the engine and its admission."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.model_file: ModelFile = load_model_file(settings)
        self.calibration: Calibration = load_calibration(
            settings.calibration_temperature, self.model_file.path, self.model_file.sha256
        )
        self.engine = Engine(
            self.model_file.path,
            EngineConfig(
                n_ctx=settings.n_ctx,
                n_batch=settings.n_batch,
                n_threads=settings.n_threads,
                n_gpu_layers=settings.n_gpu_layers,
                n_seq_max=settings.n_seq_max,
            ),
        )
        self.renderer = PromptRenderer(self.engine)
        self.state_cache = StateCache(settings.state_cache_budget, model_id=self.model_file.sha256)
        self.runner = ModelRunner(
            max_queue=settings.max_queue,
            wait_s=settings.admission_wait_s,
            retry_after_s=settings.retry_after_s,
        )
        # Rendering and tokenizing run here, never on the event loop (100 KB of newlines cost
        # llama.cpp seconds before UserTextTokenizer) nor on the model thread (a request over
        # its budget must not hold the model). llama.cpp's tokenizer only reads the vocabulary,
        # which decoding leaves alone, and releases the GIL.
        self._prepare = ThreadPoolExecutor(max_workers=2, thread_name_prefix="prepare")
        self.model_name = self._model_name()
        self.model_info = self._model_info()

    def close(self) -> None:
        self.runner.close()
        self._prepare.shutdown(wait=True)
        self.engine.close()

    def stop_work(self) -> None:
        """Shutdown deadline: end the model work in progress and refuse more."""
        self.runner.stop_work()
        self.engine.interrupt()

    async def _prepared(self, function: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._prepare, function)

    # --- identity ----------------------------------------------------------------------
    def _model_name(self) -> str:
        manifest = self.model_file.manifest
        if manifest is not None:
            return manifest.model.name
        return self.model_file.path.stem

    @property
    def release_date(self) -> str:
        """When this model was packaged (its manifest), else the GGUF file's date."""
        manifest = self.model_file.manifest
        if manifest is not None:
            return manifest.created_at.date().isoformat()
        modified = self.model_file.path.stat().st_mtime
        return datetime.fromtimestamp(modified, timezone.utc).date().isoformat()

    def _model_info(self) -> dict[str, Any]:
        file_type = self.engine.metadata("general.file_type")
        manifest = self.model_file.manifest
        return {
            "name": self.model_name,
            "gguf_file": self.model_file.path.name,
            "gguf_bytes": self.model_file.size_bytes,
            "gguf_sha256": self.model_file.sha256,
            "gguf_source": self.model_file.source,
            "description": self.engine.description,
            "quantization": FILE_TYPES.get(int(file_type), file_type) if file_type else None,
            "context_tokens": self.engine.n_ctx,
            "threads": self.settings.n_threads,
            "gpu_layers": self.settings.n_gpu_layers,
            "gpu_offload_supported": self.engine.gpu_offload,
            "prompt_mode": self.renderer.mode,
            "manifest": None
            if manifest is None
            else {
                "spec": manifest.spec,
                "manifest_version": manifest.manifest_version,
                "model": manifest.model.model_dump(),
                "tool": manifest.tool.model_dump(),
                "created_at": manifest.created_at.isoformat(),
            },
            "llama_cpp_python_version": importlib.metadata.version("llama-cpp-python"),
            "adapter_version": __version__,
        }

    def stats(self) -> dict[str, Any]:
        return {
            "state_cache": self.state_cache.stats.as_dict(),
            "engine": {
                "decode_calls": self.engine.stats.decode_calls,
                "tokens_decoded": self.engine.stats.tokens_decoded,
                "decode_seconds": round(self.engine.stats.seconds, 3),
            },
            "admission": {
                "in_flight": self.runner.in_flight,
                "waiting": self.runner.waiting,
                **self.runner.stats.as_dict(),
            },
        }

    # --- decisions ---------------------------------------------------------------------
    async def _score(
        self, groups: list[tuple[Any, list[Question]]], *, field: str, what: str
    ) -> list[Scored]:
        """Every wire format's scoring: limits, plans, budget, admission, then the engine.

        One group per distinct state: each is prefilled once and scored exactly as if it came
        alone, all in one model job.
        """
        received = time.perf_counter()
        count = sum(len(questions) for _, questions in groups)
        if count > self.settings.max_decisions:
            raise RequestError(
                422,
                f"{field}: {count} {what}, at most "
                f"{self.settings.max_decisions} per request (DECISION_MAX_DECISIONS)",
                field=field,
            )
        limit = self.settings.request_token_limit
        try:
            plans = await self._prepared(
                lambda: [
                    build_plan(self.renderer, state, questions, limit)
                    for state, questions in groups
                ]
            )
        except TokenLimitExceeded:
            raise RequestError(
                413,
                f"{field}: the request needs more than {limit} tokens, the " f"limit is {limit}",
                field=field,
                error_type="token_limit_exceeded",
            ) from None
        needed = sum(plan.total_tokens for plan in plans)
        if needed > limit:
            error = BudgetError(field, needed, limit, "the request")
            raise RequestError(413, str(error), field=field, error_type="token_limit_exceeded")
        prepared_ms = _ms(received)

        def score_all() -> list[tuple[list[QuestionScores], Any]]:
            return [score(self.engine, plan, cache=self.state_cache) for plan in plans]

        outcomes, waited_ms = await self.runner.run(score_all)
        total_ms = _ms(received)
        return [
            Scored(
                plan,
                scores,
                {
                    "prepare_ms": prepared_ms,
                    "admission_wait_ms": round(waited_ms, 3),
                    "prefill_ms": round(timing.prefill_ms, 3),
                    "branches_ms": round(timing.branches_ms, 3),
                    "state_cache": timing.state_cache,
                    "total_ms": total_ms,
                    "prefix_tokens": len(plan.prefix_tokens),
                    "request_tokens": needed,
                },
            )
            for plan, (scores, timing) in zip(plans, outcomes)
        ]

    async def decide(self, request: decision_format.DecisionRequest) -> dict[str, Any]:
        decisions = request.items
        field = "decision" if request.decision is not None else "decisions"
        # Grouped by the text the model reads: states equal in Python ({"paid": true} and
        # {"paid": 1}, 1 and 1.0, other key orders) render differently and are scored apart.
        groups: dict[str, list[int]] = {}
        texts = await self._prepared(lambda: [state_text(d.state) for d in decisions])
        for index, text in enumerate(texts):  # rendering a 1 MB state takes 0.2 s: off the loop
            groups.setdefault(text, []).append(index)
        scored = await self._score(  # a rendered state renders as itself: no second rendering
            [
                (text, [decisions[i].as_question() for i in members])
                for text, members in groups.items()
            ],
            field=field,
            what="decisions",
        )
        results: list[dict[str, Any]] = [{}] * len(decisions)
        for members, group in zip(groups.values(), scored):
            for position, index in enumerate(members):
                results[index] = decision_format.encode_result(
                    decisions[index],
                    group.scores[position],
                    group.plan,
                    position,
                    engine_piece=self.engine.piece,
                    model=self.model_info,
                    timing=group.timing,
                    prompt_version=PROMPT_VERSION,
                    temperature=self.calibration.temperature,
                )
        if request.decision is not None:
            return {"result": results[0]}
        return {"results": results, "timing": _request_timing(scored)}

    async def system_one(self, request: systemone.SystemOneRequest) -> dict[str, Any]:
        if request.model not in (self.model_name, systemone.MODEL_ALIAS):
            raise RequestError(
                404,
                f"model: {request.model!r} is not served here; use {self.model_name!r} or "
                f"{systemone.MODEL_ALIAS!r} (GET /v1/models)",
                field="model",
                error_type="model_not_found",
            )
        questions = list(request.questions.values())
        (scored,) = await self._score(
            [(request.state, [q.as_question() for q in questions])],
            field="questions",
            what="questions",
        )
        temperature = self.calibration.temperature
        answers = {
            question_id: systemone.encode_answer(question, scores, plan, temperature=temperature)
            for question_id, question, scores, plan in zip(
                request.questions, questions, scored.scores, scored.plan.questions
            )
        }
        return systemone.encode_response(
            model=self.model_name,
            answers=answers,
            # Every token the model read: the shared state once, each question, label branches.
            input_tokens=scored.plan.total_tokens,
            extensions={
                "calibration": self.calibration.as_extension(),
                "prompt_version": PROMPT_VERSION,
                "timing": scored.timing,
                "model_info": self.model_info,
            },
        )

    def models(self) -> dict[str, Any]:
        info = self.model_info
        description = f"{info['description']} ({self.renderer.mode} prompt), served by llama.cpp"
        return systemone.encode_models(
            name=self.model_name,
            description=description,
            release_date=self.release_date,
            extensions={
                "gguf_sha256": info["gguf_sha256"],
                "context_tokens": info["context_tokens"],
            },
        )

    # --- chat --------------------------------------------------------------------------
    async def prepare_chat(self, request: ChatRequest) -> tuple[list[int], int]:
        limit = self.settings.request_token_limit

        def tokens_of_prompt() -> list[int]:
            messages = [{"role": m.role, "content": m.text} for m in request.messages]
            return self.renderer.tokens(
                self.renderer.chat(messages).prefix, starts_prompt=True, limit=limit
            )

        try:
            tokens = await self._prepared(tokens_of_prompt)
        except TokenLimitExceeded:
            tokens = None
        if tokens is None or len(tokens) >= limit:
            needed = f"more than {limit}" if tokens is None else str(len(tokens))
            raise RequestError(
                413,
                f"messages: the prompt needs {needed} tokens, the limit is {limit}",
                field="messages",
                error_type="token_limit_exceeded",
            )
        cap = self.settings.max_chat_tokens
        max_tokens = request.token_limit(cap)
        if max_tokens > cap:
            field = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
            raise RequestError(
                422,
                f"{field}: {max_tokens} requested, at most {cap} " "(DECISION_MAX_CHAT_TOKENS)",
                field=field,
            )
        # Generation stops at the context's end; report that as finish_reason "length".
        return tokens, min(max_tokens, limit - len(tokens))

    def chat_deltas(
        self, request: ChatRequest, tokens: list[int], max_tokens: int, result: GenerationResult
    ) -> Iterator[str]:
        """Runs on the model thread: sample and decode the answer text piece by piece."""
        sampled = self.engine.generate(
            tokens,
            max_tokens=max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            top_k=request.top_k,
            seed=request.seed if request.seed is not None else time.time_ns() & 0xFFFFFFFF,
        )
        stops = request.stop or self.renderer.chat_stops
        return text_deltas(sampled, self.engine.piece, stops, max_tokens, result)
