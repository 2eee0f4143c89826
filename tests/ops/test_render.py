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


def test_decision_table_layout_and_facts_exactly():
    result = {
        "id": "route",
        "option_ids": ["billing", "shipping"],
        "probabilities": [0.25, 0.75],
        "option_logits": [None, 1.1],
        "input_tokens": 42,
        "allowed_token_mass": 0.5,
        "prompt_version": "v3",
    }
    # One bar character per 1/24 of probability; an absent logit leaves its cell empty.
    assert render_response({"results": [result, result | {"id": "again"}]}) == (
        "decision route: shipping (p=0.750)\n"
        "  option    probability  logit\n"
        "  billing   0.2500              ######\n"
        "  shipping  0.7500       1.100  ##################\n"
        "  input tokens 42, allowed token mass 0.5, prompt v3\n"
        "\n"
        "decision again: shipping (p=0.750)\n"
        "  option    probability  logit\n"
        "  billing   0.2500              ######\n"
        "  shipping  0.7500       1.100  ##################\n"
        "  input tokens 42, allowed token mass 0.5, prompt v3"
    )


def test_decision_missing_fields_still_renders_its_header():
    assert render_response({"result": {}}) == "decision ?\n  option  probability  logit"
    assert render_response({"result": {"id": "x", "option_ids": ["a"]}}) == (
        "decision x\n  option  probability  logit"
    )


def test_systemone_lines_for_each_answer_type_and_usage():
    payload = {
        "answers": {
            "odd": {"type": "vector", "v": [1]},
            "urgent": {"type": "noul", "noul": 0.25},
            "queue": {"type": "choice", "choice": "billing", "probabilities": {"billing": 1.0}},
            "bare": {"type": "choice", "choice": "x"},
        },
        "usage": {"input_tokens": 7, "output_tokens": 0},
    }
    assert render_response(payload) == (
        "model ?\n"
        'odd: {"type": "vector", "v": [1]}\n'
        "urgent (noul): P(true)=0.2500\n"
        "queue (choice): billing\n"
        "  answer   probability\n"
        "  billing  1.0000       ########################\n"
        "bare (choice): x\n"
        "  answer  probability\n"
        "input tokens 7, output tokens 0"
    )


def test_systemone_names_the_model():
    payload = {"model": "jev-latest", "answers": {"q": {"type": "noul", "noul": 1.0}}}
    assert render_response(payload) == "model jev-latest\nq (noul): P(true)=1.0000"


def test_chat_choices_are_separated_and_an_empty_message_prints_nothing():
    payload = {"choices": [{"message": {"content": "Hi"}}, {"message": None}, {}]}
    assert render_response(payload) == "Hi\n---\n\n---\n"


def test_fallback_json_is_indented_and_keeps_non_ascii_text():
    payload = {"error": "Überlastet", "retryable": True}
    assert render_response(payload) == '{\n  "error": "Überlastet",\n  "retryable": true\n}'
