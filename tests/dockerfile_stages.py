"""A Dockerfile read as Docker reads it: stages, each with its instructions (dockerfile-parse)."""

from __future__ import annotations

import io
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


def stages(path: Path) -> list[Stage]:
    parser = DockerfileParser(fileobj=io.BytesIO(path.read_bytes()))
    found: list[Stage] = []
    for entry in parser.structure:
        instruction, value = entry["instruction"], entry["value"]
        if instruction == "FROM":
            base, _, name = value.partition(" AS ")
            found.append(Stage(base=base.strip(), name=name.strip() or None))
        elif instruction != "COMMENT" and found:
            found[-1].instructions.append((instruction, value))
    return found
