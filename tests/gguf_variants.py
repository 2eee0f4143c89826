"""Copies of the bundled GGUF with other metadata (gguf-py's own rewriter; weights unchanged)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"
# The chat template Google ships with Gemma 3 instruction-tuned models (tokenizer_config.json).
GEMMA3_CHAT_TEMPLATE = (DATA / "gemma3_chat_template.jinja").read_text()


def with_chat_template(source: Path, directory: Path, template: str) -> Path:
    """Write `directory/model.gguf`: `source` with `tokenizer.chat_template` set to `template`."""
    directory.mkdir(parents=True, exist_ok=True)
    template_file = directory / "chat_template.jinja"
    template_file.write_text(template)
    target = directory / "model.gguf"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gguf.scripts.gguf_new_metadata",
            str(source),
            str(target),
            "--chat-template-file",
            str(template_file),
            "--force",
        ],
        check=True,
        capture_output=True,
    )
    template_file.unlink()
    return target
