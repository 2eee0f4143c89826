"""A trained decision model's own head, as the GGUF declares it (`<arch>.decision.*`).

llama.cpp b11361 and later serve such models on llama-server's /v1/systemone
(tools/server/server-decision.cpp); this module reads the same metadata the same way, so the
adapter computes what llama-server computes (research/decision_models/README.md):
- the type (`<arch>.decision.type`): which outputs answer a question;
- the `systemone` chat template, which renders each question's prompt;
- the temperatures (`<arch>.decision.temperature.<kind>[.<bucket>]`), looked up by question
  kind and option-count bucket, then kind, else 1.0;
- for the label types, the label tokens read at the last prompt token.
A model without the type key is a generic language model (None); a type the engine does not
know, or one the adapter does not serve, is refused at start-up with the reason.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field

from ..errors import EngineError
from .engine import Engine

# Every type the engine's llama.cpp (b11434, common/common.cpp) knows.
ENGINE_TYPES = ("openjev", "lev", "kev", "nimble", "laya", "clef")
# The types whose answer is label tokens' logits at the last prompt token.
LABEL_TYPES = ("openjev", "lev", "nimble")
# Why a type the engine knows is not served (yet), said at start-up and in docs/models.md.
NOT_SERVED = {
    "kev": "its pointer head is read through per-token embeddings, which the adapter does not "
    "read yet",
    "laya": "its encoder head is read through per-token embeddings, which the adapter does not "
    "read yet",
    "clef": "its joint head needs llama_batch_ext_set_decision_order, a C++ staging call "
    "(src/llama-ext.h) that libllama exports under a mangled name only and the bindings lack",
}
LEV_RATINGS = 9  # lev answers a yes/no question on a 0-8 rating scale
MAX_LABELS = 255


@dataclass(frozen=True)
class DecisionHead:
    """What the GGUF declares about answering decisions."""

    type: str
    template: str
    temperatures: dict[str, float] = field(default_factory=dict)
    labels: tuple[int, ...] = ()  # label tokens, in option position order
    label_texts: tuple[str, ...] = ()  # lev and nimble show the codes to the template
    noul_true_first: bool = False  # openjev lists `true` before `false`

    @property
    def max_options(self) -> int:
        return len(self.labels)

    def temperature(self, kind: str, n_options: int) -> float:
        """The kind's temperature for this many options (server-decision.cpp's buckets)."""
        if self.type == "lev":
            bucket = "small" if n_options <= 8 else "mid" if n_options <= 26 else "large"
        else:
            bucket = (
                "2"
                if n_options <= 2
                else "3_5"
                if n_options <= 5
                else "6_10"
                if n_options <= 10
                else "11"
            )
        for name in (f"{kind}.{bucket}", kind):
            if name in self.temperatures:
                return self.temperatures[name]
        return 1.0

    def variants(self, kind: str, n_options: int) -> int:
        """Prompts per question: lev shows a choice's options in both orders."""
        return 2 if self.type == "lev" and kind == "choice" and n_options > 1 else 1

    def outputs(self, kind: str, n_options: int) -> int:
        """Labels read per prompt: lev rates a yes/no question on its 9-point scale."""
        return LEV_RATINGS if self.type == "lev" and kind == "noul" else n_options

    def as_dict(self) -> dict[str, object]:
        return {
            "type": self.type,
            "max_options": self.max_options,
            "temperatures": dict(sorted(self.temperatures.items())),
        }


def read_decision_head(engine: Engine) -> DecisionHead | None:
    """The model's decision head, None for a generic model; EngineError for one the adapter
    cannot serve, naming the type and why."""
    prefix = f"{engine.architecture}.decision."
    declared = engine.metadata(prefix + "type")
    if declared is None:
        return None
    if declared not in ENGINE_TYPES:
        raise EngineError(
            f"unsupported decision model type: {declared} (this llama.cpp knows "
            f"{', '.join(ENGINE_TYPES)})"
        )
    if declared in NOT_SERVED:
        raise EngineError(f"decision model type {declared} is not served: {NOT_SERVED[declared]}")
    template = engine.named_chat_template("systemone")
    if template is None:
        raise EngineError('decision model has no "systemone" template')
    labels, label_texts = _labels(engine, declared)
    return DecisionHead(
        type=declared,
        template=template,
        temperatures=_temperatures(engine, prefix + "temperature."),
        labels=labels,
        label_texts=label_texts,
        noul_true_first=declared == "openjev",
    )


def _temperatures(engine: Engine, prefix: str) -> dict[str, float]:
    found = {}
    for key, value in engine.metadata_items(prefix).items():
        try:
            temperature = float(value)
        except ValueError:
            temperature = 0.0  # strtof's reading of what is not a number
        if temperature <= 0:
            raise EngineError(f"invalid decision temperature: {key} = {value}")
        found[key[len(prefix) :]] = temperature
    return found


def _labels(engine: Engine, declared: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The label tokens, and the codes the template shows where it shows them."""
    if declared == "openjev":
        # One letter per option, each one token, else the model cannot be read.
        tokens = []
        for letter in string.ascii_uppercase + string.ascii_lowercase:
            pieces = engine.tokenize(letter, special=False)
            if len(pieces) != 1:
                raise EngineError(f"decision label '{letter}' is not a single token")
            tokens.append(pieces[0])
        return tuple(tokens), ()
    # lev, nimble: A..Z then AA..ZZ, the single-token ones, at most 255.
    codes = list(string.ascii_uppercase) + [
        a + b for a in string.ascii_uppercase for b in string.ascii_uppercase
    ]
    labels: list[int] = []
    texts: list[str] = []
    for code in codes:
        pieces = engine.tokenize(code, special=False)
        if len(pieces) == 1 and len(labels) < MAX_LABELS:
            labels.append(pieces[0])
            texts.append(code)
    return tuple(labels), tuple(texts)
