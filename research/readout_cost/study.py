"""`python -m research.readout_cost`: only `make bench`'s readout row, in about a minute.

One 6-option decision read by each strategy, taking turns request by request
(`bench.experiments.readout_cost`), against a fresh adapter with the benchmark's settings or the
one at --url. Writes results/<date>-<machine>-readout-cost.json here, or --output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import httpx

from bench import experiments
from bench.__main__ import ADAPTER_ENV
from bench.report import READOUT_COST_SUFFIX
from bench.timing import REQUEST_TIMEOUT_S, Caller
from bench.workloads import THREADS, machine_name
from launcher import running_adapter

RESULTS = Path(__file__).resolve().parent / "results"  # the study's committed results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m research.readout_cost", description=__doc__)
    parser.add_argument("--repeats", type=int, default=experiments.Plan().readout_repeats)
    parser.add_argument("--url", help="an adapter already running (default: start one)")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    now = datetime.now(UTC)
    with contextlib.ExitStack() as stack, httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        url = args.url
        if url is None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            url = stack.enter_context(running_adapter(tmp, **ADAPTER_ENV)).url
        row = experiments.readout_cost(Caller(client), url + "/invocations", args.repeats)
    result = {
        "date": now.isoformat(timespec="seconds"),
        "machine": machine_name(),
        "adapter": args.url or f"started here, {THREADS} threads, state cache off",
        "readout_cost": row,
    }
    output = args.output or RESULTS / f"{now:%Y-%m-%d}-{machine_name()}{READOUT_COST_SUFFIX}"
    output.write_text(json.dumps(result, indent=2) + "\n")
    ratios = ", ".join(f"{name} {ratio}x" for name, ratio in row["ratio_to_letters"].items())
    print(f"{output}: {ratios} (default {row['default']})")


if __name__ == "__main__":
    main()
