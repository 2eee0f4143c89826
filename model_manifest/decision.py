"""What a trained decision GGUF must declare to be served (`<arch>.decision.*`): the types the
engine knows and which of them the adapter serves, and the temperatures read as llama.cpp reads
them. The packager refuses at packaging what the adapter would refuse at start-up, by the same
rules."""

from __future__ import annotations

from collections.abc import Mapping

# Every type the engine's llama.cpp (b11434, common/common.cpp) knows.
ENGINE_TYPES = ("openjev", "lev", "kev", "nimble", "laya", "clef")
# Why a type the engine knows is not served (yet), said at start-up and in docs/models.md.
NOT_SERVED = {
    "clef": "its joint head needs llama_batch_ext_set_decision_order, a C++ staging call "
    "(src/llama-ext.h) that libllama exports under a mangled name only and the bindings lack",
}
SERVED_TYPES = tuple(name for name in ENGINE_TYPES if name not in NOT_SERVED)


class InvalidTemperature(ValueError):
    """A temperature llama.cpp refuses at load: not a number above 0."""

    def __init__(self, key: str, name: str, value: object) -> None:
        super().__init__(f"invalid decision temperature: {key} = {value}")
        self.key, self.name, self.value = key, name, value


def decision_temperatures(metadata: Mapping[str, object], prefix: str) -> dict[str, float]:
    """Every `<prefix><kind>[.<bucket>]` value by its name after `prefix`, sorted. llama.cpp
    reads each as a string and parses it (strtof: what is not a number reads 0); a value <= 0
    fails its load: InvalidTemperature."""
    found = {}
    for key, value in metadata.items():
        if not key.startswith(prefix):
            continue
        try:
            temperature = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            temperature = 0.0
        if not temperature > 0:
            raise InvalidTemperature(key, key.removeprefix(prefix), value)
        found[key.removeprefix(prefix)] = temperature
    return dict(sorted(found.items()))
