"""A trained decision model's own head, as the GGUF declares it (`<arch>.decision.*`).

llama.cpp b11361 and later serve such models on llama-server's /v1/systemone
(tools/server/server-decision.cpp); this module reads the same metadata the same way, so the
adapter computes what llama-server computes (research/decision_models/README.md):
- the type (`<arch>.decision.type`): which outputs answer a question;
- the `systemone` chat template, which renders each question's prompt;
- the temperatures (`<arch>.decision.temperature.<kind>[.<bucket>]`), looked up by question
  kind and option-count bucket, then kind, else 1.0;
- for the label types, the label tokens read at the last prompt token;
- for the types read through hidden states (kev, laya), the marker token whose rows are read:
  kev's `<|box_end|>`, which ends each option, laya's mask token, which starts each option, and
  laya's separator and `max_head_tokens`, which its prompt is cut to.
A model without the type key is a generic language model (None); a type the engine does not
know, or one the adapter does not serve, is refused at start-up with the reason.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field

from model_manifest.decision import (
    ENGINE_TYPES,
    NOT_SERVED,
    InvalidTemperature,
    decision_temperatures,
)

from ..errors import EngineError
from .engine import Engine

# The label types' answer is label tokens' logits at the last prompt token.
LABEL_TYPES = ("openjev", "lev", "nimble")
# The types whose answer is read from per-token hidden states, in an embeddings context: kev's
# pointer head (a dot product of the last token's query with each option's key), laya's encoder
# head (one column per question kind at each option's marker). clef's joint head reads them too.
EMBEDDING_TYPES = ("kev", "laya", "clef")
LEV_RATINGS = 9  # lev answers a yes/no question on a 0-8 rating scale
MAX_LABELS = 255
MAX_OPTIONS = 255  # kev and laya: llama-server's fixed limit
KEV_MARKER = "<|box_end|>"


@dataclass(frozen=True)
class DecisionHead:
    """What the GGUF declares about answering decisions."""

    type: str
    template: str
    temperatures: dict[str, float] = field(default_factory=dict)
    labels: tuple[int, ...] = ()  # label tokens, in option position order
    label_texts: tuple[str, ...] = ()  # lev and nimble show the codes to the template
    noul_true_first: bool = False  # openjev lists `true` before `false`
    max_options: int = 0
    marker: int | None = None  # kev, laya: the token whose row is read for each option
    # laya: the marker's text, replaced by a space in every input, so only the template writes it
    mask_text: str = ""
    separator: int | None = None  # laya: the prompt's parts end with it
    max_head_tokens: int = 0  # laya: what the question and its options are cut to
    width: int = 0  # kev, laya: the floats of a row (kev: query and key, h each)

    @property
    def reads_embeddings(self) -> bool:
        return self.type in EMBEDDING_TYPES

    @property
    def keeps_memory(self) -> bool:
        """Whether a prompt can continue a decoded prefix: laya's encoder reads its whole
        prompt at once, with no memory between batches."""
        return self.type != "laya"

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


def reads_embeddings(engine: Engine) -> bool:
    """Whether the loaded model is answered through hidden states (its engine then needs an
    embeddings context): asked by Engine before it makes its context."""
    return engine.metadata(f"{engine.architecture}.decision.type") in EMBEDDING_TYPES


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
    temperatures = _temperatures(engine, prefix + "temperature.")
    if declared == "kev":
        return DecisionHead(
            type=declared,
            template=template,
            temperatures=temperatures,
            max_options=MAX_OPTIONS,
            marker=_kev_marker(engine),
            width=engine.n_embd_out,
        )
    if declared == "laya":
        marker, separator = engine.mask_token, engine.separator_token
        if marker is None or separator is None:
            raise EngineError("decision model has no mask or sep token")
        max_head_tokens = _unsigned(engine.metadata(prefix + "max_head_tokens"))
        if max_head_tokens == 0:
            raise EngineError("decision model has no valid max_head_tokens")
        return DecisionHead(
            type=declared,
            template=template,
            temperatures=temperatures,
            max_options=MAX_OPTIONS,
            marker=marker,
            mask_text=engine.piece(marker).decode("utf-8", "replace"),
            separator=separator,
            max_head_tokens=max_head_tokens,
            width=engine.n_embd_out,
        )
    labels, label_texts = _labels(engine, declared)
    return DecisionHead(
        type=declared,
        template=template,
        temperatures=temperatures,
        labels=labels,
        label_texts=label_texts,
        noul_true_first=declared == "openjev",
        max_options=len(labels),
    )


def _kev_marker(engine: Engine) -> int:
    """The token that ends each option of kev's prompt, where its key is read."""
    pieces = engine.tokenize(KEV_MARKER, special=True)
    if len(pieces) != 1:
        raise EngineError(f"decision model has no {KEV_MARKER} token")
    return pieces[0]


def _unsigned(text: str | None) -> int:
    """strtoul's reading: the leading digits, 0 where there are none."""
    digits = ""
    for character in (text or "").strip():
        if character not in string.digits:
            break
        digits += character
    return int(digits) if digits else 0


def _temperatures(engine: Engine, prefix: str) -> dict[str, float]:
    try:
        return decision_temperatures(engine.metadata_items(prefix), prefix)
    except InvalidTemperature as refused:
        raise EngineError(str(refused)) from None


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
