"""install on the real tokenizers: every family on its default base, and the cross-base cases users hit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_chat_templates import base_tokenizer, get_family, install

from ..helpers import snapshot

CASES = [
    ("gigachat3", "llama3"),
    ("gpt-oss", "o200k-harmony"),
    ("gemma3-tools", "mistral-v3-sp"),
    ("llama3.2-pythonic", "llama3"),
    ("gemma3-tools", "llama3"),
]


@pytest.mark.parametrize(("family", "base"), CASES, ids=[f"{f}-on-{b}" for f, b in CASES])
def test_family_on_real_base(family: str, base: str, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    src = base_tokenizer(base)
    before = snapshot(src)
    result = install(family, src, tmp_path / "out")
    assert snapshot(src) == before
    out = tmp_path / "out"
    variant = get_family(family).variant()
    tok = AutoTokenizer.from_pretrained(str(out))
    assert tok.chat_template == variant.template
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["chat_template"] == (out / "chat_template.jinja").read_text(encoding="utf-8")
    for token in variant.control_tokens:
        ids = tok.encode(token, add_special_tokens=False)
        assert len(ids) == 1, (token, ids)
        # and stays one id inside text, next to words and newlines
        assert ids[0] in tok.encode(f"word{token}\nword", add_special_tokens=False)
    gen = json.loads((out / "generation_config.json").read_text())
    for stop in variant.stop_tokens:
        assert tok.convert_tokens_to_ids(stop) in gen["eos_token_id"]
    assert tok.eos_token == variant.stop_tokens[0]
    assert tok.pad_token is not None
    assert result.plan.vocab_size_after == len(tok)


def test_llama32_stop_id_is_eot(tmp_path: Path) -> None:
    install("llama3.2-pythonic", base_tokenizer("llama3"), tmp_path / "out")
    gen = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [128001, 128009]
    assert gen["pad_token_id"] == 128004  # <|finetune_right_pad_id|>, not eos


def test_gigachat_on_llama3_grows_by_three_or_reuses_reserved(tmp_path: Path) -> None:
    grown = install("gigachat3", base_tokenizer("llama3"), tmp_path / "grown")
    assert grown.plan.vocab_size_before == 128256
    assert grown.plan.vocab_size_after == 128259
    assert [t.action for t in grown.plan.tokens] == ["added"] * 3
    assert [t.id for t in grown.plan.tokens] == [128256, 128257, 128258]

    reused = install("gigachat3", base_tokenizer("llama3"), tmp_path / "reused", reuse_reserved=True)
    assert reused.plan.vocab_size_after == 128256
    assert [t.action for t in reused.plan.tokens] == ["renamed-reserved"] * 3
    assert [t.previous for t in reused.plan.tokens] == [
        "<|reserved_special_token_0|>",
        "<|reserved_special_token_1|>",
        "<|reserved_special_token_2|>",
    ]


def test_reuse_reserved_on_sentencepiece_renames_everywhere(tmp_path: Path) -> None:
    # mistral's [control_N] slots live in the model vocabulary, the added tokens and extra_special_tokens.
    from transformers import AutoTokenizer

    result = install("gemma3-tools", base_tokenizer("mistral-v3-sp"), tmp_path / "out", reuse_reserved=True)
    assert not result.plan.vocabulary_grew
    config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    renamed = [t.previous for t in result.plan.tokens]
    assert not set(renamed) & set(config.get("extra_special_tokens", []))
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    assert len(tok) == 32768


def test_killed_install_leaves_nothing_that_loads(tmp_path: Path) -> None:
    """SIGKILL at many points of an install: the source stays intact, the output is absent or complete."""
    src = base_tokenizer("o200k-harmony")  # the largest folder, so the write takes a while
    before = snapshot(src)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    code = "import sys; from hf_chat_templates import install; install('gpt-oss', sys.argv[1], sys.argv[2])"
    killed_mid_write = 0
    # None: kill during planning; a number: kill that many seconds after the staging folder appears.
    for i, delay in enumerate([None, 0.0, 0.05, 0.3, 1.0]):
        out = tmp_path / f"out{i}"
        proc = subprocess.Popen([sys.executable, "-c", code, str(src), str(out)], env=env)
        if delay is None:
            time.sleep(0.3)
        else:
            deadline = time.monotonic() + 120
            while not any(tmp_path.glob(f".out{i}.hfct-staging-*")) and proc.poll() is None:
                assert time.monotonic() < deadline
                time.sleep(0.002)
            time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed_mid_write += delay is not None
        assert snapshot(src) == before
        if out.exists():  # published: then it is complete
            assert (out / "chat_template.jinja").read_text() == get_family("gpt-oss").variant().template
            from transformers import AutoTokenizer

            AutoTokenizer.from_pretrained(str(out))
    assert killed_mid_write >= 3, "the installs finished before they could be killed"
    # A later install cleans the stale staging folders and succeeds.
    install("gpt-oss", src, tmp_path / "out0", force=True)
    assert not list(tmp_path.glob(".out0.hfct-staging-*"))
