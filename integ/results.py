"""Read a deployed integration test's assertion results from `cdk deploy --outputs-file`.

Each assertion of the DeployAssert stack reports as an output `AssertionResults...` whose value
is JSON with a `status` ("success" or "fail") and, on failure, a message. Exit 1 on any failure
or when no assertion reported at all.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def failures(outputs: dict) -> tuple[int, list[str]]:
    results = {
        key: value
        for stack in outputs.values()
        for key, value in stack.items()
        if key.startswith("AssertionResults")
    }
    failed = []
    for key, value in sorted(results.items()):
        try:
            status = json.loads(value)
        except ValueError:
            status = {"status": "fail", "message": value}
        if status.get("status") != "success":
            failed.append(f"{key}: {status.get('message', status)}")
    return len(results), failed


def main(path: str) -> int:
    count, failed = failures(json.loads(Path(path).read_text()))
    for line in failed:
        print(f"FAILED {line}", file=sys.stderr)
    if not count:
        print("no assertion results in the outputs", file=sys.stderr)
    print(f"{count - len(failed)}/{count} assertions passed")
    return 0 if count and not failed else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
