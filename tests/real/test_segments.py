"""Segment encoding on the real tokenizers: equal to whole-string encoding on Llama 3 and o200k (a property), off
with its reason on SentencePiece's Metaspace, and `prepare` with the cache on gives the ids of
`apply_chat_template` and the labels of transformers' assistant masks on agent data that repeats a long system
prompt and its tools on every record."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_chat_templates import install, prepare
from hf_chat_templates.training.features import IGNORE_INDEX
from hf_chat_templates.training.segments import SegmentEncoder, first_difference

from ..helpers import write_jsonl

EXAMPLES = int(os.environ.get("HF_CHAT_TEMPLATES_HYPOTHESIS_EXAMPLES", "40"))
WORDS = [" the", "  ", "\n", "\n\n", "Hello", " мир", "你好", "🦙", "'s", "123", "<|", "|>", "\t", "_id", "assistant"]
SYSTEM = "You are an agent for a travel desk. Use the tools, then answer in one sentence. " * 30
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{k}",
            "description": f"Tool number {k}: looks up what its arguments name.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    for k in range(8)
]


def backend_of(folder: Path):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def controls(backend) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(t.content for t in backend.get_added_tokens_decoder().values() if t.special)[:40]


@pytest.mark.parametrize("base", ["llama3_base", "o200k_base"])
def test_segments_equal_whole_string_encoding_on_real_tokenizers(base: str, request: pytest.FixtureRequest) -> None:
    backend = backend_of(request.getfixturevalue(base))
    tokens = controls(backend)
    piece = st.lists(st.sampled_from(WORDS), max_size=8).map("".join)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.tuples(piece, st.sampled_from([*tokens, ""])), min_size=1, max_size=8))
    def equal(parts: list[tuple[str, str]]) -> None:
        encoder = SegmentEncoder(backend, sample=0)
        assert not encoder.off, encoder.off
        texts = ["".join(a + b for a, b in parts)] * 2
        for text, pieces in zip(texts, encoder.encode_batch(texts)[0]):
            whole = backend.encode(text, add_special_tokens=False)
            assert first_difference(whole, pieces) is None, text
            for char in range(len(text)):
                assert pieces.char_to_token(char) == whole.char_to_token(char), (text, char)

    equal()


def test_sentencepiece_metaspace_is_encoded_whole_and_the_sample_would_catch_it(sp_base: Path) -> None:
    backend = backend_of(sp_base)
    encoder = SegmentEncoder(backend)
    assert encoder.off.startswith("the pre-tokenizer (Metaspace, prepend_scheme first)")
    forced = SegmentEncoder(backend, reason="")
    text = "<s>[INST]Hello there[/INST]Hi</s>"  # text right after a control token: no '▁' in the whole string
    (encoding,), stats = forced.encode_batch([text])
    assert "text 1 of a batch, token 2: 'Hello' at characters (9, 14) whole, '▁Hello' at" in forced.off, forced.off
    assert encoding.ids == backend.encode(text, add_special_tokens=False).ids and stats.lookups == 0


def agent_record(k: int) -> dict:
    return {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Weather in city number {k}?"},
            {
                "role": "assistant",
                "tool_calls": [{"type": "function", "function": {"name": "tool_3", "arguments": {"city": f"C{k}"}}}],
            },
            {"role": "tool", "content": f"sunny, {k} degrees"},
            {"role": "assistant", "content": f"It is sunny and {k} degrees."},
        ],
        "tools": TOOLS,
    }


@pytest.mark.parametrize("family", ["llama3.2-pythonic", "gpt-oss", "gemma3-tools"])
def test_prepare_with_the_cache_gives_apply_chat_template_ids_and_transformers_masks(
    family: str, installed_variants: dict[tuple[str, str], Path], tmp_path: Path
) -> None:
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    folder = tmp_path / "train"
    install(family, installed_variants[(family, "corrected")], folder, training=True)
    records = [agent_record(k) for k in range(12)]
    data = write_jsonl(tmp_path / "agent.jsonl", [json.dumps(r) for r in records])
    report = prepare(folder, data, tmp_path / "out")
    assert report.written == 12, report.describe()
    cache = report.to_dict()["segment_cache"]
    if family == "gemma3-tools":  # its base is SentencePiece with Metaspace "first"
        assert "Metaspace" in cache["off_reason"] and "segment cache: off: " in report.describe()
    else:
        assert cache["on"] and cache["cached_token_share"] > 0.8, report.describe()
    tok = AutoTokenizer.from_pretrained(str(folder))
    for row, record in zip(load_from_disk(str(tmp_path / "out")), records):
        ids = tok.apply_chat_template(record["messages"], tools=TOOLS, tokenize=True, return_dict=True)["input_ids"]
        assert row["input_ids"] == list(ids)
        masked = tok.apply_chat_template(
            record["messages"],
            tools=TOOLS,
            chat_template="training",
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        expected = [i if m else IGNORE_INDEX for i, m in zip(masked["input_ids"], masked["assistant_masks"])]
        assert row["labels"] == expected
