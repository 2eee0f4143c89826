"""Readable rendering of each answer format."""

import json

from ops.render import render_response


def test_shared_state_results_render_one_table_each():
    payload = {
        "results": [
            {
                "id": "a",
                "option_ids": ["x", "y"],
                "probabilities": [0.25, 0.75],
                "option_logits": [0.0, 1.1],
            },
            {
                "id": "b",
                "option_ids": ["x", "y"],
                "probabilities": [0.9, 0.1],
                "option_logits": [2.2, 0.0],
            },
        ],
        "timing": {"total_ms": 12},
    }
    text = render_response(payload)
    assert "decision a: y (p=0.750)" in text and "decision b: x (p=0.900)" in text
    assert text.count("option  probability") == 2


def test_score_answer_shows_score_legend_and_probabilities():
    payload = {
        "model": "m",
        "answers": {
            "severity": {
                "type": "score",
                "score": 1.2,
                "confidence": 0.4,
                "legend": {"0": "low", "1": "mid", "2": "high"},
                "probabilities": {"0": 0.2, "1": 0.4, "2": 0.4},
            }
        },
    }
    text = render_response(payload)
    assert "severity (score): 1.200, confidence 0.400" in text
    assert any(line.strip().startswith("2 high") and "0.4000" in line for line in text.splitlines())


def test_unknown_shapes_fall_back_to_pretty_json():
    payload = {"error": "all slots busy", "retryable": True}
    assert json.loads(render_response(payload)) == payload
