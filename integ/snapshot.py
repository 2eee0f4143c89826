"""The integration test's snapshot: its templates and integ manifest, synthesized offline.

`python -m integ.snapshot` rewrites integ/integ_decision_release.py.snapshot/ (review the diff);
tests/cdk/test_integ_snapshot.py fails while the checked-in snapshot differs from a fresh synthesis.
integ-runner keeps the same directory, but its 2.197.10 (the newest on npm) cannot read the
cloud assembly schema 55 that aws-cdk-lib 2.275 writes, so this module does its snapshot step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

INTEG = Path(__file__).resolve().parent
APP = INTEG / "integ_decision_release.py"
SNAPSHOT = INTEG / f"{APP.name}.snapshot"
# Inputs a real run sets; the snapshot is made with the placeholders.
RUN_INPUTS = ("INTEG_MODEL_DATA_URI", "INTEG_DECISION_CPU_IMAGE")


def synthesize(outdir: Path) -> dict[str, dict]:
    """File name -> parsed JSON, for every template and the integ manifest."""
    env = {k: v for k, v in os.environ.items() if k not in RUN_INPUTS}
    # CDK's built-in template validation writes nothing into the snapshot and costs about
    # 11 CPU-seconds a synthesis (its engine loads in every process); a real run validates.
    env.update(
        CDK_OUTDIR=str(outdir),
        CDK_VALIDATION="false",
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
    )
    subprocess.run(
        [sys.executable, str(APP)], env=env, check=True, capture_output=True, timeout=300
    )
    return read(outdir)


def read(directory: Path) -> dict[str, dict]:
    names = [*sorted(p.name for p in directory.glob("*.template.json")), "integ.json"]
    return {name: _without_salt(json.loads((directory / name).read_text())) for name in names}


def _without_salt(template: dict) -> dict:
    """Assertion calls carry a per-synthesis timestamp (`salt`) so that each deploy reruns
    them; it is no part of what the test deploys or asserts."""
    for resource in template.get("Resources", {}).values():
        if resource["Type"].startswith("Custom::DeployAssert"):
            resource["Properties"].pop("salt", None)
    return template


def main() -> None:
    with tempfile.TemporaryDirectory() as outdir:
        fresh = synthesize(Path(outdir))
    SNAPSHOT.mkdir(exist_ok=True)
    for stale in SNAPSHOT.glob("*.json"):
        stale.unlink()
    for name, content in fresh.items():
        (SNAPSHOT / name).write_text(json.dumps(content, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(fresh)} files to {SNAPSHOT}")


if __name__ == "__main__":
    main()
