"""bench.report picks the newest `make bench` result, not another benchmark's JSON beside it."""

from pathlib import Path

from bench.report import latest


def test_latest_is_the_newest_dated_bench_result(tmp_path: Path):
    for name in (
        "2026-11-29-x86_64-2cpu.json",
        "2026-11-30-x86_64-2cpu.json",
        "2026-12-01-x86_64-2cpu-readout-cost.json",  # research.readout_cost, a day later
        "2026-12-01-x86_64-2cpu-chat-versus.json",  # bench.chat_versus
        "hostile-bodies.json",
        "overload.json",
    ):
        (tmp_path / name).write_text("{}")
    assert latest(tmp_path).name == "2026-11-30-x86_64-2cpu.json"


def _versus() -> dict:
    return {
        "single_decision": {
            "prompt_tokens": 108,
            "n_probs": 20,
            "adapter_median_ms": 189.4,
            "llama_server_median_ms": 170.2,
            "ratio": 1.113,
            "target_max": 1.05,
            "meets_target": False,
            "phases_median_ms": {
                "adapter": {
                    "model_ms": 160.0,
                    "prepare_ms": 1.2,
                    "handler_other_ms": 3.0,
                    "outside_handler_ms": 20.0,
                },
                "llama_server": {"prompt_ms": 150.0, "predicted_ms": 10.0, "outside_model_ms": 8},
            },
        },
        "eight_questions_shared": {
            "questions": 8,
            "state_prompt_tokens": 1070,
            "llama_server_reused_tokens_median": 1040,
            "adapter_one_request_median_ms": 3179,
            "llama_server_eight_requests_median_ms": 2600,
            "ratio": 1.223,
        },
        "eight_questions_cached": {
            "questions": 8,
            "first_median_ms": {"adapter": 1800, "llama_server": 1700},
            "follow_up_median_ms": {"adapter": 210, "llama_server": 150},
            "eight_total_median_ms": {"adapter": 3300, "llama_server": 2800},
            "follow_up_ratio": 1.4,
            "eight_total_ratio": 1.179,
            "target_max": 1.0,
            "meets_target": False,
            "follow_up_phases_median_ms": {
                "adapter": {
                    "model_ms": 180.0,
                    "prepare_ms": 4.0,
                    "handler_other_ms": 2.0,
                    "outside_handler_ms": 24.0,
                },
                "llama_server": {"prompt_ms": 120.0, "predicted_ms": 0.0, "outside_model_ms": 30},
            },
        },
        "chat": {
            "prompt_tokens": [26],
            "max_tokens": 64,
            "adapter": {
                "streamed_generation_tokens_per_s": 41.0,
                "streamed_first_token_median_ms": 90,
                "whole_median_ms": 1700,
                "whole_tokens_per_s": 37.6,
            },
            "llama_server": {
                "streamed_generation_tokens_per_s": 43.0,
                "streamed_first_token_median_ms": 60,
                "whole_median_ms": 1600,
                "whole_tokens_per_s": 40.0,
            },
            "ratios": {
                "streamed_generation_tokens_per_s": 0.953,
                "streamed_first_token": 1.5,
                "whole_latency": 1.063,
            },
            "target_min_generation": 0.9,
            "meets_target": True,
        },
        "options": {
            "items": 49,
            "n_probs": 20,
            "option_share_median": 0.42,
            "option_share_min": 0.05,
            "top_token_not_an_option": 17,
            "accuracy": {"adapter": 0.35, "llama_server": 0.33},
        },
        "errors": {"chat_x": "ReadTimeout: timed out"},
    }


def test_llama_server_columns_and_what_the_ratio_means():
    from bench.report import RATIO_MEANING, llama_server_table

    lines = llama_server_table(_versus())
    table = "\n".join(lines)
    assert (
        lines[0] == "| Side by side with llama-server | adapter | llama-server | ratio | target |"
    )
    assert all(line.count("|") == 6 for line in lines if line.startswith("|"))
    assert "| 189 ms | 170 ms | **1.11x** | <= 1.05 (missed) |" in table
    assert "model 160 ms" in table and "prompt 150 ms, sampling 10 ms" in table
    assert "**1.00x** model" in table  # 160 / (150 + 10)
    assert "1070-token prompt" in table and "1040 tokens reused" in table
    assert "| 3179 ms | 2600 ms | **1.22x** |" in table
    assert "| 210 ms | 150 ms | **1.40x** | <= 1.0 (missed) |" in table
    assert "| 41.0 | 43.0 | **0.95x** | >= 0.9 (met) |" in table
    assert "| (b) a follow-up: where the time goes | model 180 ms" in table
    assert "HTTP and client 30 ms | **1.50x** model |" in table
    assert "| 90 ms | 60 ms | **1.50x** |" in table
    assert "median share 42% (lowest 5%); top token not an option 17 of 49" in table
    assert "| chat_x | failed: ReadTimeout: timed out |" in table
    assert lines[-1] == RATIO_MEANING


def test_markdown_carries_the_llama_server_table():
    import json

    from bench.report import markdown

    result = json.loads(latest(Path(__file__).parents[2] / "bench" / "results").read_text())
    without = markdown({**result, "llama_server": None})
    assert "Side by side with llama-server" not in without
    with_table = markdown({**result, "llama_server": _versus()})
    assert "| Side by side with llama-server | adapter | llama-server | ratio | target |" in (
        with_table
    )
    partial = _versus()
    del partial["chat"], partial["eight_questions_cached"]
    assert "chat, streamed" not in markdown({**result, "llama_server": partial})


def test_a_concurrency_run_says_how_long_each_level_ran():
    import json

    from bench.report import markdown

    result = json.loads(latest(Path(__file__).parents[2] / "bench" / "results").read_text())
    row = {"clients": 1, "throughput_rps": 2.4, "latency": {"p95_ms": 505.1}, "share_503": 0.0}
    runs = [
        {"max_queue": 0, "seconds_per_level": 2.0, "rows": [row]},
        {"max_queue": 16, "seconds_per_level": 10.0, "rows": [row]},
    ]
    table = markdown({**result, "concurrency": {"runs": runs}})
    assert "| (d) DECISION_MAX_QUEUE=0, 2 s per level, clients:" in table
    assert "| (d) DECISION_MAX_QUEUE=16, 10 s per level, clients:" in table
    assert "1: 2.4/s, 505 ms, 0%" in table


def test_the_header_says_what_the_budget_cut_short():
    import json

    from bench.report import markdown

    result = json.loads(latest(Path(__file__).parents[2] / "bench" / "results").read_text())
    whole = markdown({**result, "run": {**result["run"], "cut_short": []}})
    assert "cut these short" not in whole.splitlines()[0]
    cut = markdown({**result, "run": {**result["run"], "cut_short": ["chat", "concurrency"]}})
    assert cut.splitlines()[0].endswith(
        "The time budget cut these short of the plan: chat, concurrency."
    )


def test_a_sampled_chat_row_says_how_it_sampled_beside_the_greedy_one():
    from bench.report import llama_server_table

    versus = _versus()
    sampled = {**versus["chat"], "sampling": {"top_p": 0.9, "seed": 7}}
    sampled["adapter"] = {**sampled["adapter"], "streamed_generation_tokens_per_s": 38.0}
    sampled["ratios"] = {**sampled["ratios"], "streamed_generation_tokens_per_s": 0.884}
    sampled["meets_target"] = False
    table = "\n".join(llama_server_table({**versus, "chat_top_p": sampled}))
    assert "| chat, streamed: generation tokens/s (64 tokens, 26-token prompt) |" in table
    assert (
        "| chat (top_p 0.9, seed 7), streamed: generation tokens/s (64 tokens, 26-token prompt) "
        "| 38.0 | 43.0 | **0.88x** | >= 0.9 (missed) |"
    ) in table
