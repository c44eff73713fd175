"""Token parity with llama.cpp: skipped with a note when llama-cpp-python is absent, and a mismatch named by probe,
position and both tokens (llama.cpp stood in for by the GGUF's own tokenizer, with one id changed)."""

from __future__ import annotations

import builtins
from typing import Any

import pytest

from hf_chat_templates.conversations.suite import build_probes
from hf_chat_templates.gguf import read_gguf
from hf_chat_templates.gguf.exporting import export_vocab_gguf
from hf_chat_templates.gguf.loading import load_gguf_tokenizer
from hf_chat_templates.gguf.parity import first_difference, llama_cpp_parity
from tests.helpers import chatml_folder


class Vocabulary:
    """llama-cpp-python's `Llama.tokenize` signature over a transformers tokenizer; `swap` replaces one id. As in
    llama.cpp, `add_bos=True` adds BOS only when the vocabulary says so (`adds_bos`)."""

    def __init__(self, tokenizer: Any, swap: tuple[int, int] | None = None, adds_bos: bool = False) -> None:
        self.tokenizer, self.swap, self.adds_bos = tokenizer, swap, adds_bos

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        ids = self.tokenizer.encode(text.decode("utf-8"), add_special_tokens=False)
        ids = ([self.tokenizer.bos_token_id] if add_bos and self.adds_bos else []) + ids
        return [self.swap[1] if self.swap and i == self.swap[0] else i for i in ids]


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    root = tmp_path_factory.mktemp("parity")
    gguf = read_gguf(export_vocab_gguf(chatml_folder(root / "tok"), root / "toy.gguf", pre="gpt-2"))
    return gguf, load_gguf_tokenizer(gguf)


def test_without_llama_cpp_it_is_skipped_with_the_extra_named(toy: tuple[Any, Any], monkeypatch) -> None:  # type: ignore[no-untyped-def]
    real_import = builtins.__import__

    def no_llama_cpp(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "llama_cpp":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_llama_cpp)
    result = llama_cpp_parity(*toy, build_probes())
    assert not result.ran and result.ok
    assert "hf-chat-templates[llama-cpp]" in result.note and result.describe().startswith(
        "llama.cpp token parity: skipped"
    )


def test_the_same_ids_pass(toy: tuple[Any, Any]) -> None:
    gguf, tokenizer = toy
    result = llama_cpp_parity(gguf, tokenizer, build_probes(), llama=Vocabulary(tokenizer))
    assert result.ran and result.ok and result.compared > 30, result.describe()


def test_a_different_id_is_named_with_probe_position_and_tokens(toy: tuple[Any, Any]) -> None:
    gguf, tokenizer = toy
    stop = gguf.eot_token_id
    result = llama_cpp_parity(gguf, tokenizer, build_probes(), llama=Vocabulary(tokenizer, swap=(stop, 3)))
    assert not result.ok
    first = result.mismatches[0]
    assert "llama.cpp's id at position" in first and "'<|reserved_special_token_0|>'" in first
    assert f"apply_chat_template's {stop} ('<|im_end|>')" in first


def test_a_bos_llama_cpp_adds_is_a_mismatch(toy: tuple[Any, Any]) -> None:
    from dataclasses import replace

    gguf, tokenizer = toy
    result = llama_cpp_parity(
        replace(gguf, add_bos_token=True), tokenizer, build_probes()[:1], llama=Vocabulary(tokenizer, adds_bos=True)
    )
    assert not result.ok and "position 0" in result.mismatches[0]


def test_first_difference() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
