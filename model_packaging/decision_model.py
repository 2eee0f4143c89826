"""A trained decision GGUF's head (`<arch>.decision.*`), read for the manifest with the engine
tree's own GGUF reader (the `gguf` package), and refused before upload where the adapter would
refuse it at start-up."""

from __future__ import annotations

from pathlib import Path

from model_manifest import DecisionModel
from model_manifest.decision import SERVED_TYPES, InvalidTemperature, decision_temperatures
from model_packaging.errors import PackagingError


def read_decision_model(path: Path) -> DecisionModel | None:
    """The head the GGUF declares, None for a generic language model. PackagingError for a type
    the adapter does not serve, a temperature llama.cpp would refuse (not a number above 0), or
    a decision model without its `systemone` template."""
    # gguf (and numpy) only where a GGUF is read: --print-spec and uploads need neither.
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except (ValueError, IndexError) as error:  # a wrong magic, a truncated header
        raise PackagingError(f"{path.name}: not a readable GGUF file ({error})") from error
    values = {name: field.contents() for name, field in reader.fields.items()}
    prefix = f"{values.get('general.architecture')}.decision."
    declared = values.get(prefix + "type")
    if declared is None:
        return None
    if declared not in SERVED_TYPES:
        raise PackagingError(
            f"{path.name}: decision type {declared!r} is not served "
            f"(the adapter serves {', '.join(SERVED_TYPES)})"
        )
    if "tokenizer.chat_template.systemone" not in values:
        raise PackagingError(f'{path.name}: a decision model without its "systemone" template')
    try:
        temperatures = decision_temperatures(values, prefix + "temperature.")
    except InvalidTemperature as refused:
        raise PackagingError(
            f"{path.name}: invalid decision temperature {refused.name}={refused.value!r}"
        ) from None
    return DecisionModel(type=declared, temperatures=temperatures)
