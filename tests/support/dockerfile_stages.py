"""A Dockerfile read as Docker reads it (dockerfile-parse): its instructions, its stages, what it
copies from the build context and which build args it declares. The one Dockerfile reader of
the tests and of the Docker stand-in."""

from __future__ import annotations

import io
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from dockerfile_parse import DockerfileParser


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def values(self, instruction: str) -> list[str]:
        return [value for name, value in self.instructions if name == instruction]

    def args(self) -> dict[str, str | None]:
        """ARG name -> default (None without one)."""
        declared: dict[str, str | None] = {}
        for value in self.values("ARG"):
            name, equals, default = value.partition("=")
            declared[name] = shlex.split(default)[0] if equals and default else None
        return declared

    def env(self) -> dict[str, str]:
        """What this stage's ENV instructions set (KEY=value form), later ones winning."""
        set_here: dict[str, str] = {}
        for value in self.values("ENV"):
            for word in shlex.split(value):
                key, _, assigned = word.partition("=")
                set_here[key] = assigned
        return set_here


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    return [
        (entry["instruction"], entry["value"])
        for entry in parser.structure
        if entry["instruction"] != "COMMENT"
    ]


def stages(path: Path) -> list[Stage]:
    found: list[Stage] = []
    for instruction, value in instructions(path.read_text()):
        if instruction == "FROM":
            base, _, name = value.partition(" AS ")
            found.append(Stage(base=base.strip(), name=name.strip() or None))
        elif found:
            found[-1].instructions.append((instruction, value))
    return found


def context_copies(found: list[tuple[str, str]]) -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY/ADD among `found` instructions that reads the build
    context (not `--from` another stage or image)."""
    copies = []
    for instruction, arguments in found:
        if instruction not in ("COPY", "ADD"):
            continue
        if arguments.startswith("["):
            parts = json.loads(arguments)
            flags = []
        else:
            tokens = shlex.split(arguments)
            flags = [t for t in tokens if t.startswith("--")]
            parts = [t for t in tokens if not t.startswith("--")]
        if not any(flag.startswith("--from") for flag in flags):
            copies.append((parts[:-1], parts[-1]))  # the last one is the destination
    return copies


def context_sources(text: str) -> list[str]:
    """COPY/ADD sources read from the build context, in every stage (never `--from` ones)."""
    return [source for sources, _ in context_copies(instructions(text)) for source in sources]


def build_args(text: str) -> dict[str, str | None]:
    """ARG names, before and in every stage, with their defaults (None when none is given)."""
    declared: dict[str, str | None] = {}
    for instruction, arguments in instructions(text):
        if instruction == "ARG":
            name, has_default, default = arguments.partition("=")
            declared.setdefault(name, default.strip('"') if has_default else None)
    return declared
