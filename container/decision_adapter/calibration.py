"""Calibration: the model's readout strategy and its softmax temperature, applied before the
softmax.

A model's label logits rank the options well but are often over- or under-confident; dividing
them by a temperature fitted offline on held-out decisions corrects the probabilities without
changing which option wins. The temperature belongs to the model, so it comes with the model:
`calibration.json` beside the GGUF (optionally naming the GGUF's sha256, so a file copied onto
another model is refused), else the file bound to it in a folder of profiles
(`DECISION_CALIBRATION_PROFILES`, for a GGUF served from where no file lies beside it), or
`DECISION_CALIBRATION_TEMPERATURE`, which wins over both.
The file also names the readout it was fitted for (`readout`, chosen on labelled data by
`python -m evaluation --choose-readout`), which the adapter then uses by default; a file without one
was fitted before readouts had names, on the letter readout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from model_manifest.small_files import SmallFileError, read_small_file

CALIBRATION_FILENAME = "calibration.json"
# A calibration file is a temperature, a readout and what its fitting recorded: kilobytes. A
# larger file is not one, and reading it (or /dev/zero) would hold start-up.
MAX_FILE_BYTES = 1 << 20

# How a question's option scores are read (the scoring layer implements each; research/
# readout_study/results/readout_study.md measured them): `letters`, the options listed with
# letter labels and the label read; `option_text`, each option's id as the continuation of "The
# correct answer is" (mean log-probability per token); `option_text_desc`, its id and
# description; `calibrated`, option_text minus the same scores against a content-free state;
# `permuted_letters`, letters averaged over every cyclic rotation of the options; `json_choice`,
# the options listed in sorted order, the answer opened as `{"choice": "` and each option's id
# (and closing quote) read as its continuation (mean log-probability per token);
# `json_choice_sum`, the same read as the whole continuation's log-probability.
ReadoutName = Literal[
    "letters",
    "option_text",
    "option_text_desc",
    "calibrated",
    "permuted_letters",
    "json_choice",
    "json_choice_sum",
]
READOUTS: tuple[str, ...] = get_args(ReadoutName)
# Without a per-model file, by how the model is prompted. An instruct model (its GGUF has a chat
# template) gets the JSON answer cue read as each name's whole log-probability: on the dev splits
# of three instruct models (Qwen2.5-Coder 1.5B and 0.5B, SmolLM2 135M) it was at least as
# accurate as the mean per token on each, reading multi-token names far better on the 1.5B, and
# it never flips on reversed options (research/instruct_readouts/README.md). A base model (a
# plain completion prompt) keeps `letters`, the one it was measured with; base models get cloze
# readouts through their files (python -m evaluation --choose-readout).
BUILT_IN_READOUTS = {"chat-template": "json_choice_sum", "completion": "letters"}
# The built-in readout's own temperature (other readouts read raw, at T = 1). A whole name's
# log-probability counts a one-token name's closing quote as a second token, so it is sharper
# than the mean per token. Chosen on the three models' dev splits together: of the temperatures
# at which none of them is worse calibrated (dev NLL) than with the mean at T = 1, the best for
# the one that reads (the 1.5B, as the 1.5B-4B models users deploy do). The small models want
# far more (0.5B: 8, SmolLM2: 14), which is what their profiles are for.
BUILT_IN_TEMPERATURES = {"json_choice_sum": 2.05}
BUILT_IN_READOUT = "letters"  # what a readout is before the prompt mode is known
# What a question asks, read from its options (contract.question_kind): yes or no, a level on a
# scale, or one of several names. One temperature can leave one kind over- and another
# under-confident, so a file may fit a temperature per kind.
QuestionKind = Literal["noul", "choice", "score"]


def built_in_readout(prompt_mode: str) -> str:
    return BUILT_IN_READOUTS[prompt_mode]


class CalibrationError(ValueError):
    """A calibration file the adapter cannot trust; the server refuses to start."""


class CalibrationFile(BaseModel):
    # A fitting tool may record its data set and metrics beside the temperature.
    model_config = ConfigDict(extra="ignore")
    temperature: float = Field(gt=0.0, le=100.0)
    gguf_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    readout: ReadoutName = "letters"
    # Per question kind, over `temperature` for the questions of that kind (kinds not named
    # keep it): python -m evaluation --choose-readout keeps a kind's own only where it improved that
    # kind's held-out calibration.
    temperatures: dict[QuestionKind, Annotated[float, Field(gt=0.0, le=100.0)]] = Field(
        default_factory=dict
    )


@dataclass(frozen=True)
class Calibration:
    temperature: float = 1.0
    # The variable, the file, "built-in" (the built-in readout's own temperature) or "none"
    # (temperature 1: raw probabilities).
    source: str = "none"
    # The default readout, the one a file's T was fitted for; None: the built-in one of the
    # model's prompt mode (for_prompt_mode fills it in).
    readout: str | None = None
    by_kind: Mapping[QuestionKind, float] = field(default_factory=dict)  # over `temperature`

    def default_readout(self, prompt_mode: str) -> str:
        """The readout of a question that names none: the file's, else the prompt mode's."""
        return self.readout if self.readout is not None else built_in_readout(prompt_mode)

    def for_prompt_mode(self, prompt_mode: str) -> Calibration:
        if self.readout is not None:
            return self
        readout = built_in_readout(prompt_mode)
        if self.source != "none" or readout not in BUILT_IN_TEMPERATURES:
            return replace(self, readout=readout)
        # The built-in temperature belongs to the built-in readout, as a file's to its own.
        return Calibration(BUILT_IN_TEMPERATURES[readout], "built-in", readout)

    def temperature_for(self, readout: str, kind: QuestionKind = "choice") -> float:
        """A fitted temperature belongs to the readout it was fitted on, and to the question
        kind it was fitted for where the file fitted one per kind; other readouts' scores have
        other scales and stay raw. The variable applies to every readout and kind."""
        if self.source.startswith("DECISION_"):
            return self.temperature
        if self.source == "none" or readout == self.readout:
            return self.by_kind.get(kind, self.temperature)
        return 1.0

    def as_extension(self) -> dict[str, Any]:
        extension: dict[str, Any] = {
            "temperature": self.temperature,
            "source": self.source,
            "readout": self.readout,
        }
        if self.by_kind:
            extension["temperatures"] = dict(self.by_kind)
        return extension


def load_calibration(
    temperature: float | None, gguf: Path, gguf_sha256: str, profiles: Path | None = None
) -> Calibration:
    """The variable's temperature, else the file beside the GGUF (or one directory up, for
    */*.gguf layouts, as with the manifest), else the profile bound to this GGUF in the
    `profiles` folder, else none."""
    if temperature is not None:
        return Calibration(temperature, "DECISION_CALIBRATION_TEMPERATURE")
    for directory in (gguf.parent, gguf.parent.parent):
        path = directory / CALIBRATION_FILENAME
        if path.is_file():
            return _read(path, gguf_sha256)
    if profiles is not None:
        return _profile_for(profiles, gguf_sha256)
    return Calibration()


def _profile_for(profiles: Path, gguf_sha256: str) -> Calibration:
    """The one profile naming this GGUF's sha256; a profile that names none fits no model here,
    and one naming another GGUF is skipped whatever else it holds. A profile that cannot be read
    might have been this model's: it stops the start-up, unless this model's profile is there."""
    if not profiles.is_dir():
        raise CalibrationError(f"DECISION_CALIBRATION_PROFILES: {profiles} is not a folder")
    ours: list[Path] = []
    broken: list[CalibrationError] = []
    for path in sorted(profiles.glob("*.json")):
        try:
            content = _json_of(path)
            if _bound_elsewhere(content, gguf_sha256):
                continue
            if _validated(path, content).gguf_sha256 == gguf_sha256:
                ours.append(path)
        except CalibrationError as error:
            broken.append(error)
    if len(ours) > 1:
        raise CalibrationError(
            f"DECISION_CALIBRATION_PROFILES: {ours[0]} and {ours[1]} are both bound to the "
            f"served GGUF (sha256 {gguf_sha256}); keep one"
        )
    if ours:
        return _read(ours[0], gguf_sha256)
    if broken:
        raise broken[0]
    return Calibration()


def _bound_elsewhere(content: Any, gguf_sha256: str) -> bool:
    bound_to = content.get("gguf_sha256") if isinstance(content, dict) else None
    return isinstance(bound_to, str) and bound_to != gguf_sha256


def _file_text(path: Path) -> str:
    try:
        data = read_small_file(path, MAX_FILE_BYTES, "a calibration file")
    except SmallFileError as error:
        raise CalibrationError(str(error)) from None
    except OSError as error:  # gone since it was found
        raise CalibrationError(f"{path}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CalibrationError(f"{path}: not UTF-8 ({error.reason})") from None


def _json_of(path: Path) -> Any:
    text = _file_text(path)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:  # deep nesting: RecursionError
        raise CalibrationError(f"{path}: {error}") from None


def _validated(path: Path, content: Any) -> CalibrationFile:
    try:
        return CalibrationFile.model_validate(content)
    except ValidationError as error:
        first = error.errors()[0]
        detail = f"{'.'.join(map(str, first['loc'])) or 'body'}: {first['msg']}"
        raise CalibrationError(f"{path}: {detail}") from None


def _parse(path: Path) -> CalibrationFile:
    return _validated(path, _json_of(path))


def _read(path: Path, gguf_sha256: str) -> Calibration:
    calibration = _parse(path)
    if calibration.gguf_sha256 is not None and calibration.gguf_sha256 != gguf_sha256:
        raise CalibrationError(
            f"{path} was fitted for the GGUF with sha256 {calibration.gguf_sha256}, "
            f"but the served GGUF has {gguf_sha256}; refusing to serve"
        )
    return Calibration(
        calibration.temperature, str(path), calibration.readout, calibration.temperatures
    )
