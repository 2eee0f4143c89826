"""`python -m ops measure`: the capacity measurement of a deployed endpoint, written as the file
synthesis derives that endpoint's defaults from (stacks/capacity.py for a decision endpoint,
stacks/text_generation_capacity.py for the text-generation one).

What is measured is named by the endpoint itself: the instance type from its configuration
(a pool's type the instances run on), its kind from its model's environment (llama-server flags,
SM_LLAMA_CPP_*, make it the DLC's text-generation endpoint) and the model from its answers (the
packaged manifest's spec; llama-server's alias), so the file lands under the (model, instance
type) pair it belongs to. It measures one instance, and each answer's latency is the
container's own timing (the adapter's `timing.total_ms`, llama-server's `timings`), not the
operator's round trip. A decision endpoint gets the load decision (ops/workloads.py, which
`make bench` sends too) at rising concurrency, closed loop; the text-generation endpoint gets
completions of its release's most tokens (n-predict) from one client, then one per slot. The
levels share a request count and a time limit equally; a 503 is waited out with ops/retry.py's
backoff, which honours the adapter's retry hint.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops.clients import Client
from ops.endpoint_status import endpoint_status
from ops.load import Level, figures, p95, run_level
from ops.retry import Backoff, call_with_retries
from ops.workloads import load_decision
from stacks import capacity, text_generation_capacity


class CannotMeasure(Exception):
    """The endpoint cannot give a measurement of one (model, instance type) pair."""


@dataclass(frozen=True)
class Placement:
    instance_type: str
    instances: int
    endpoint_config: str


@dataclass(frozen=True)
class Limits:
    max_clients: int = 8
    max_requests: int = 400
    max_seconds: float = 600.0

    def __post_init__(self) -> None:
        if self.max_clients < 1 or self.max_seconds <= 0:
            raise ValueError("--max-clients must be at least 1 and --max-minutes above 0")
        least = len(self.levels()) * self.max_clients
        if self.max_requests < least:
            raise ValueError(
                f"--max-requests must give each of the {len(self.levels())} levels a request "
                f"per client: at least {least}"
            )

    def reaching(self, clients: int) -> Limits:
        """These limits, their levels extended to at least `clients` (an endpoint that admits
        that many decisions at once is measured at that concurrency), each level keeping its
        share of requests."""
        if clients <= self.max_clients:
            return self
        per_level = max(self.max_requests // len(self.levels()), clients)
        return Limits(clients, per_level * len(_levels(clients)), self.max_seconds)

    def levels(self) -> list[int]:
        """1, 2, 4, ... up to max_clients (which ends the list)."""
        return _levels(self.max_clients)


def _levels(max_clients: int) -> list[int]:
    levels = [1]
    while levels[-1] * 2 < max_clients:
        levels.append(levels[-1] * 2)
    return levels + ([max_clients] if max_clients > 1 else [])


def placement(sagemaker: Client, endpoint: str) -> Placement:
    """The one instance type the endpoint's one variant runs on, and how many instances."""
    status = endpoint_status(sagemaker, endpoint)
    if status["status"] != "InService":
        raise CannotMeasure(f"endpoint {endpoint} is {status['status']}, not InService")
    variants = status["variants"]
    if len(variants) != 1:
        raise CannotMeasure(f"endpoint {endpoint} has {len(variants)} variants; measure one")
    running_on = variants[0]["running_on"]
    if len(running_on) != 1:
        raise CannotMeasure(
            f"endpoint {endpoint} runs on {', '.join(running_on) or 'no instance'}: a "
            "measurement is of one instance type (deploy a pool of one type to measure it)"
        )
    return Placement(running_on[0], variants[0]["current_instances"], status["endpoint_config"])


_SERVER_FLAG = "SM_LLAMA_CPP_"
# Flags that name the model rather than set how it runs: not part of what is measured.
_MODEL_FLAGS = ("alias", "hf-repo", "hf-file")


def model_environment(sagemaker: Client, endpoint_config: str) -> dict[str, str]:
    """The environment the endpoint's model runs with."""
    (variant, *_) = sagemaker.describe_endpoint_config(EndpointConfigName=endpoint_config)[
        "ProductionVariants"
    ]
    model = sagemaker.describe_model(ModelName=variant["ModelName"])
    environment: dict[str, str] = model.get("PrimaryContainer", {}).get("Environment", {})
    return environment


def server_flags(environment: dict[str, str]) -> dict[str, str] | None:
    """The llama-server flags the model runs with (the DLC reads SM_LLAMA_CPP_<FLAG>), or None
    for a container configured otherwise (the decision adapter)."""
    flags = {
        name.removeprefix(_SERVER_FLAG).lower().replace("_", "-"): value
        for name, value in environment.items()
        if name.startswith(_SERVER_FLAG)
    }
    return flags or None


def adapter_concurrency(environment: dict[str, str]) -> dict[str, int | bool]:
    """The decision adapter's concurrency settings as its environment sets them (unset: its
    defaults), recorded so synthesis can refuse the measurement for a release that differs."""
    settings = dict(capacity.DEFAULT_CONCURRENCY)
    for name in settings:
        value = environment.get(f"DECISION_{name.upper()}", "").strip()
        if value and name == "chat_shared_batches":
            settings[name] = value.lower() == "true"
        elif value:
            settings[name] = int(value)
    return settings


def served_model(answer: bytes) -> str:
    """The model spec the answering adapter serves, from its decision answer."""
    manifest = _served(answer).get("manifest") or {}
    if not manifest.get("spec"):
        raise CannotMeasure(
            "the answer names no packaged model (model.manifest.spec): the endpoint does not "
            "serve a model archive built by `python -m ops build model`"
        )
    spec: str = manifest["spec"]
    return spec


def decisions_at_once(answer: bytes) -> int:
    """How many decision requests the answering adapter scores at once, sharing batches
    (DECISION_MAX_SCORING_REQUESTS; 1 for an adapter that predates it)."""
    at_once = _served(answer).get("decisions_at_once", 1)
    return at_once if isinstance(at_once, int) and at_once >= 1 else 1


def _served(answer: bytes) -> dict[str, Any]:
    """The `model` object of a decision answer."""
    try:
        model = json.loads(answer)["result"]["model"]
        model.get("manifest")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CannotMeasure(f"not a decision answer: {answer[:200]!r}") from None
    served: dict[str, Any] = model
    return served


def read_bodies(path: Path) -> list[dict[str, Any]]:
    """The requests of `--body FILE`, one JSON object a line: decisions (`decision`) and chats
    (`messages`) in the shares the endpoint is expected to serve."""
    bodies = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            body = json.loads(line)
        except ValueError as error:
            raise CannotMeasure(f"{path} line {number}: not JSON ({error})") from None
        if not isinstance(body, dict) or ("decision" in body) == ("messages" in body):
            raise CannotMeasure(
                f'{path} line {number}: neither a decision ({{"decision": ...}}) nor a chat '
                '({"messages": [...]}): --body takes the two kinds the measurement shares out'
            )
        bodies.append(body)
    if not any("decision" in body for body in bodies):
        raise CannotMeasure(f"{path} holds no decision: a decision endpoint is measured on them")
    return bodies


class MeasuredBodies:
    """Each measured request's body: the given requests in turn (the load decision when
    none are given), each decision's state numbered, so every one is a state-cache miss and the
    model's prefill is measured, not the cache (which serves a repeated state without it); what
    each answer says it read is kept, and a hit refuses the run. A chat's time is its round trip
    (the adapter times decisions only)."""

    def __init__(self, requests: list[dict[str, Any]] | None = None) -> None:
        self.requests = requests or [load_decision()]
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self.state_cache: Counter[str] = Counter()
        self.input_tokens: list[int] = []
        self.chats = 0
        self.digest = hashlib.sha256()

    def next(self, *, decision: bool = False) -> bytes:
        """The next request's body (the next decision's, when `decision`)."""
        with self._lock:
            number = next(self._numbers)
        requests = [r for r in self.requests if "decision" in r] if decision else self.requests
        body = json.loads(json.dumps(requests[number % len(requests)]))
        if "decision" in body:
            body["decision"]["state"] = f"Request {number}. {body['decision']['state']}"
        encoded = json.dumps(body).encode()
        with self._lock:
            self.digest.update(hashlib.sha256(encoded).digest())
        return encoded

    def answered(self, answer: bytes, round_trip_ms: float = 0.0) -> float:
        """The adapter's own time for a decision's answer in ms (from its arrival, any wait for
        the model included), a chat's round trip, once what it read is recorded."""
        try:
            data = json.loads(answer)
            if "choices" in data:  # a chat completion
                tokens, total_ms, cache = int(data["usage"]["prompt_tokens"]), round_trip_ms, None
            else:
                result = data["result"]
                cache, tokens = result["timing"]["state_cache"], int(result["input_tokens"])
                total_ms = float(result["timing"]["total_ms"])
        except (ValueError, KeyError, TypeError) as error:
            raise CannotMeasure(f"not a decision answer ({error}): {answer[:200]!r}") from None
        with self._lock:
            if cache is None:
                self.chats += 1
            else:
                self.state_cache[cache] += 1
            self.input_tokens.append(tokens)
        return total_ms

    def check(self) -> None:
        if self.state_cache["hit"]:
            raise CannotMeasure(
                f"{self.state_cache['hit']} of {sum(self.state_cache.values())} measured answers "
                "came from the state cache, though every state was new: the measurement would "
                "be of the cache, not the model; measure again"
            )

    def as_dict(self) -> dict[str, Any]:
        tokens = sorted(self.input_tokens)
        return {
            "count": len(tokens),
            "state_cache": dict(self.state_cache),
            "input_tokens": {"min": tokens[0], "max": tokens[-1]} if tokens else {},
            "bodies_sha256": self.digest.hexdigest(),
        }

    def shape(self, decisions_at_once: int) -> dict[str, Any]:
        """What was measured, which synthesis holds the release's `traffic` to."""
        return {
            "input_tokens": round(statistics.median(self.input_tokens)),
            "decisions_at_once": decisions_at_once,
            "chat_share": round(self.chats / len(self.input_tokens), 4),
        }


def _timed(send: Callable[[bytes], bytes], bodies: MeasuredBodies) -> float:
    """One measured request: its time in ms as MeasuredBodies.answered gives it."""
    body = bodies.next()
    started = time.perf_counter()
    answer = send(body)
    return bodies.answered(answer, (time.perf_counter() - started) * 1000)


def measure(
    sagemaker: Client,
    send: Callable[[bytes], bytes],
    endpoint: str,
    limits: Limits,
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    report: Callable[[str], None] = lambda line: None,
    requests: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The measurement file's content. `send(body) -> answer body` raises ops.retry.Retryable
    for a 503 and anything else for a failure, which ends the measurement. `requests`: the
    decision endpoint's representative bodies (`--body`), else the load decision."""
    before = placement(sagemaker, endpoint)
    if before.instances != 1:
        raise CannotMeasure(
            f"endpoint {endpoint} runs {before.instances} instances: a measurement is of one "
            "(deploy it with `measuring` on, or autoscaling minCapacity = maxCapacity = 1)"
        )
    environment = model_environment(sagemaker, before.endpoint_config)
    flags = server_flags(environment)
    if flags is not None:
        return _measure_text_generation(
            sagemaker, send, endpoint, limits, before, flags, sleep=sleep, rng=rng, report=report
        )
    bodies = MeasuredBodies(requests)
    backoff = Backoff()
    # One decision first: a cold instance's first answer is no measure, and it names the model.
    first = bodies.next(decision=True)
    answered = call_with_retries(lambda: send(first), backoff, sleep=sleep, rng=rng)
    model, at_once = served_model(answered), decisions_at_once(answered)
    # A batching adapter is measured up to the concurrency it admits, where its rate peaks.
    limits = limits.reaching(at_once)
    measured = _measure_levels(
        lambda: _timed(send, bodies),
        limits.levels(),
        limits,
        backoff,
        sleep=sleep,
        rng=rng,
        report=report,
    )
    after = placement(sagemaker, endpoint)
    if after != before:
        raise CannotMeasure(
            f"endpoint {endpoint} went from {before.instances} instance(s) of "
            f"{before.instance_type} to {after.instances} of {after.instance_type} while "
            "measured: hold its capacity (autoscaling minCapacity = maxCapacity) and measure again"
        )
    try:
        result = figures(measured, instances=before.instances, endpoint=endpoint)
    except ValueError as error:
        raise CannotMeasure(str(error)) from None
    bodies.check()
    return {
        "measured": True,
        "model": model,
        "instance_type": before.instance_type,
        "source": _source(endpoint),
        "workload": (
            "ops/workloads.py load_decision" if requests is None else "the --body requests"
        )
        + ", each state numbered, closed loop",
        "latency": "the adapter's timing.total_ms"
        + (" (a chat's: its round trip)" if bodies.chats else ""),
        "decisions_at_once": at_once,
        "shape": bodies.shape(at_once),
        "concurrency": adapter_concurrency(environment),
        "requests": bodies.as_dict(),
        **{key: value for key, value in result.items() if key not in ("measured", "source")},
    }


def _measure_levels(
    answer: Callable[[], float],
    levels: list[int],
    limits: Limits,
    backoff: Backoff,
    *,
    sleep: Callable[[float], None],
    rng: random.Random | None,
    report: Callable[[str], None],
) -> list[Level]:
    """Each level of clients in turn, the limits' requests and seconds shared evenly between
    the levels; `answer()` sends one request and returns the container's own time for it in
    milliseconds (so the operator's round trip is not measured)."""
    requests, seconds = limits.max_requests // len(levels), limits.max_seconds / len(levels)
    measured: list[Level] = []
    for clients in levels:
        level = run_level(
            answer,
            clients,
            max(1, requests // clients),
            until=time.perf_counter() + seconds,
            sleep=sleep,
            backoff=backoff,
            rng=rng,
            own_time=lambda own_ms: own_ms / 1000,
        )
        report(f"{clients} client(s): {len(level.answered)} answered, {level.refused} refused")
        measured.append(level)
    return measured


def _source(endpoint: str) -> str:
    day = time.strftime("%Y-%m-%d", time.gmtime())
    return f"python -m ops measure --endpoint {endpoint} (1 instance, {day})"


# What each measured completion asks for: long enough an answer that ignore_eos only matters
# for a model that would stop early.
CHAT_PROMPT = "Tell a long story about a lighthouse keeper and the ships she guides."


class MeasuredCompletions:
    """Each measured completion's body: the prompt numbered at its start, so llama-server's
    prompt cache cannot serve its prefill, and generation held to the release's n-predict
    (`ignore_eos`), so every completion is as long as the release allows; llama-server's own
    timings of each answer are kept, and a completion cut short refuses the run."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self.prompt_tokens: list[int] = []
        self.generated: list[tuple[int, float]] = []  # (tokens, ms) of each completion
        self.models: set[str] = set()
        self.digest = hashlib.sha256()

    def next(self) -> bytes:
        with self._lock:
            number = next(self._numbers)
        message = {"role": "user", "content": f"Request {number}. {CHAT_PROMPT}"}
        body = {"messages": [message], "max_tokens": self.max_tokens, "ignore_eos": True}
        encoded = json.dumps({**body, "cache_prompt": False}).encode()
        with self._lock:
            self.digest.update(hashlib.sha256(encoded).digest())
        return encoded

    def answered(self, answer: bytes, *, measured: bool = True) -> float:
        """llama-server's own time for the completion in ms: its prefill and its generation;
        kept unless `measured` is false (the warm-up is checked, not counted)."""
        try:
            data = json.loads(answer)
            timings, model = data["timings"], str(data["model"])
            prompt_n, prompt_ms = int(timings["prompt_n"]), float(timings["prompt_ms"])
            predicted_n, predicted_ms = int(timings["predicted_n"]), float(timings["predicted_ms"])
        except (ValueError, KeyError, TypeError) as error:
            raise CannotMeasure(
                f"not a llama-server chat completion with timings ({error}): {answer[:200]!r}"
            ) from None
        if predicted_n < self.max_tokens:
            raise CannotMeasure(
                f"a completion generated {predicted_n} of its {self.max_tokens} tokens: the "
                "measurement would be of shorter completions than the release allows (is the "
                "context, ctx-size / parallel per slot, too small for them?)"
            )
        if measured:
            with self._lock:
                self.models.add(model)
                self.prompt_tokens.append(prompt_n)
                self.generated.append((predicted_n, predicted_ms))
        return prompt_ms + predicted_ms

    def as_dict(self) -> dict[str, Any]:
        tokens = sorted(self.prompt_tokens)
        return {
            "count": len(tokens),
            "prompt_tokens": {"min": tokens[0], "max": tokens[-1]} if tokens else {},
            "bodies_sha256": self.digest.hexdigest(),
        }


def _measure_text_generation(
    sagemaker: Client,
    send: Callable[[bytes], bytes],
    endpoint: str,
    limits: Limits,
    before: Placement,
    flags: dict[str, str],
    *,
    sleep: Callable[[float], None],
    rng: random.Random | None,
    report: Callable[[str], None],
) -> dict[str, Any]:
    """The text-generation endpoint's measurement (stacks/text_generation_capacity.py): one
    client's completions give the p95 of one with nothing waiting, one client per slot the rate
    of the instance with every slot busy (slots over the mean completion time)."""
    if "n-predict" not in flags:
        raise CannotMeasure(
            f"endpoint {endpoint} runs llama-server without n-predict: a completion has no "
            "length to measure at (textGenerationEndpoint.llamaServerArgs)"
        )
    max_tokens, slots = int(flags["n-predict"]), int(flags.get("parallel", "1"))
    completions = MeasuredCompletions(max_tokens)
    backoff = Backoff()
    # A first completion, not measured: a cold instance's first answer is no measure.
    first = completions.next()
    call_with_retries(
        lambda: completions.answered(send(first), measured=False), backoff, sleep=sleep, rng=rng
    )
    measured = _measure_levels(
        lambda: completions.answered(send(completions.next())),
        sorted({1, slots}),
        limits,
        backoff,
        sleep=sleep,
        rng=rng,
        report=report,
    )
    if placement(sagemaker, endpoint) != before:
        raise CannotMeasure(
            f"endpoint {endpoint} changed its instances while measured: hold its capacity "
            "(autoscaling minCapacity = maxCapacity = 1) and measure again"
        )
    single, busy = measured[0], measured[-1]
    for level in (single, busy):
        if not level.answered:
            raise CannotMeasure(f"no completion answered at {level.clients} client(s)")
    if len(completions.models) != 1 or "" in completions.models:
        raise CannotMeasure(f"the answers name models {sorted(completions.models)}, not one")
    (model,) = completions.models
    per_completion = [tokens / (ms / 1000) for tokens, ms in completions.generated if ms > 0]
    return {
        "measured": True,
        "kind": text_generation_capacity.KIND,
        "model": model,
        "instance_type": before.instance_type,
        "server_args": {k: v for k, v in flags.items() if k not in _MODEL_FLAGS},
        "max_tokens": max_tokens,
        "slots": slots,
        "source": _source(endpoint),
        "workload": f"chat completions of {max_tokens} tokens (ignore_eos), each prompt numbered",
        "latency": "llama-server's timings (prompt_ms + predicted_ms)",
        "requests": completions.as_dict(),
        "throughput_rps": round(slots / statistics.mean(busy.answered), 4),
        "completion_p95_ms": round(p95(single.answered) * 1000, 2),
        "tokens_per_s": round(statistics.mean(per_completion), 2) if per_completion else None,
        "levels": [level.as_dict(1) for level in measured],
    }


def write(measurement: dict[str, Any], output: Path | None) -> Path:
    """Where synthesis reads it, unless `output` says otherwise."""
    filed_by = (
        text_generation_capacity.measurement_path
        if measurement.get("kind") == text_generation_capacity.KIND
        else capacity.measurement_path
    )
    path = output or filed_by(measurement["model"], measurement["instance_type"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(measurement, indent=2) + "\n", encoding="utf-8")
    return path
