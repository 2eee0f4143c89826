"""Labelled evaluation files (JSONL): what to send, and how to read the answer into cases.

One JSON object per line, blank lines and lines starting with `#` skipped. Two kinds:

- a decision: the `decision` schema's fields (`id`, `state`, `question`, `options`) plus
  `expected` (an option id) and optionally `category` (reported separately); the same with the
  decision nested as `{"decision": {...}, "expected": ..., "category": ...}` works too;
- a System One request: `{"systemone": {"state": ..., "questions": {...}}, "expected":
  {"question id": answer}}` with `true`/`false` for noul, a criteria name for choice and a level
  index for score questions; questions without an expected answer are sent but not scored.
  Its `category` may be one name or `{"question id": name}` (names like `routing.queue`: the
  part before the first dot is the kind of decision, reported separately).

Each scored question becomes a `Case`: option ids, probabilities, raw logits, the expected id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The committed labelled files: hand-written examples and the readout splits (data/README.md).
DATA = Path(__file__).resolve().parent / "data"
DECISION_FIELDS = ("id", "state", "question", "options")
SYSTEMONE_MODEL = "jev-latest"  # the adapter's alias for whatever model it serves


class LabelError(ValueError):
    """A line of the labelled file that cannot be evaluated."""


@dataclass
class Case:
    item_id: str
    category: str
    option_ids: list[str]
    probabilities: list[float]
    logits: list[float]
    expected: str
    latency_s: float
    retries: int = 0
    model: dict[str, Any] = field(default_factory=dict)
    served_temperature: float | None = None
    served_readout: str | None = None  # the readout strategy the answer says it was read with

    @property
    def expected_index(self) -> int:
        return self.option_ids.index(self.expected)

    @property
    def predicted(self) -> str:
        return max(self.option_ids, key=lambda k: self.by_id[k])

    @property
    def by_id(self) -> dict[str, float]:
        return dict(zip(self.option_ids, self.probabilities, strict=False))


@dataclass
class DecisionItem:
    decision: dict[str, Any]
    expected: str
    category: str
    kind: str = "decision"

    @property
    def item_id(self) -> str:
        return str(self.decision["id"])

    def body(self, *, reverse: bool = False) -> dict[str, Any]:
        decision = dict(self.decision)
        if reverse:
            decision["options"] = list(reversed(decision["options"]))
        return {"decision": decision}

    @property
    def reversible(self) -> bool:
        return True

    def reorderable(self, case_id: str) -> bool:
        return True

    def cases(self, answer: dict[str, Any], latency_s: float, retries: int) -> list[Case]:
        result = answer["result"]
        return [
            Case(
                item_id=self.item_id,
                category=self.category,
                option_ids=list(result["option_ids"]),
                probabilities=[float(p) for p in result["probabilities"]],
                logits=[float(z) for z in result["option_logits"]],
                expected=self.expected,
                latency_s=latency_s,
                retries=retries,
                model=result.get("model") or {},
                served_temperature=result.get("temperature"),
                served_readout=result.get("readout"),
            )
        ]


@dataclass
class SystemOneItem:
    request: dict[str, Any]
    expected: dict[str, str]  # question id -> expected option key
    category: str
    item_id: str
    kind: str = "systemone"
    categories: dict[str, str] = field(default_factory=dict)  # per question, over `category`

    def body(self, *, reverse: bool = False) -> dict[str, Any]:
        body = {"model": SYSTEMONE_MODEL, **self.request}
        if reverse:
            # Only a choice question's options have no meaning in their order; noul is
            # true/false and score levels are numbered by position.
            body["questions"] = {
                qid: {**q, "criteria": dict(reversed(list(q["criteria"].items())))}
                if q.get("type") == "choice"
                else q
                for qid, q in body["questions"].items()
            }
        return body

    @property
    def reversible(self) -> bool:
        return any(q.get("type") == "choice" for q in self.request["questions"].values())

    def cases(self, answer: dict[str, Any], latency_s: float, retries: int) -> list[Case]:
        cases = []
        for qid, expected in self.expected.items():
            question = self.request["questions"][qid]
            got = answer["answers"][qid]
            if question["type"] == "noul":
                keys = ["true", "false"]
                probabilities = [float(got["noul"]), 1.0 - float(got["noul"])]
            else:
                keys = list(got["probabilities"])
                probabilities = [float(got["probabilities"][k]) for k in keys]
            logits = got.get("x_logits") or {}
            cases.append(
                Case(
                    item_id=f"{self.item_id}/{qid}",
                    category=self.categories.get(qid, self.category),
                    option_ids=keys,
                    probabilities=probabilities,
                    logits=[float(logits[k]) for k in keys] if logits else [],
                    expected=expected,
                    latency_s=latency_s,
                    retries=retries,
                    model=answer.get("x_model_info") or {},
                    served_temperature=got.get("x_temperature"),
                    served_readout=got.get("x_readout"),
                )
            )
        return cases

    def reorderable(self, case_id: str) -> bool:
        qid = case_id.removeprefix(f"{self.item_id}/")
        return bool(self.request["questions"][qid].get("type") == "choice")


Item = DecisionItem | SystemOneItem


def load(path: Path) -> list[Item]:
    items: list[Item] = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                items.append(parse_line(json.loads(line), number))
            except (json.JSONDecodeError, LabelError, KeyError, TypeError) as error:
                raise LabelError(f"{path}:{number}: {error}") from None
    if not items:
        raise LabelError(f"{path}: no labelled items")
    return items


def parse_line(row: dict[str, Any], number: int) -> Item:
    if not isinstance(row, dict):
        raise LabelError("expected a JSON object")
    category = row.get("category", "all")
    if "systemone" in row:
        return _systemone(row, category, number)
    category = str(category)
    if "decision" in row:
        decision = row["decision"]
    else:
        decision = {k: row[k] for k in DECISION_FIELDS if k in row}
    missing = [k for k in DECISION_FIELDS if k not in decision]
    if missing:
        raise LabelError(f"missing {', '.join(missing)}")
    expected = row.get("expected")
    option_ids: list[str] = [o["id"] for o in decision["options"]]
    if expected not in option_ids:
        raise LabelError(f"expected {expected!r} is not one of the option ids {option_ids}")
    return DecisionItem(decision=decision, expected=expected, category=category)


def _systemone(row: dict[str, Any], category: Any, number: int) -> SystemOneItem:
    request = row["systemone"]
    questions = request.get("questions") or {}
    categories: dict[str, str] = {}
    if isinstance(category, dict):
        unknown = [qid for qid in category if qid not in questions]
        if unknown:
            raise LabelError(f"category for unknown question {unknown[0]!r}")
        categories = {qid: str(name) for qid, name in category.items()}
        category = "all"
    expected: dict[str, str] = {}
    for qid, answer in (row.get("expected") or {}).items():
        if qid not in questions:
            raise LabelError(f"expected answer for unknown question {qid!r}")
        kind = questions[qid].get("type")
        if kind == "noul":
            if str(answer).lower() not in ("true", "false"):
                raise LabelError(f"{qid}: a noul answer is true or false, got {answer!r}")
            expected[qid] = str(answer).lower()
        elif kind == "choice":
            if answer not in questions[qid].get("criteria", {}):
                raise LabelError(f"{qid}: {answer!r} is not one of the criteria")
            expected[qid] = answer
        elif kind == "score":
            levels = len(questions[qid].get("criteria", []))
            if not isinstance(answer, int) or not 0 <= answer < levels:
                raise LabelError(f"{qid}: a score answer is a level index below {levels}")
            expected[qid] = str(answer)
        else:
            raise LabelError(f"{qid}: unknown question type {kind!r}")
    if not expected:
        raise LabelError("a System One line needs `expected` answers")
    return SystemOneItem(
        request=request,
        expected=expected,
        category=str(category),
        item_id=str(row.get("id", f"line{number}")),
        categories=categories,
    )
