"""Segment encoding: the text between control tokens encoded alone, repeated segments from a cache, equals
whole-string encoding (a property), is proven on a run's first records, and is turned off, with the reason said,
where a tokenizer makes segments differ."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_chat_templates import TrainingFeatures, derive_training_template, prepare
from hf_chat_templates.training.segments import SegmentCache, SegmentEncoder, first_difference

from ..helpers import CONTROL, CONVERSATIONS, GOOD, chatml_folder, expected_labels, write_jsonl

EXAMPLES = int(os.environ.get("HF_CHAT_TEMPLATES_HYPOTHESIS_EXAMPLES", "40"))
SYSTEM = "You are a careful agent. Answer the question, then stop. " * 20
TEXT = st.lists(st.sampled_from([*"ab Пр你🦙\n\t.<|>_", " the", "  ", "im_end", "<|im"]), max_size=12).map("".join)


def backend_of(folder: Path):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def metaspace_folder(root: Path) -> Path:
    """The ChatML baseline with SentencePiece's pre-tokenizer: '▁' written before the start of the text only."""
    folder = chatml_folder(root)
    tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    tj["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    (folder / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    return folder


def assert_same(whole, pieces) -> None:  # type: ignore[no-untyped-def]
    assert first_difference(whole, pieces) is None
    assert [int(i) for i in pieces.ids] == whole.ids and pieces.offsets == whole.offsets
    for char in range(max((b for _, b in whole.offsets), default=0) + 1):
        assert pieces.char_to_token(char) == whole.char_to_token(char), char


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(TEXT, st.sampled_from([*CONTROL, "</s>", ""])), min_size=1, max_size=6))
def test_segments_equal_whole_string_encoding(good: Path, parts: list[tuple[str, str]]) -> None:
    backend = backend_of(good)
    encoder = SegmentEncoder(backend, sample=0)
    texts = ["".join(a + b for a, b in parts)] * 2  # twice: the second from the cache
    encodings, stats = encoder.encode_batch(texts)
    assert not encoder.off
    for text, pieces in zip(texts, encodings):
        assert_same(backend.encode(text, add_special_tokens=False), pieces)
    assert stats.hits >= stats.lookups // 2


def test_repeated_segments_come_from_the_cache_and_the_cache_stays_within_its_bytes(good: Path) -> None:
    backend = backend_of(good)
    texts = [f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nquestion {k}<|im_end|>\n" for k in range(50)]
    encoder = SegmentEncoder(backend)
    first, stats = encoder.encode_batch(texts)
    assert not encoder.off, encoder.off
    # four pieces a record: the system turn, "\n" twice, the question; each distinct one is encoded once
    assert stats.lookups == 200 and stats.hits == 200 - 50 - 2
    assert stats.cached_tokens / stats.tokens > 0.8
    _, again = encoder.encode_batch(texts[:1])
    assert again.hits == 3  # the system turn and "\n" were kept; a question seen once was not, until seen again
    assert encoder.encode_batch(texts[:1])[1].hits == 4
    for text, pieces in zip(texts, first):
        assert_same(backend.encode(text, add_special_tokens=False), pieces)

    cache = SegmentCache(max_bytes=4000)
    for k in range(40):
        cache.put(f"segment {k}", backend.encode(f"segment {k}"), first[0].ids[:5])
        assert cache.bytes <= 4000
    assert 0 < len(cache) < 40 and cache.get("segment 0") is None and cache.get("segment 39") is not None


def test_a_tokenizer_whose_segments_differ_is_encoded_whole_and_says_why(tmp_path: Path) -> None:
    backend = backend_of(metaspace_folder(tmp_path / "tok"))
    encoder = SegmentEncoder(backend)
    assert "Metaspace, prepend_scheme first" in encoder.off and "differently alone" in encoder.off
    texts = ["<|im_start|>user\nhello there<|im_end|>\n"]
    encodings, stats = encoder.encode_batch(texts)
    assert encodings[0].ids == backend.encode(texts[0], add_special_tokens=False).ids and stats.lookups == 0


def test_the_sample_finds_a_difference_the_components_do_not_show(tmp_path: Path) -> None:
    backend = backend_of(metaspace_folder(tmp_path / "tok"))
    encoder = SegmentEncoder(backend, reason="")  # as if the components had not shown it: the sample must
    texts = ["<|im_start|>user\nhi<|im_end|>\n", "<|im_start|>user\nhello there<|im_end|>\n"]
    encodings, stats = encoder.encode_batch(texts)
    assert encoder.off.startswith("the fast encoding differs from the tokenizer's whole-string encoding")
    # this vocabulary has no '▁': it is dropped, and its character moves the offsets of the token after it
    assert "(text 1 of a batch, token 1: 'user' at characters (12, 16) whole, 'user' at characters (12, 13)" in (
        encoder.off
    )
    assert [e.ids for e in encodings] == [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
    assert stats.lookups == 0 and encoder.encode_batch(texts)[1].lookups == 0  # off for the rest of the run


def test_prepare_reports_the_segment_cache_and_its_labels_equal_transformers_masks(good: Path, tmp_path: Path) -> None:
    from datasets import load_from_disk

    records = [
        {**c, "messages": [{"role": "system", "content": SYSTEM}, *c["messages"][-2:]]} for c in CONVERSATIONS
    ] * 4
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(r) for r in records])
    report = prepare(good, data, tmp_path / "out")
    assert report.written == 12 and not report.segments_off
    line = next(x for x in report.describe().splitlines() if "segment cache" in x)
    assert line.startswith("  segment cache: on (hit rate ") and "of tokens from the cache)" in line
    as_json = report.to_dict()["segment_cache"]
    assert as_json["on"] and as_json["hit_rate"] > 0.5 and as_json["cached_token_share"] > 0.5
    training = derive_training_template(GOOD, ["<|im_end|>"], CONTROL)
    for row, record in zip(load_from_disk(str(tmp_path / "out")), records):
        assert row["labels"] == expected_labels(good, training, record)


def test_prepare_on_a_tokenizer_whose_segments_differ_says_off_and_why(tmp_path: Path) -> None:
    folder = metaspace_folder(tmp_path / "tok")
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(c) for c in CONVERSATIONS])
    report = prepare(folder, data, tmp_path / "out")
    assert report.written == 3
    assert "  segment cache: off: the pre-tokenizer (Metaspace, prepend_scheme first)" in report.describe()
    assert report.to_dict()["segment_cache"]["off_reason"].startswith("the pre-tokenizer (Metaspace")
    features = TrainingFeatures(folder)
    offsets, ids, _, _ = features.encoded(CONVERSATIONS)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    first = tok.apply_chat_template(CONVERSATIONS[0]["messages"], tokenize=True, return_dict=True)["input_ids"]
    assert ids[offsets[0] : offsets[1]].tolist() == list(first)


@pytest.mark.parametrize("flag", ["lstrip", "rstrip"])
def test_an_added_token_that_strips_whitespace_stays_inside_its_segment(good: Path, tmp_path: Path, flag: str) -> None:
    from tokenizers import AddedToken

    backend = backend_of(good)
    backend.add_special_tokens([AddedToken("<|sep|>", **{flag: True})])
    encoder = SegmentEncoder(backend, sample=0)
    text = "<|im_start|>user\nhello  <|sep|>  there<|im_end|>\n<|sep|> x"
    (pieces,), _ = encoder.encode_batch([text])
    assert_same(backend.encode(text, add_special_tokens=False), pieces)


def test_the_memoized_tojson_writes_what_transformers_writes_and_leaves_its_environment_alone() -> None:
    from hf_chat_templates import _compat
    from hf_chat_templates.training.loading import compile_template

    source = "{% for t in tools %}{{ t | tojson(indent=4) }}|{{ t | tojson }}|{% endfor %}{{ 1.5 | tojson(indent=2) }}"
    tools = [{"type": "function", "function": {"name": n, "parameters": {"a": [1, True, None]}}} for n in "xyx"]
    shared = _compat.compile_template(source)
    ours = compile_template(source)
    for _ in range(2):  # the second time from the memo
        assert ours.render(tools=tools) == shared.render(tools=tools)
    assert shared.environment.filters["tojson"] is not ours.environment.filters["tojson"]
    assert _compat.compile_template(source).environment.filters["tojson"] is shared.environment.filters["tojson"]
    with pytest.raises(TypeError, match=r"^Object of type set is not JSON serializable$"):  # as transformers' filter
        ours.render(tools=[{1, 2}])


def test_segments_are_turned_off_when_few_tokens_come_from_the_cache(
    good: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hf_chat_templates.training import segments

    monkeypatch.setattr(segments, "JUDGE_TOKENS", 200)
    backend = backend_of(good)
    repeated = SegmentEncoder(backend, sample=0)
    for n in range(4):  # a long system prompt on every record: most tokens from the cache
        repeated.encode_batch([f"<|im_start|>system\n{SYSTEM}<|im_end|><|im_start|>user\nq{n}<|im_end|>"] * 2)
    assert not repeated.off
    distinct = SegmentEncoder(backend, sample=0)
    for n in range(40):  # nothing repeats: whole strings are cheaper
        distinct.encode_batch([f"<|im_start|>user\nquestion number {n} {'x' * n}<|im_end|>"])
    assert distinct.off.startswith("few repeated segments (0% of the first ")
    whole = distinct.encode_batch(["<|im_start|>user\nhi<|im_end|>"])[0][0]
    assert_same(backend.encode("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False), whole)


def test_the_cache_is_judged_within_a_batch_and_the_rest_of_it_encoded_whole(
    good: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hf_chat_templates.training import segments

    monkeypatch.setattr(segments, "JUDGE_TOKENS", 200)
    monkeypatch.setattr(segments, "JUDGE_CHUNK", 4)
    backend = backend_of(good)
    texts = [f"<|im_start|>user\nquestion number {n} {'x' * n}<|im_end|>" for n in range(200)]
    encoder = SegmentEncoder(backend, sample=0)
    encodings, stats = encoder.encode_batch(texts)
    assert encoder.off.startswith("few repeated segments")
    seen = int(encoder.off.split("of the first ")[1].split(" ")[0].replace(",", ""))
    assert 200 <= seen < 400 and stats.tokens == seen  # a few chunks by segments, not the whole batch
    for text, encoding in zip(texts, encodings):
        assert_same(backend.encode(text, add_special_tokens=False), encoding)


def test_prepare_on_a_tokenizer_json_checked_before_does_not_parse_it(
    good: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The segment encoder takes the vocabulary from the tokenizer when tokenizer.json was not parsed in this run."""
    from hf_chat_templates.tokenizer import folder as module

    from ..helpers import spy

    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(c) for c in CONVERSATIONS])
    first = prepare(good, data, tmp_path / "first")
    checked = spy(monkeypatch, module, "_checked_tokenizer_json")
    again = prepare(good, data, tmp_path / "again")
    assert checked == [] and again.written == first.written == 3
    from datasets import load_from_disk

    assert load_from_disk(str(tmp_path / "again"))[:] == load_from_disk(str(tmp_path / "first"))[:]
