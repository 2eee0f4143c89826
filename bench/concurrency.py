"""Closed-loop load: N clients, each sending the next request as soon as the last answered.

A client that gets a 503 waits the server's Retry-After (as `ops invoke` does) and counts the
refusal; it does not hammer the server with immediate retries, which on a shared 2-core machine
would steal the model's CPU and measure the client instead."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httpx

from evaluation.metrics import latency_summary
from ops.retry import parse_retry_after


@dataclass
class LoadResult:
    clients: int
    elapsed_s: float
    answered: list[float] = field(default_factory=list)  # seconds per answered request
    refused: int = 0  # 503s
    errors: int = 0  # anything else: other statuses, timeouts, broken connections

    def as_dict(self) -> dict:
        requests = len(self.answered) + self.refused + self.errors
        return {
            "clients": self.clients,
            "requests": requests,
            "answered": len(self.answered),
            "refused_503": self.refused,
            "errors": self.errors,
            "share_503": round(self.refused / requests, 4) if requests else 0.0,
            "throughput_rps": round(len(self.answered) / self.elapsed_s, 3),
            "elapsed_s": round(self.elapsed_s, 2),
            "latency": latency_summary(self.answered),
        }


async def _load(
    url: str, body: dict, clients: int, duration_s: float, timeout_s: float
) -> LoadResult:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=timeout_s) as client:
        await client.post(url, json=body)  # one connection warmed, the model ready
        result = LoadResult(clients, 0.0)
        started = time.perf_counter()
        stop_at = started + duration_s
        last_answer = stop_at

        async def one_client() -> None:
            nonlocal last_answer
            while time.perf_counter() < stop_at:
                sent = time.perf_counter()
                try:
                    response = await client.post(url, json=body)
                except httpx.HTTPError:
                    result.errors += 1
                    continue
                if response.status_code == 200:
                    done = time.perf_counter()
                    result.answered.append(done - sent)
                    last_answer = max(last_answer, done)
                elif response.status_code == 503:
                    result.refused += 1
                    pause = parse_retry_after(response.headers.get("Retry-After"))
                    await asyncio.sleep(1.0 if pause is None else pause)
                else:
                    result.errors += 1

        await asyncio.gather(*(one_client() for _ in range(clients)))
        # Requests started before the deadline count, and so does the time they took; a
        # client's last Retry-After pause past the deadline does not.
        result.elapsed_s = last_answer - started
        return result


def run_load(
    url: str, body: dict, clients: int, duration_s: float, timeout_s: float = 120.0
) -> LoadResult:
    return asyncio.run(_load(url, body, clients, duration_s, timeout_s))
