"""`python -m research.hostile_bodies [--url URL]`: bodies that were slow to tokenize, timed.

Each body is sent while another thread polls `/ping`; prints (and with --output writes) the
status, the seconds to the answer and the slowest `/ping`. Without --url it starts the adapter
on the bundled model. The regression test sends the same bodies.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

import httpx


def newlines_chat() -> dict:  # 225 KB: 25.5 s to a 413 before the linear tokenizer
    return {"messages": [{"role": "user", "content": "{\n" * 75_000}], "max_tokens": 1}


def state_of_lists() -> dict:  # 3,333 small lists: just under a state's 10,000 JSON values
    state = {f"key{i}": [i, "x"] for i in range(3_333)}
    return {
        "decision": {
            "id": "lists",
            "state": state,
            "question": "Which team?",
            "options": [{"id": "data"}, {"id": "infra"}],
        }
    }


def tags_to_the_body_limit() -> dict:  # just under DECISION_MAX_BODY_BYTES (1 MiB)
    return {
        "model": "jev-latest",
        "state": "<b>" * 349_000,
        "questions": {"q": {"type": "noul", "instructions": "Bold?"}},
    }


def empty_decisions() -> dict:  # 1 MiB of `{}`: slow to parse (1.1 s), past the body's values
    return {"decisions": [{}] * 262_000}


def spread_bad_parts(messages: int = 330) -> dict:
    """Bad content parts spread over many messages, each list under its cap of 1,024: pydantic
    validated all 330,000 (3 s holding the interpreter) before the body's count of values."""
    return {"messages": [{"role": "user", "content": [1] * 1_000} for _ in range(messages)]}


def spread_bad_criteria() -> dict:
    """Just under the body's count of values, the costliest to validate: 62,500 bad criteria
    (three errors each, one per type a criterion may be), 250 in each of 250 questions."""
    criteria = {str(n): 1 for n in range(250)}
    questions = {f"q{i}": {"type": "choice", "criteria": criteria} for i in range(250)}
    return {"model": "m", "state": "s", "questions": questions}


BODIES = {
    "chat of 75,000 '{\\n'": ("/invocations", newlines_chat),
    "state of 3,333 lists": ("/invocations", state_of_lists),
    "1 MiB state of '<b>'": ("/v1/systemone", tags_to_the_body_limit),
    "1 MiB of empty decisions": ("/invocations", empty_decisions),
    "330 messages of 1,000 bad parts": ("/v1/chat/completions", spread_bad_parts),
    "250 questions of 250 bad criteria": ("/v1/systemone", spread_bad_criteria),
}


def send_while_pinging(url: str, path: str, body: dict, copies: int = 1) -> dict:
    """`copies` of the body sent at once; the status, text and seconds are the slowest's."""
    payload = json.dumps(body).encode()
    pings: list[float] = []
    done = threading.Event()

    def ping() -> None:
        while not done.is_set():
            started = time.monotonic()
            httpx.get(url + "/ping", timeout=10)
            pings.append(time.monotonic() - started)

    pinger = threading.Thread(target=ping)
    pinger.start()
    answers: list[tuple[float, httpx.Response]] = []

    def send() -> None:
        started = time.monotonic()
        response = httpx.post(
            url + path, content=payload, timeout=120, headers={"Content-Type": "application/json"}
        )
        answers.append((time.monotonic() - started, response))

    senders = [threading.Thread(target=send) for _ in range(copies)]
    try:
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
    finally:
        done.set()
        pinger.join()
    seconds, response = max(answers, key=lambda answer: answer[0])
    return {
        "bytes": len(payload),
        "status": response.status_code,
        "text": response.text,
        "seconds": seconds,
        "slowest_ping_s": max(pings, default=0.0),
        "pings": len(pings),
    }


def measure(url: str) -> dict[str, dict]:
    return {name: send_while_pinging(url, path, make()) for name, (path, make) in BODIES.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running adapter (default: start one)")
    parser.add_argument("--output", type=Path, help="write the results as JSON")
    args = parser.parse_args()
    if args.url:
        results = measure(args.url)
    else:
        from launcher import running_adapter

        with running_adapter(Path(tempfile.mkdtemp())) as adapter:
            results = measure(adapter.url)
    for name, result in results.items():
        print(
            f"{name}: {result['bytes']} bytes, {result['status']} in {result['seconds']:.3f} s, "
            f"slowest /ping {result['slowest_ping_s']:.3f} s of {result['pings']}"
        )
    if args.output:
        args.output.write_text(
            json.dumps(
                {k: {f: v for f, v in r.items() if f != "text"} for k, r in results.items()},
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
