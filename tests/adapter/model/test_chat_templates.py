"""A GGUF with a chat template: the real model with Gemma 3's own template, and broken ones."""

from __future__ import annotations

import httpx
import pytest

from launcher import run_adapter_until_exit, running_adapter
from tests.support import bodies
from tests.support.gguf_variants import GEMMA3_CHAT_TEMPLATE, with_chat_template


def _one_line(finished) -> str:
    assert "Traceback" not in finished.stderr
    lines = [line for line in finished.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, finished.stderr
    return lines[0]


@pytest.fixture(scope="module")
def templated_adapter(tmp_path_factory, gemma_gguf):
    directory = tmp_path_factory.mktemp("gemma3-template")
    with_chat_template(gemma_gguf, directory / "model", GEMMA3_CHAT_TEMPLATE)
    with running_adapter(directory, DECISION_MODEL_DIR=str(directory / "model")) as adapter:
        yield adapter


def test_the_template_renders_decisions_and_chats(templated_adapter):
    assert (
        httpx.get(templated_adapter.url + "/v1/models")
        .json()["models"][0]["description"]
        .endswith("(chat-template prompt), served by llama.cpp")
    )
    decision = bodies.decision("The VPN drops.", "Which team?", ("network", "desktop"))
    assert (
        httpx.post(templated_adapter.url + "/invocations", json=decision, timeout=60).status_code
        == 200
    )
    chat = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Name a colour."},
        ],
        "max_tokens": 4,
    }
    assert (
        httpx.post(
            templated_adapter.url + "/v1/chat/completions", json=chat, timeout=60
        ).status_code
        == 200
    )


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],  # not alternating
        [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Hi"}],
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "tool", "content": "42"},
        ],
        [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    ],
    ids=["user-user", "assistant-first", "tool", "developer"],
)
@pytest.mark.parametrize("path", ["/invocations", "/v1/chat/completions"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_conversation_the_template_refuses_is_a_422_naming_messages(
    templated_adapter, messages, path, stream
):
    response = httpx.post(
        templated_adapter.url + path,
        timeout=60,
        json={"messages": messages, "max_tokens": 4, "stream": stream},
    )
    assert response.status_code == 422, response.text
    error = response.json()
    assert error["field"] == "messages" and error["error_type"] == "validation_error"
    assert "chat template" in error["error"]
    if messages[0]["role"] == "user" and messages[1]["role"] == "user":
        assert "Conversation roles must alternate" in error["error"]


def test_a_template_that_drops_the_content_is_refused_at_start_up(tmp_path, gemma_gguf):
    drops_content = (
        "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n<end_of_turn>\n"
        "{% endfor %}<start_of_turn>model\n"
    )
    with_chat_template(gemma_gguf, tmp_path, drops_content)
    finished = run_adapter_until_exit({"DECISION_MODEL_DIR": str(tmp_path)}, timeout=90)
    assert finished.returncode == 1
    line = _one_line(finished)
    assert "chat template cannot render a decision" in line and "dropped" in line
