"""The adapter's user-text tokenizer on each family's real vocabulary, against llama.cpp's own
answers: the test texts llama.cpp ships beside each `models/ggml-vocab-*.gguf` (`.inp`) and
the ids llama.cpp's tokenizer test expects for them (`.out`)."""

from __future__ import annotations

import llama_cpp
import pytest
from decision_adapter.model.engine import silence_llama_logs, tokenize_bytes, user_text_tokenizer

from tests.support.model_matrix import vocabulary_file

# Every vocabulary of the model matrix and the other families users bring; whether each is cut
# at its user-defined tokens or tokenized whole (cuttable() says), as llama.cpp reads it.
VOCABULARIES = {
    "qwen35": "cut",
    "qwen2": "cut",
    "llama-bpe": "cut",
    "llama-spm": "cut",
    "phi-3": "cut",
    "gemma-4": "cut",
    "gpt-2": "cut",
}
SEPARATOR = "\n__ggml_vocab_test__\n"


def _cases(name: str) -> list[tuple[str, list[int]]]:
    path = vocabulary_file(name)
    texts = path.with_name(path.name + ".inp").read_text().split(SEPARATOR)
    if texts[-1] == "":
        texts.pop()
    ids = path.with_name(path.name + ".out").read_text().splitlines()
    assert len(texts) == len(ids) > 20
    return [(text, [int(i) for i in line.split()]) for text, line in zip(texts, ids, strict=False)]


@pytest.fixture(scope="module", params=sorted(VOCABULARIES))
def vocabulary(request):
    silence_llama_logs()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(
        str(vocabulary_file(request.param)).encode(), params
    )
    assert model, request.param
    yield request.param, llama_cpp.llama_model_get_vocab(model)
    llama_cpp.llama_model_free(model)


def test_user_text_gets_llama_cpps_ids_for_every_test_text(vocabulary):
    name, vocab = vocabulary
    tokenizer = user_text_tokenizer(vocab)
    mode = "whole" if tokenizer._specials is None else "cut"
    print(f"{name}: {mode}, {len(tokenizer._specials or ())} user-defined tokens")
    assert mode == VOCABULARIES[name]
    for text, expected in _cases(name):
        assert tokenize_bytes(vocab, text.encode()) == expected, text  # llama.cpp agrees
        assert tokenizer.tokenize(text) == expected, text
        # The same text between user-defined tokens and runs of them, as a state holds it.
        long = f"{text}\n\n  {text}\t{text} </s> <|im_end|> {text}"
        assert tokenizer.tokenize(long) == tokenize_bytes(vocab, long.encode()), text
