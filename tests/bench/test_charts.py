"""bench's charts, docs/benchmarks.md's table and helpers on a synthetic result (no model, no
server)."""

import json

from bench import charts, report
from bench.concurrency import LoadResult
from bench.timing import Budget
from bench.workloads import chat_prompt, parse_letter

PNG = b"\x89PNG\r\n\x1a\n"


def synthetic_result() -> dict:
    load_rows = [
        {
            "clients": c,
            "requests": 10 * c,
            "answered": 10,
            "refused_503": 10 * c - 10,
            "errors": 0,
            "share_503": (c - 1) / c,
            "throughput_rps": 5.0,
            "elapsed_s": 2.0,
            "latency": {
                "n": 10,
                "p50_ms": 190.0,
                "p95_ms": 210.0,
                "p99_ms": 230.0,
                "mean_ms": 195.0,
            },
        }
        for c in (1, 2, 4, 8, 16)
    ]
    return {
        "date": "2026-11-29T12:00:00+00:00",
        "machine": {"name": "x86_64-2cpu", "threads": 2, "load_average_1m": 1.0},
        "model": "gemma-3-270m-q4_k_m.gguf",
        "single_decision": {
            "prompt_tokens": 108,
            "http_median_ms": 200.0,
            "http_p95_ms": 230.0,
            "llama_cpp_prefill_median_ms": 160.0,
            "overhead_ratio": 1.25,
            "target_max": 1.15,
            "meets_target": False,
            "samples_ms": {
                "http": [190.0, 200.0, 230.0],
                "llama_cpp_prefill": [150.0, 160.0, 170.0],
            },
        },
        "shared_state": {
            "state_tokens": 1031,
            "decisions": 8,
            "shared_request_median_ms": 3000.0,
            "eight_single_requests_median_ms": 20000.0,
            "speedup": 6.67,
            "target_min": 4.0,
            "meets_target": True,
        },
        "shared_state_sweep": {
            "state_tokens": 1031,
            "rows": [
                {
                    "questions": n,
                    "shared_median_ms": 2500.0 + 100 * n,
                    "separate_median_ms": 2500.0 * n,
                    "speedup": 2500 * n / (2500 + 100 * n),
                }
                for n in (1, 2, 4, 8, 16)
            ],
            "with_state_cache": {
                "rows": [
                    {
                        "questions": n,
                        "separate_cached_median_ms": 2500.0 + 200 * n,
                        "speedup_of_shared": (2500 + 200 * n) / (2500 + 100 * n),
                    }
                    for n in (1, 2, 4, 8, 16)
                ]
            },
        },
        "prompt_length": {
            "rows": [
                {
                    "target_tokens": n,
                    "prompt_tokens": n,
                    "http_median_ms": 3.0 * n,
                    "http_min_ms": 2.9 * n,
                    "http_max_ms": 3.2 * n,
                    "llama_cpp_prefill_median_ms": 2.8 * n,
                    "overhead_ratio": 1.07,
                }
                for n in (64, 256, 1024, 4096)
            ]
        },
        "concurrency": {
            "prompt_tokens": 108,
            "runs": [
                {"max_queue": 0, "seconds_per_level": 10.0, "rows": load_rows},
                {"max_queue": 16, "seconds_per_level": 10.0, "rows": load_rows},
            ],
        },
        "chat_alternative": {
            "items": 49,
            "decision": {
                "accuracy": 0.4,
                "valid_answer_rate": 1.0,
                "latency": {"p50_ms": 220.0, "p95_ms": 260.0},
            },
            "chat": {
                "accuracy": 0.1,
                "valid_answer_rate": 0.2,
                "agreement_with_decision": 0.1,
                "latency": {"p50_ms": 240.0, "p95_ms": 280.0},
                "answers": {"\n": 40},
            },
        },
    }


def test_one_png_per_experiment(tmp_path):
    written = charts.experiment_charts(synthetic_result(), tmp_path / "2026-11-29-x86_64-2cpu")
    assert sorted(written) == [
        "a-single-decision",
        "b-shared-state",
        "c-prompt-length",
        "d-concurrency",
        "e-chat-alternative",
    ]
    for path in written.values():
        assert path.startswith(str(tmp_path / "2026-11-29-x86_64-2cpu-"))
        with open(path, "rb") as png:
            assert png.read(8) == PNG


def test_markdown_table_names_every_experiment():
    result = synthetic_result() | {"charts": {"a-single-decision": "x-a.png"}}
    table = report.markdown(result)
    for needle in (
        "**1.25x**",
        "**6.7x**",
        "4096: 12288 ms (1.07x floor)",
        "DECISION_MAX_QUEUE=16",
        "one-token chat",
        "![a-single-decision](../bench/results/x-a.png)",
    ):
        assert needle in table
    json.dumps(result)  # the result stays JSON


def test_load_result_shares_and_throughput():
    result = LoadResult(
        clients=4, elapsed_s=2.0, answered=[0.1, 0.2, 0.3, 0.4], refused=4, errors=0
    )
    summary = result.as_dict()
    assert summary["share_503"] == 0.5
    assert summary["throughput_rps"] == 2.0
    assert summary["latency"]["p50_ms"] == 250.0


def test_budget_always_allows_the_minimum():
    budget = Budget(total_s=0.0)
    assert budget.more(0.5, done=0)
    assert not budget.more(0.5, done=1)
    assert budget.more(0.5, done=4, minimum=5)


def test_the_run_names_what_the_budget_cut_short():
    from bench.__main__ import cut_short
    from bench.experiments import SHARES, Plan

    plan = Plan()
    full = {"concurrency": {"runs": [{"seconds_per_level": plan.load_seconds}] * 2}}
    roomy = Budget(total_s=3600.0)
    assert roomy.more(SHARES["chat"], done=20, minimum=10)
    assert cut_short(roomy, full, plan) == []
    spent = Budget(total_s=0.0)
    assert spent.more(SHARES["single"], done=4, minimum=5)  # the minimum is no cut
    assert cut_short(spent, full, plan) == []
    for share in ("chat", "single", "chat"):
        assert not spent.more(SHARES[share], done=5, minimum=5)
    shorter = {"concurrency": {"runs": [{"seconds_per_level": 2.0}, {"seconds_per_level": 2.0}]}}
    assert cut_short(spent, shorter, plan) == ["chat", "single", "concurrency"]


def test_chat_prompt_letters_and_parsing():
    item = {
        "state": "Refund please.",
        "question": "Which queue?",
        "options": [{"id": "billing", "description": "Money."}, {"id": "shipping"}],
    }
    content, labels = chat_prompt(item)
    assert labels == ["A", "B"]
    assert (
        "State:\nRefund please.\n\nQuestion: Which queue?\n"
        "Options:\nA. billing: Money.\nB. shipping\n" in content
    )
    assert content.endswith("Answer with only the label of the best option.")
    assert [parse_letter(t, labels) for t in ("B", " a.", "(B)", "\n", "C", "Billing")] == [
        "B",
        "A",
        "B",
        None,
        None,
        None,
    ]
