"""The wire formats and the service's contract load without llama.cpp: they never see tokens."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import decision_adapter.formats

FORMAT_MODULES = sorted(
    f"decision_adapter.formats.{module.name}"
    for module in pkgutil.iter_modules(decision_adapter.formats.__path__)
)


def test_there_are_formats_to_check():
    assert {"decision_adapter.formats.decision", "decision_adapter.formats.systemone"} <= set(
        FORMAT_MODULES
    )


def test_importing_every_format_and_the_contract_does_not_import_llama_cpp():
    modules = [*FORMAT_MODULES, "decision_adapter.contract", "decision_adapter.errors"]
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'llama_cpp'\n"
        "    or m in ('decision_adapter.model.engine', 'decision_adapter.scoring.score'))\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"loaded: {result.stdout}"
