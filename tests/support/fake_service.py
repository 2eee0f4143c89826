"""A stand-in model service with canned results, for tests whose subject is the HTTP layer
(routing, auth, error bodies, limits, OpenAPI), never the model: those keep the real GGUF."""

from __future__ import annotations

import contextlib
import string
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import numpy as np
from decision_adapter.contract import (
    Answer,
    Chat,
    Generated,
    ModelIdentity,
    QuestionScores,
    Scored,
    StateQuestion,
    TextDelta,
)
from decision_adapter.http.app import create_app
from decision_adapter.settings import Settings
from starlette.testclient import TestClient

TIMING = {"prefill_ms": 1.0, "branches_ms": 2.0, "state_cache": "off", "total_ms": 3.0}
IDENTITY = ModelIdentity(
    name="fake-model",
    description="a fake model (completion prompt), served by llama.cpp",
    release_date="2026-01-02",
    prompt_version="decision-prompt-v1",
    info={"name": "fake-model", "gguf_sha256": "ab" * 32, "context_tokens": 8192},
)
REPLY = ["Blue", " sky"]  # what every chat answers, in two pieces


class FakeService:
    """The service's two operations with canned results: the first option always wins."""

    def __init__(self, *, fails_with: Exception | None = None) -> None:
        self.identity = IDENTITY
        self.fails_with = fails_with  # raised by both operations, as the real service raises
        self.scored: list[list[StateQuestion]] = []
        self.chats: list[Chat] = []
        self.reservations = 0  # `reserved()` blocks entered
        self.closed = False

    async def score(
        self, questions: Sequence[StateQuestion], *, refuse_unfit: bool = False
    ) -> Scored:
        if self.fails_with is not None:
            raise self.fails_with
        self.scored.append(list(questions))
        answers = [self._answer(item) for item in questions]
        return Scored(answers, [TIMING] * len(answers), 10 * len(answers), TIMING)

    @contextlib.asynccontextmanager
    async def reserved(self) -> AsyncIterator[None]:
        self.reservations += 1
        yield

    @staticmethod
    def _answer(item: StateQuestion) -> Answer:
        count = len(item.question.option_ids)
        logits = np.arange(count, 0, -1, dtype=np.float64)
        # The readout a request asks for is named back, as the real service does.
        strategy = item.question.readout or "letters"
        scores = QuestionScores("single-token", logits - 10, logits, 0, strategy=strategy)
        labels = list(string.ascii_uppercase[:count])
        return Answer(scores, labels, "f" * 64, 10, "A")

    async def generate(self, chat: Chat) -> AsyncIterator[TextDelta | Generated]:
        if self.fails_with is not None:
            raise self.fails_with
        self.chats.append(chat)
        for text in REPLY:
            yield TextDelta(text)
        yield Generated("".join(REPLY), "stop", prompt_tokens=7, completion_tokens=len(REPLY))

    def stats(self) -> dict[str, Any]:
        return {"state_cache": {}, "engine": {}, "admission": {"in_flight": 0, "waiting": 0}}

    def stop_work(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def settings(**values: Any) -> Settings:
    return Settings(model_dir="/nonexistent-model-dir", n_threads=1, **values)


@contextlib.contextmanager
def app_client(
    service_factory: Callable[[Settings], Any] | None = None, *, ready: bool = True, **values: Any
) -> Iterator[TestClient]:
    """An in-process client of the app over `service_factory` (a FakeService by default);
    `ready`: wait until /ping says the service is loaded."""
    factory = service_factory or (lambda _: FakeService())
    app = create_app(settings(**values), service_factory=factory)
    with TestClient(app, base_url="http://adapter") as client:
        if ready:
            wait_for_ping(client)
        yield client


def wait_for_ping(client: TestClient, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while client.get("/ping").status_code != 200:
        assert time.monotonic() < deadline, "the fake service did not load"
        time.sleep(0.005)


def overload_bodies(retry_after_s: int) -> dict[str, str]:
    """The 503 body the adapter writes for an overload in each wire format (through
    /invocations, as SageMaker sends it), with `retry_after_s` configured: what InvokeEndpoint
    hands a client as a ModelError's OriginalMessage."""
    from decision_adapter.errors import Busy

    requests = {
        "decision": {
            "decision": {
                "id": "d",
                "state": "s",
                "question": "q?",
                "options": [{"id": "a"}, {"id": "b"}],
            }
        },
        "systemone": {
            "model": "jev-latest",
            "state": "s",
            "questions": {"q": {"type": "noul", "instructions": "q?"}},
        },
        "chat": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1},
        "decisions-openai": {
            "model": "m",
            "input": "s",
            "questions": [{"type": "predicate", "instructions": "q?"}],
        },
    }
    bodies = {}
    with app_client(lambda _: FakeService(fails_with=Busy(retry_after_s=retry_after_s))) as client:
        for name, body in requests.items():
            response = client.post("/invocations", json=body)
            assert response.status_code == 503
            assert response.headers["retry-after"] == str(retry_after_s)
            bodies[name] = response.text
    return bodies
