"""`python -m ops measure`: the capacity measurement of a deployed decision endpoint, written as
the file synthesis derives that endpoint's defaults from (stacks/capacity.py).

What is measured is named by the endpoint itself: the instance type from its configuration
(a pool's type the instances run on) and the model from its answers (the packaged manifest's
spec), so the file lands under the (model, instance type) pair it belongs to. The load is the
bench's concurrency decision (bench/workloads.py) at rising concurrency, closed loop, within a
request count and a time limit shared equally by the levels; a 503 is waited out with
ops/retry.py's backoff, which honours the adapter's retry hint.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.workloads import load_decision
from ops.endpoint_status import endpoint_status
from ops.load import Level, figures, run_level
from ops.retry import Backoff, call_with_retries
from stacks import capacity


class CannotMeasure(Exception):
    """The endpoint cannot give a measurement of one (model, instance type) pair."""


@dataclass(frozen=True)
class Placement:
    instance_type: str
    instances: int


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

    def levels(self) -> list[int]:
        """1, 2, 4, ... up to max_clients (which ends the list)."""
        levels = [1]
        while levels[-1] * 2 < self.max_clients:
            levels.append(levels[-1] * 2)
        return levels + ([self.max_clients] if self.max_clients > 1 else [])


def placement(sagemaker, endpoint: str) -> Placement:
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
    return Placement(running_on[0], variants[0]["current_instances"])


def served_model(answer: bytes) -> str:
    """The model spec the answering adapter serves, from its decision answer."""
    try:
        manifest = json.loads(answer)["result"]["model"].get("manifest") or {}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CannotMeasure(f"not a decision answer: {answer[:200]!r}") from None
    if not manifest.get("spec"):
        raise CannotMeasure(
            "the answer names no packaged model (model.manifest.spec): the endpoint does not "
            "serve a model archive built by `python -m ops build model`"
        )
    return manifest["spec"]


class MeasuredBodies:
    """Each measured request's body: the load decision with its state numbered, so every one is
    a state-cache miss and the model's prefill is measured, not the cache (which serves a repeated
    state without it); what each answer says it read is kept, and a hit refuses the run."""

    def __init__(self) -> None:
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self.state_cache: Counter[str] = Counter()
        self.input_tokens: list[int] = []
        self.digest = hashlib.sha256()

    def next(self) -> bytes:
        with self._lock:
            number = next(self._numbers)
        body = load_decision()
        decision = body["decision"]
        decision["state"] = f"Request {number}. {decision['state']}"
        encoded = json.dumps(body).encode()
        with self._lock:
            self.digest.update(hashlib.sha256(encoded).digest())
        return encoded

    def answered(self, answer: bytes) -> bytes:
        try:
            result = json.loads(answer)["result"]
            cache, tokens = result["timing"]["state_cache"], int(result["input_tokens"])
        except (ValueError, KeyError, TypeError) as error:
            raise CannotMeasure(f"not a decision answer ({error}): {answer[:200]!r}") from None
        with self._lock:
            self.state_cache[cache] += 1
            self.input_tokens.append(tokens)
        return answer

    def check(self) -> None:
        if self.state_cache["hit"]:
            raise CannotMeasure(
                f"{self.state_cache['hit']} of {sum(self.state_cache.values())} measured answers "
                "came from the state cache, though every state was new: the measurement would "
                "be of the cache, not the model; measure again"
            )

    def as_dict(self) -> dict:
        tokens = sorted(self.input_tokens)
        return {
            "count": len(tokens),
            "state_cache": dict(self.state_cache),
            "input_tokens": {"min": tokens[0], "max": tokens[-1]} if tokens else {},
            "bodies_sha256": self.digest.hexdigest(),
        }


def measure(
    sagemaker,
    send: Callable[[bytes], bytes],
    endpoint: str,
    limits: Limits,
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    report: Callable[[str], None] = lambda line: None,
) -> dict:
    """The measurement file's content. `send(body) -> answer body` raises ops.retry.Retryable
    for a 503 and anything else for a failure, which ends the measurement."""
    before = placement(sagemaker, endpoint)
    bodies = MeasuredBodies()
    backoff = Backoff()
    # One decision first: a cold instance's first answer is no measure, and it names the model.
    first = bodies.next()
    model = served_model(call_with_retries(lambda: send(first), backoff, sleep=sleep, rng=rng))
    levels = limits.levels()
    requests, seconds = limits.max_requests // len(levels), limits.max_seconds / len(levels)
    measured: list[Level] = []
    for clients in levels:
        level = run_level(
            lambda: bodies.answered(send(bodies.next())),
            clients,
            max(1, requests // clients),
            sleep=sleep,
            until=time.perf_counter() + seconds,
            backoff=backoff,
            rng=rng,
        )
        report(f"{clients} client(s): {len(level.answered)} answered, {level.refused} refused")
        measured.append(level)
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
        "source": (
            f"python -m ops measure --endpoint {endpoint} ({before.instances} instance(s), "
            f"{time.strftime('%Y-%m-%d', time.gmtime())})"
        ),
        "workload": "bench/workloads.py load_decision, each state numbered, closed loop",
        "requests": bodies.as_dict(),
        **{key: value for key, value in result.items() if key not in ("measured", "source")},
    }


def write(measurement: dict, output: Path | None) -> Path:
    """Where synthesis reads it, unless `output` says otherwise."""
    path = output or capacity.measurement_path(measurement["model"], measurement["instance_type"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(measurement, indent=2) + "\n", encoding="utf-8")
    return path
