"""Overload: 16x the admitted concurrency against the real adapter (the shared one: defaults).

Every answer must be 200 or a retryable 503 with Retry-After, /ping must answer within 2 s
throughout (SageMaker's health check), the server must answer normally afterwards, and its
resident memory after 5,000 requests must stay within 10% of its value after the first 500.
OVERLOAD_SECONDS lengthens the load phase (CI default: 12 s; bench/results/overload.json: 30 s), and
OVERLOAD_REPORT names a file for the measured figures.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import aiohttp
import pytest

from tests.support.bodies import decision

# Asserts on wall-clock time: runs in make test's serial part, alone on the machine.
pytestmark = pytest.mark.serial

ADMITTED = 1  # one model operation at a time, no queue (the defaults)
CLIENTS = 16 * ADMITTED
SECONDS = float(os.environ.get("OVERLOAD_SECONDS", "12"))
REQUESTS_FOR_MEMORY = 5000

DECISION = decision(
    "Payment failed twice with card ending 4242.", "Which queue?", ("billing", "fraud")
)


def resident_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def _load(url: str, pid: int) -> dict:
    statuses: dict[str, int] = {}
    bad: list[str] = []
    ping_worst = 0.0
    sent = 0
    memory: dict[str, int] = {}
    deadline = time.monotonic() + SECONDS

    # aiohttp, not httpx: a quarter of the client CPU per request (measured: 0.5 ms against
    # 2.3 ms), and the load generator shares the machine's two cores with the server it loads.
    async with aiohttp.ClientSession(
        url,
        timeout=aiohttp.ClientTimeout(total=30),
        connector=aiohttp.TCPConnector(limit=CLIENTS + 4),
    ) as client:

        async def worker() -> None:
            nonlocal sent
            while time.monotonic() < deadline or sent < REQUESTS_FOR_MEMORY:
                async with client.post("/invocations", json=DECISION) as response:
                    body = await response.read()
                sent += 1
                if sent == 500:
                    memory["after_500"] = resident_kib(pid)
                statuses[str(response.status)] = statuses.get(str(response.status), 0) + 1
                if response.status == 503:
                    if (
                        json.loads(body).get("retryable") is not True
                        or "retry-after" not in response.headers
                    ):
                        bad.append(body.decode())
                    # An impatient client: retries after 10 ms, not the advised Retry-After. Client
                    # and server share this machine's two cores, so a zero-delay storm would
                    # measure the test client more than the server.
                    await asyncio.sleep(0.01)
                elif response.status != 200:
                    bad.append(f"{response.status} {body.decode()}")

        async def pinger() -> None:
            nonlocal ping_worst
            while time.monotonic() < deadline or sent < REQUESTS_FOR_MEMORY:
                started = time.perf_counter()
                async with client.get("/ping", timeout=aiohttp.ClientTimeout(total=5)) as response:
                    await response.read()
                ping_worst = max(ping_worst, time.perf_counter() - started)
                assert response.status == 200
                await asyncio.sleep(0.25)

        started = time.monotonic()
        await asyncio.gather(pinger(), *(worker() for _ in range(CLIENTS)))
        elapsed = time.monotonic() - started
        memory["after_all"] = resident_kib(pid)
        async with client.post("/invocations", json=DECISION) as after:
            after_status = after.status
    return {
        "sent": sent,
        "seconds": round(elapsed, 1),
        "statuses": statuses,
        "bad": bad[:5],
        "ping_worst_s": round(ping_worst, 3),
        "memory_kib": memory,
        "after_status": after_status,
    }


def test_overload_keeps_health_checks_fast_and_memory_flat(adapter, tmp_path):
    report = asyncio.run(_load(adapter.url, adapter.process.pid))
    growth = report["memory_kib"]["after_all"] / report["memory_kib"]["after_500"] - 1
    report["memory_growth"] = round(growth, 4)
    report_path = Path(os.environ.get("OVERLOAD_REPORT", tmp_path / "overload.json"))
    report_path.write_text(json.dumps(report, indent=2) + "\n")

    assert report["sent"] >= REQUESTS_FOR_MEMORY
    assert not report["bad"], report["bad"]
    assert set(report["statuses"]) <= {"200", "503"} and report["statuses"].get("200", 0) >= 5
    assert report["statuses"].get("503", 0) > 0, "16 clients on one slot must see 503s"
    assert report["ping_worst_s"] < 2.0
    assert report["after_status"] == 200
    assert abs(growth) <= 0.10, report["memory_kib"]
