"""The deploy path (make bootstrap, deploy, destroy, synth, ops) installs only
requirements-deploy.txt: the CDK app and the operator CLI import without llama.cpp, numpy,
starlette or uvicorn, so no step compiles anything."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.make_dry_run import printed_lines

ROOT = Path(__file__).resolve().parents[2]
SERVING = ("llama_cpp", "numpy", "starlette", "uvicorn", "httpx", "decision_adapter")
BLOCKED_IMPORTS = f"""
import importlib, pkgutil, sys
for name in {SERVING!r}:
    sys.modules[name] = None  # importing it raises ImportError
for package in ("stacks", "ops", "model_packaging.catalog"):
    module = importlib.import_module(package)
    for found in pkgutil.walk_packages(getattr(module, "__path__", []), package + "."):
        if not found.name.endswith("__main__"):
            importlib.import_module(found.name)
print("imported")
"""


@pytest.mark.parametrize("target", ["bootstrap", "deploy", "destroy", "synth", "ops"])
def test_an_aws_step_installs_only_the_deploy_requirements(target):
    lines = printed_lines(target)
    installs = [line for line in lines if "pip install" in line]
    assert any("-r requirements-deploy.txt" in line for line in installs), lines
    assert not any(re.search(r"-r requirements\.txt\b", line) for line in installs), installs
    assert not any("llama_build" in line for line in lines), lines


def test_the_cdk_app_and_the_operator_cli_import_without_the_serving_packages():
    finished = subprocess.run(
        [sys.executable, "-c", BLOCKED_IMPORTS],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert finished.returncode == 0 and "imported" in finished.stdout, finished.stderr[-3000:]


def pins(path: Path) -> dict[str, str]:
    found = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(), re.M)
    return {name.lower(): version for name, version in found}


def test_the_deploy_pins_are_the_runtimes_and_compile_nothing():
    deploy = pins(ROOT / "requirements-deploy.txt")
    assert set(deploy) == {"aws-cdk-lib", "constructs", "cdk-nag", "boto3", "pydantic"} | {
        "botocore",
        "s3transfer",
    }
    container = pins(ROOT / "container" / "requirements.txt")
    assert deploy["pydantic"] == container["pydantic"]
    assert "-r requirements-deploy.txt" in (ROOT / "requirements.txt").read_text()


def test_boto3s_own_dependencies_are_pinned_at_what_is_installed():
    """boto3 names ranges for botocore and s3transfer: the install date would pick them."""
    from importlib.metadata import version

    deploy = pins(ROOT / "requirements-deploy.txt")
    for package in ("botocore", "s3transfer"):
        assert deploy[package] == version(package)
