"""Answer-cue variants on a served instruct model, measured on a labelled split.

The built-in readout of an instruct model (`json_choice`) reads routing and content questions
well but answers every scored level with one number and leans to `false` on yes/no questions
(results/). Two remedies published decision servers and the calibration literature use, tried
here from the client side against a served adapter, so that none of them enters the product
before it has earned it:

- `levels_by_words`: a score question asked as a choice whose candidates are its levels' own
  words (`"Routine request; respond within 2 business days."`) instead of their numbers, so the
  continuation read is what the level says, not a digit the model prefers whatever it read;
- `_sum`: each option scored by its whole continuation's log-probability (the chance the model
  writes it) instead of the mean per token, which favours long names whose later tokens only
  copy the candidate list;
- `content_free`: each question asked again about the content-free state `N/A`, and those
  option scores subtracted from the real ones (contextual calibration: the model's prior for an
  option, whatever the state, is removed), for `json_choice` and for `levels_by_words`.

Every variant is measured per question (accuracy against the majority class, ECE, NLL) and per
yes/no question by the share of answers on its commoner side against its labels'.

    python -m research.instruct_readouts.variants --url http://127.0.0.1:8080 \\
        evaluation/data/readout_dev.jsonl \\
        --out research/instruct_readouts/results/variants-NAME.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from decision_adapter.contract import question_kind

from evaluation import labelled, metrics, readout_choice
from evaluation.cli import Target
from evaluation.labelled import Case, SystemOneItem

CONTENT_FREE_STATE = "N/A"  # the adapter's own content-free state (prompts.CONTENT_FREE_STATE)
WORDS_SUFFIX = "__by_words"
READOUT = "json_choice"


def level_words(level: Any) -> str:
    return level if isinstance(level, str) else json.dumps(level, ensure_ascii=False)


def with_level_words(questions: dict[str, Any]) -> dict[str, Any]:
    """The questions, plus each score question again as a choice among its levels' words."""
    out = dict(questions)
    for qid, question in questions.items():
        if question.get("type") == "score":
            names = [level_words(level) for level in question["criteria"]]
            out[qid + WORDS_SUFFIX] = {
                "type": "choice",
                "instructions": question.get("instructions"),
                "criteria": dict.fromkeys(names),
            }
    return out


def option_logits(
    answer: dict[str, Any], question: dict[str, Any], field: str = "x_logits"
) -> list[float]:
    """One answer's option scores (`x_logits`: what the readout takes the softmax over, a mean
    log-probability per token for json_choice; `x_log_probs`: each option's whole log-probability),
    in the question's option order."""
    logits = answer[field]
    if question.get("type") == "score":
        return [float(logits[str(level)]) for level in range(len(question["criteria"]))]
    if question.get("type") == "noul":
        return [float(logits["true"]), float(logits["false"])]
    return [float(logits[name]) for name in question["criteria"]]


def ask(state: Any, questions: dict[str, Any]) -> dict[str, Any]:
    """A System One body read with json_choice whatever the served model's own readout is: the
    variants are computed from its mean (`x_logits`) and whole (`x_log_probs`) scores."""
    return {"model": "jev-latest", "state": state, "questions": questions, "x_readout": READOUT}


def measure(items: list[SystemOneItem], target: Target) -> dict[str, list[Case]]:
    cases: dict[str, list[Case]] = defaultdict(list)
    # The content-free answer depends on the questions alone: asked once per question set.
    neutral_answers: dict[str, dict[str, Any]] = {}
    for item in items:
        questions = with_level_words(item.request["questions"])
        real, seconds, _ = target.send(
            "systemone",
            ask(item.request["state"], questions),
        )
        key = json.dumps(questions, sort_keys=True)
        if key not in neutral_answers:
            neutral_answers[key], _, _ = target.send(
                "systemone",
                ask(CONTENT_FREE_STATE, questions),
            )
        neutral = neutral_answers[key]
        for qid, expected in item.expected.items():
            question = item.request["questions"][qid]
            base = item.categories.get(qid, item.category)
            asked = {"json_choice": qid}
            if question["type"] == "score":
                asked["levels_by_words"] = qid + WORDS_SUFFIX
            else:
                asked["levels_by_words"] = qid  # only score questions change
            for variant, asked_id in asked.items():
                words = asked_id.endswith(WORDS_SUFFIX)
                shape = (
                    {"type": "choice", "criteria": questions[asked_id]["criteria"]}
                    if words
                    else question
                )
                for suffix, field in (("", "x_logits"), ("_sum", "x_log_probs")):
                    raw = option_logits(real["answers"][asked_id], shape, field)
                    prior = option_logits(neutral["answers"][asked_id], shape, field)
                    calibrated = list(np.subtract(raw, prior))
                    for name, logits in (
                        (variant + suffix, raw),
                        (f"{variant}{suffix}+content_free", calibrated),
                    ):
                        cases[name].append(
                            Case(
                                item_id=f"{item.item_id}/{qid}",
                                category=base,
                                option_ids=_option_ids(question),
                                probabilities=metrics.softmax(logits).tolist(),
                                logits=logits,
                                expected=expected,
                                latency_s=seconds,
                            )
                        )
    return cases


def _option_ids(question: dict[str, Any]) -> list[str]:
    if question["type"] == "noul":
        return ["true", "false"]
    if question["type"] == "score":
        return [str(level) for level in range(len(question["criteria"]))]
    return list(question["criteria"])


def one_sidedness(cases: list[Case]) -> dict[str, dict[str, float]]:
    """Per yes/no question: the share of answers on the commoner side, and of labels."""
    by_question: dict[str, list[Case]] = defaultdict(list)
    for case in cases:
        if case.option_ids == ["true", "false"]:
            by_question[case.category].append(case)
    out = {}
    for name, group in sorted(by_question.items()):
        answered = Counter(c.predicted for c in group).most_common(1)[0][1] / len(group)
        labels = Counter(c.expected for c in group).most_common(1)[0][1] / len(group)
        out[name] = {"answers_one_side": answered, "labels_one_side": labels}
    return out


def report(cases: list[Case]) -> dict[str, Any]:
    """One variant's figures: the readout choice's, by question kind, and yes/no one-sidedness."""
    out = readout_choice.strategy_report(cases, None)
    out.pop("latency", None)
    out["by_question_kind"] = readout_choice.grouped(cases, lambda c: question_kind(c.option_ids))
    out["yes_no_one_sided"] = one_sidedness(cases)
    return out


def summarise(cases: dict[str, list[Case]]) -> dict[str, Any]:
    return {variant: report(group) for variant, group in cases.items()}


CASE_FIELDS = ("item_id", "category", "option_ids", "logits", "expected")


def case_record(case: Case) -> dict[str, Any]:
    return {name: getattr(case, name) for name in CASE_FIELDS}


def case_from_record(record: dict[str, Any]) -> Case:
    logits = [float(x) for x in record["logits"]]
    return Case(
        **record,
        probabilities=metrics.softmax(logits).tolist(),
        latency_s=0.0,
    )


def results_text(result: dict[str, Any]) -> str:
    """The results as indented JSON, but each case on a line of its own: thousands of them."""
    head = json.dumps({k: v for k, v in result.items() if k != "cases"}, indent=2)
    groups = [
        f"    {json.dumps(variant)}: [\n"
        + ",\n".join(f"      {json.dumps(record)}" for record in records)
        + "\n    ]"
        for variant, records in result.get("cases", {}).items()
    ]
    if not groups:
        return head + "\n"
    return head[:-2] + ',\n  "cases": {\n' + ",\n".join(groups) + "\n  }\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.instruct_readouts.variants")
    parser.add_argument("file", type=Path, help="labelled System One JSONL (a readout split)")
    parser.add_argument("--url", required=True, help="a served adapter, no profile")
    parser.add_argument("--out", type=Path, required=True, help="where the JSON goes")
    parser.add_argument("--limit", type=int, help="only the first N items")
    args = parser.parse_args(argv)
    items = [i for i in labelled.load(args.file) if isinstance(i, SystemOneItem)]
    items = items[: args.limit] if args.limit else items
    cases = measure(items, Target.url(args.url, max_attempts=5, timeout_s=120))
    result = {
        "file": str(args.file),
        "items": len(items),
        "variants": summarise(cases),
        # Each case's raw option scores, so a temperature can be fitted on one split's results
        # and measured on another's (held_out.py) without asking the model again.
        "cases": {variant: [case_record(c) for c in group] for variant, group in cases.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(results_text(result))
    for variant, report in result["variants"].items():
        below = report["below_majority"]
        print(
            f"{variant:30s} acc {report['accuracy']:.3f} nll {report['nll']:.3f} "
            f"ece {report['ece']:.3f} below majority {len(below)}: {', '.join(below)}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
