"""The decision container's settings: what every endpoint that runs the decision adapter sets
in its environment, each declared once here (or on the subclass that alone has it), and the
one place the endpoint stack reads that environment from (`environment()`)."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, model_validator

from stacks.kv_memory import check_fits

from .concurrency import Concurrency
from .endpoint import EndpointSettings

# The adapter's threads: each endpoint sets its own default (a GPU instance has fewer cores to
# spare), so the constraints and the variable are declared once, on the type.
Threads = Annotated[int, Field(ge=1, le=192, description="`DECISION_N_THREADS`")]


class DecisionContainer(EndpointSettings):
    """An endpoint that runs the decision adapter: its threads, context, concurrency, and a KV
    cache for them that fits the memory of every instance type it may land on."""

    n_threads: Threads = 8
    n_ctx: int = Field(4096, ge=256, le=262_144, description="`DECISION_N_CTX`")
    concurrency: Concurrency = Concurrency()

    @property
    def memory_types(self) -> list[str]:
        """The instance types whose memory the KV cache must fit."""
        raise NotImplementedError

    @property
    def offloaded_layers(self) -> int:
        """`DECISION_N_GPU_LAYERS`: the model's layers on the GPU (-1: all; 0 on a CPU)."""
        return 0

    @property
    def kv_on_gpu(self) -> bool:
        return self.offloaded_layers != 0

    def environment(self) -> dict[str, str]:
        """The adapter's variables (its settings.py reads them); a subclass adds its own.
        SageMaker does not tell a container its endpoint's name; the metrics' Endpoint
        dimension must match the alarms'."""
        return {
            "DECISION_METRICS_ENDPOINT": self.endpoint_name,
            "DECISION_N_THREADS": str(self.n_threads),
            "DECISION_N_CTX": str(self.n_ctx),
            "DECISION_N_GPU_LAYERS": str(self.offloaded_layers),
            **self.concurrency.environment(),
        }

    @model_validator(mode="after")
    def _kv_cache_fits(self) -> Self:
        check_fits(
            self.memory_types,
            on_gpu=self.kv_on_gpu,
            n_ctx=self.n_ctx,
            scoring_requests=self.concurrency.max_scoring_requests,
            chat_streams=self.concurrency.max_chat_streams,
            bytes_per_token=self.concurrency.kv_bytes_per_token,
        )
        return self
