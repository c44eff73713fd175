"""Real tokenizers built offline from installed packages agree with their official implementations."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from hf_chat_templates import base_tokenizer
from hf_chat_templates.tokenizer.base import O200K_SHA256, o200k_tiktoken_file

TEXTS = [
    "Hello, world! The quick brown fox.",
    "Привет, мир! Как дела? Ёжик в тумане.",
    "你好，世界。これは日本語です。한국어도 있어요.",
    "emoji 🦙🔥👩‍👩‍👧 and numbers 1234567 3.14159",
    "code: def f(x):\n    return {'a': [1, 2]}\n\n\ttabs\r\nwindows",
    "  leading and trailing spaces  \n\n\n",
]


def test_llama3_matches_llama_models(llama3_base: Path) -> None:
    from llama_models.llama3.tokenizer import Tokenizer as MetaTokenizer
    from transformers import AutoTokenizer

    meta = MetaTokenizer.get_instance()
    tok = AutoTokenizer.from_pretrained(str(llama3_base))
    assert len(tok) == 128256
    for text in [*TEXTS, "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"]:
        assert tok.encode(text, add_special_tokens=False) == meta.encode(
            text, bos=False, eos=False, allowed_special="all"
        ), text
    # Like the Hub's Llama 3 tokenizer, tokenizer(text) prepends <|begin_of_text|>.
    assert tok("hi")["input_ids"][0] == 128000
    assert tok.convert_tokens_to_ids("<|eot_id|>") == 128009


def test_llama3_without_bos() -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base_tokenizer("llama3", add_bos=False)))
    assert tok("hi")["input_ids"][0] != 128000


def test_o200k_file_is_tiktokens(o200k_base: Path) -> None:
    data = o200k_tiktoken_file().read_bytes()
    assert hashlib.sha256(data).hexdigest() == O200K_SHA256


def test_o200k_harmony_matches_openai_harmony(o200k_base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoTokenizer

    monkeypatch.setenv("TIKTOKEN_ENCODINGS_BASE", str(o200k_tiktoken_file().parent))
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    tok = AutoTokenizer.from_pretrained(str(o200k_base))
    assert len(tok) == 201088
    for text in TEXTS:
        assert tok.encode(text, add_special_tokens=False) == enc.encode(text, allowed_special=set()), text
    named = {
        "<|startoftext|>": 199998,
        "<|endoftext|>": 199999,
        "<|return|>": 200002,
        "<|constrain|>": 200003,
        "<|channel|>": 200005,
        "<|start|>": 200006,
        "<|end|>": 200007,
        "<|message|>": 200008,
        "<|call|>": 200012,
        "<|endofprompt|>": 200018,
    }
    for token, token_id in named.items():
        assert tok.encode(token, add_special_tokens=False) == [token_id]
        if token in enc.special_tokens_set:  # harmony leaves 200018 as a reserved slot
            assert enc.encode(token, allowed_special={token}) == [token_id]
    assert tok("hi")["input_ids"] == enc.encode("hi", allowed_special=set())  # no BOS, like gpt-oss


def test_sentencepiece_base_matches_sentencepiece(sp_base: Path) -> None:
    import mistral_common
    import sentencepiece
    from transformers import AutoTokenizer

    model = Path(mistral_common.__file__).parent / "data" / "mistral_instruct_tokenizer_240323.model.v3"
    sp = sentencepiece.SentencePieceProcessor(model_file=str(model))
    tok = AutoTokenizer.from_pretrained(str(sp_base))
    assert len(tok) == 32768
    # Single-spaced text: transformers' conversion and sentencepiece agree. Runs of spaces are a known
    # difference of transformers' converted SentencePiece tokenizers (see REFERENCE-TOKENIZERS).
    for text in ["Hello, world! The quick brown fox.", "Привет, мир!", "emoji 🦙 and 1234567"]:
        assert tok.encode(text, add_special_tokens=False) == sp.encode(text), text
    assert tok("hi")["input_ids"][0] == tok.bos_token_id == 1


def test_cache_is_reused() -> None:
    first = base_tokenizer("llama3")
    stamp = (first / "tokenizer.json").stat().st_mtime_ns
    assert base_tokenizer("llama3") == first
    assert (first / "tokenizer.json").stat().st_mtime_ns == stamp
