"""Readable text for the adapter's answers: decision tables, System One answers, chat replies."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

BAR_WIDTH = 24


def render_response(payload: Any) -> str:
    if isinstance(payload, dict):
        if isinstance(payload.get("result"), dict):
            return render_decision(payload["result"])
        if isinstance(payload.get("results"), list):
            return "\n\n".join(render_decision(r) for r in payload["results"])
        if isinstance(payload.get("answers"), dict):
            return render_systemone(payload)
        if isinstance(payload.get("choices"), list):
            return render_chat(payload)
    return json.dumps(payload, indent=2, ensure_ascii=False)


def _bar(probability: float) -> str:
    return "#" * round(max(0.0, min(1.0, probability)) * BAR_WIDTH)


def _table(rows: Sequence[tuple[object, ...]], header: tuple[str, ...]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def render_decision(result: dict[str, Any]) -> str:
    option_ids = result.get("option_ids", [])
    probabilities = result.get("probabilities", [])
    logits = result.get("option_logits", [None] * len(option_ids))
    lines = [f"decision {result.get('id', '?')}"]
    if probabilities:
        best = max(range(len(probabilities)), key=probabilities.__getitem__)
        lines[0] += f": {option_ids[best]} (p={probabilities[best]:.3f})"
    rows = [
        (option, f"{p:.4f}", "" if logit is None else f"{logit:.3f}", _bar(p))
        for option, p, logit in zip(option_ids, probabilities, logits, strict=False)
    ]
    lines += _table(rows, ("option", "probability", "logit", ""))
    facts = [
        f"{label} {result[key]}"
        for key, label in (
            ("input_tokens", "input tokens"),
            ("allowed_token_mass", "allowed token mass"),
            ("prompt_version", "prompt"),
        )
        if key in result
    ]
    if facts:
        lines.append("  " + ", ".join(facts))
    return "\n".join(lines)


def render_systemone(payload: dict[str, Any]) -> str:
    lines = [f"model {payload.get('model', '?')}"]
    for question_id, answer in payload["answers"].items():
        kind = answer.get("type")
        if kind == "noul":
            lines.append(f"{question_id} (noul): P(true)={answer['noul']:.4f}")
            continue
        if kind == "choice":
            head = f"{question_id} (choice): {answer.get('choice')}"
        elif kind == "score":
            head = f"{question_id} (score): {answer.get('score'):.3f}"
        else:
            lines.append(f"{question_id}: {json.dumps(answer)}")
            continue
        if "confidence" in answer:
            head += f", confidence {answer['confidence']:.3f}"
        lines.append(head)
        legend = answer.get("legend", {})
        rows = [
            (f"{name} {legend[name]}" if name in legend else name, f"{p:.4f}", _bar(p))
            for name, p in answer.get("probabilities", {}).items()
        ]
        lines += _table(rows, ("answer", "probability", ""))
    usage = payload.get("usage")
    if usage:
        lines.append(", ".join(f"{k.replace('_', ' ')} {v}" for k, v in usage.items()))
    return "\n".join(lines)


def render_chat(payload: dict[str, Any]) -> str:
    contents = [(choice.get("message") or {}).get("content") or "" for choice in payload["choices"]]
    return "\n---\n".join(contents)
