"""tiktoken standing for a real tokenizer: proven on Llama 3's and o200k's merges and equal to `tokenizers` on ids,
offsets and `char_to_token` (a property); a merge list out of rank order or missing a split, a normalizer, a
SentencePiece model each turn it off with the reason; a difference only the data shows is caught by the sample and
the run goes on with the tokenizer's own encoder; `prepare` says which encoder ran and writes the same rows."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_chat_templates import prepare
from hf_chat_templates.training import bpe_engine
from hf_chat_templates.training.segments import SegmentEncoder, first_difference

from ..helpers import write_jsonl
from .test_segments import WORDS, backend_of, controls

EXAMPLES = int(os.environ.get("HF_CHAT_TEMPLATES_HYPOTHESIS_EXAMPLES", "40"))


@pytest.mark.parametrize("base", ["llama3_base", "o200k_base"])
def test_tiktoken_gives_the_tokenizers_ids_offsets_and_characters(base: str, request: pytest.FixtureRequest) -> None:
    backend = backend_of(request.getfixturevalue(base))
    engine, why = bpe_engine.load(backend)
    assert engine is not None, why
    assert engine.separator is not None
    sep = engine.separator[0]  # texts are joined by it into one call: spelled in the data, or a part of it
    tokens = [*controls(backend), sep, sep[:-1], sep[1:]]
    text = st.lists(st.one_of(st.sampled_from([*WORDS, *tokens]), st.text(max_size=6)), max_size=12).map("".join)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(text, min_size=1, max_size=5))
    def equal(texts: list[str]) -> None:
        encodings = engine.encode_batch(texts, specials=True)
        everywhere = [list(range(-1, len(t) + 1)) for t in texts]
        assert bpe_engine.tokens_at_batch(encodings, everywhere) == [
            e.tokens_at(c) for e, c in zip(encodings, everywhere)
        ]
        for t, fast in zip(texts, encodings):
            whole = backend.encode(t, add_special_tokens=False)
            assert first_difference(whole, fast) is None, t
            chars = list(range(-1, len(t) + 1))
            expected = [whole.char_to_token(c) if 0 <= c < len(t) else None for c in chars]
            assert fast.tokens_at(chars) == expected, t
            assert fast.tokens_at(chars[::-1] + chars) == expected[::-1] + expected, t  # any order, repeated

    equal()


def model_of(folder: Path) -> dict:
    return json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))["model"]


def test_merges_out_of_rank_order_or_missing_a_split_are_named(llama3_base: Path) -> None:
    model = model_of(llama3_base)
    assert bpe_engine.merges_reason(model) == ""
    merges = model["merges"]
    swapped = {**model, "merges": [merges[1], merges[0], *merges[2:]]}
    assert bpe_engine.merges_reason(swapped).startswith("merge ") and "merged token's id" in bpe_engine.merges_reason(
        swapped
    )
    dropped = {**model, "merges": merges[:100] + merges[101:]}
    a, b = merges[100] if isinstance(merges[100], list) else merges[100].split(" ")
    assert f"splits into {a!r} {b!r}, which the merges do not list" in bpe_engine.merges_reason(dropped)
    assert "ignore_merges" in bpe_engine.merges_reason({**model, "ignore_merges": False})


def test_a_normalizer_or_sentencepiece_keeps_the_tokenizers_own_encoder(llama3_base: Path, sp_base: Path) -> None:
    from tokenizers import normalizers

    engine, why = bpe_engine.load(backend_of(sp_base))
    assert engine is None and why, why
    backend = backend_of(llama3_base)
    backend.normalizer = normalizers.NFC()
    assert bpe_engine.load(backend) == (None, "the tokenizer has a normalizer")
    encoder = SegmentEncoder(backend)
    assert encoder.engine is None and encoder.engine_off == "the tokenizer has a normalizer"


def _read_otherwise(encoder: SegmentEncoder) -> None:
    """The encoder's tiktoken given another regex: what a regex engine that reads the pattern differently would do."""
    import tiktoken

    assert encoder.engine is not None
    engine = encoder.engine
    engine.encoding = tiktoken.Encoding(
        "other",
        pat_str=r"\S+|\s+",
        mergeable_ranks=engine.encoding._mergeable_ranks,
        special_tokens=engine.encoding._special_tokens,
    )


def test_the_sample_catches_what_the_proof_cannot_and_the_run_goes_on_with_the_tokenizer(llama3_base: Path) -> None:
    backend = backend_of(llama3_base)
    encoder = SegmentEncoder(backend, reason="few repeats")  # whole strings, through the engine
    _read_otherwise(encoder)
    texts = ["Hello world, how are you?", "fine"]
    encodings, _ = encoder.encode_batch(texts)
    assert encoder.engine is None
    assert encoder.engine_off.startswith("the fast encoding differs from the tokenizer's whole-string encoding") or (
        "text 1 of a batch, token" in encoder.engine_off
    ), encoder.engine_off
    assert encoder.engine_off.endswith("(tiktoken)")
    assert [list(e.ids) for e in encodings] == [backend.encode(t, add_special_tokens=False).ids for t in texts]


def test_prepare_says_tiktoken_ran_and_writes_what_the_tokenizers_own_encoder_writes(
    installed_variants: dict[tuple[str, str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datasets import load_from_disk

    folder = installed_variants[("llama3.2-pythonic", "corrected")]
    records = [
        {"messages": [{"role": "user", "content": f"Привет 🦙 number {k}\n\n"}, {"role": "assistant", "content": w}]}
        for k, w in enumerate(["Hi there", " leading space", "ẞ中文", "trailing\n", "🦙🦙", "x"])
    ]
    data = write_jsonl(tmp_path / "chats.jsonl", [json.dumps(r, ensure_ascii=False) for r in records])
    fast = prepare(folder, data, tmp_path / "fast")
    assert "encoder: tiktoken (proven to give the tokenizer's ids" in fast.describe(), fast.describe()
    assert fast.to_dict()["encoder"] == {"tiktoken": True, "off_reason": None}
    monkeypatch.setenv(bpe_engine.SWITCH, "0")
    own = prepare(folder, data, tmp_path / "own")
    assert f"encoder: the tokenizer's own (not tiktoken: turned off ({bpe_engine.SWITCH}=0))" in own.describe()
    assert own.to_dict()["encoder"]["tiktoken"] is False
    assert load_from_disk(str(tmp_path / "fast")).to_dict() == load_from_disk(str(tmp_path / "own")).to_dict()


def test_a_batch_encoded_again_without_tiktoken_is_judged_once(llama3_base: Path) -> None:
    """The sample turns tiktoken off and the batch is encoded again: the segment cache's judgement counts its
    tokens once, and a verdict reached on the discarded pass does not stay."""
    backend = backend_of(llama3_base)
    encoder = SegmentEncoder(backend)  # segments on, judged on the first tokens
    assert not encoder.off
    _read_otherwise(encoder)
    texts = ["<|start_header_id|>user<|end_header_id|>\n\nHello world, how are you?<|eot_id|>", "fine, thanks"]
    encodings, stats = encoder.encode_batch(texts)
    assert encoder.engine is None and encoder.engine_off.endswith("(tiktoken)")
    assert encoder._judged_on.tokens == stats.tokens == sum(len(e) for e in encodings) - 3  # 3 control tokens


def test_the_ranks_are_kept_and_read_again_and_a_damaged_record_is_made_again(
    llama3_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ..helpers import spy

    monkeypatch.setenv("HF_CHAT_TEMPLATES_CACHE", str(tmp_path / "cache"))
    backend, source = backend_of(llama3_base), llama3_base / "tokenizer.json"
    text = "Hello <|eot_id|> wörld  42\n"
    expected = backend.encode(text, add_special_tokens=False).ids
    made = spy(monkeypatch, bpe_engine, "byte_decoder")  # the ranks are made from the vocabulary with it
    first, _ = bpe_engine.load(backend, source)
    (record,) = (tmp_path / "cache" / "bpe-proofs").glob("*.ranks")
    calls = len(made)
    again, _ = bpe_engine.load(backend, source)
    assert len(made) == calls  # read, not made
    for engine in (first, again):
        assert engine is not None and engine.encode_batch([text], specials=True)[0].ids.tolist() == expected
    import marshal

    from hf_chat_templates.tokenizer.cache_folder import keep, read_kept

    ranks = marshal.loads(read_kept(record) or b"")
    swapped = {**ranks, b"Hello": ranks[b" the"], b" the": ranks[b"Hello"]}
    for damage in (
        lambda: keep(record, marshal.dumps({b"a": 1})),  # one token where the model has 128,000
        lambda: record.write_bytes(record.read_bytes()[:32] + marshal.dumps(swapped)),  # not what was written
    ):
        damage()
        calls = len(made)
        mended, _ = bpe_engine.load(backend, source)
        assert mended is not None and mended.encode_batch([text], specials=True)[0].ids.tolist() == expected
        assert len(made) > calls and marshal.loads(read_kept(record) or b"") == ranks


def test_texts_joined_into_one_call_are_cut_back_into_each_texts_tokens(
    llama3_base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is encoded in one call per thread, its texts joined by a reserved token; each text gets the tokens
    it gets alone, with added tokens split out or kept as text, and a batch whose data spells the joining token
    itself is encoded text by text."""
    backend = backend_of(llama3_base)
    engine, why = bpe_engine.load(backend)
    assert engine is not None, why
    sep, sep_id = engine.separator or ("", -1)
    assert (sep, sep_id) == ("<|reserved_special_token_245|>", 128255)
    texts = ["", "a<|eot", "<|eot_id|>", "<|begin_of_text|>hello", sep[:-1], "end<|", "Привет 🦙", " ", "x<|"]
    alone = {specials: [engine._encode_one(t, specials) for t in texts] for specials in (True, False)}
    assert [list(e.ids) for e in alone[True]] == [backend.encode(t, add_special_tokens=False).ids for t in texts]
    assert list(alone[False][2].ids) != [128009]  # <|eot_id|> as text

    def one_by_one(text: str, specials: bool) -> bpe_engine.ByteEncoding:
        raise AssertionError("encoded alone")

    with monkeypatch.context() as patch:
        patch.setattr(engine, "_encode_one", one_by_one)
        for specials in (True, False):
            joined = engine._encode_joined(texts, specials)
            assert [list(e.ids) for e in joined] == [list(e.ids) for e in alone[specials]]
            assert [e.text for e in joined] == texts
    spelled = [*texts, f"data that spells {sep} itself", sep]
    for specials in (True, False):
        expected = [list(engine._encode_one(t, specials).ids) for t in spelled]
        alone_now: list[str] = []

        def counted(text: str, sp: bool, seen: list[str] = alone_now, one=engine._encode_one):  # type: ignore[no-untyped-def]
            seen.append(text)
            return one(text, sp)

        with monkeypatch.context() as patch:
            patch.setattr(engine, "_encode_one", counted)
            assert [list(e.ids) for e in engine._encode_joined(spelled, specials)] == expected
        assert alone_now == spelled[-2:]  # only the texts that spell it


def test_the_joining_token_is_one_no_token_can_match_across() -> None:
    """The highest-id added token whose first character is inside no added token, that no other added token
    begins with or is a prefix of, and that BPE never makes; None when no added token is such."""
    separator = bpe_engine.separator
    assert separator({"<|a|>": 10, "<|b|>": 11}, {}) == ("<|b|>", 11)
    # '<' inside x<y: x<y could match across the end of a text into <|b|>; nothing holds 'x' but at its start
    assert separator({"<|a|>": 10, "<|b|>": 11, "x<y": 9}, {}) == ("x<y", 9)
    assert separator({"<|a|>": 10, "a<|": 11}, {}) is None
    assert separator({"<|a|>": 10, "<|a|>b": 11}, {}) is None  # one begins with the other
    assert separator({"<|a|>": 10, "<|a": 11}, {}) is None  # a prefix would match first
    assert separator({"<|endoftext|>": 5}, {b"x": 5}) is None  # BPE makes the id too
    assert separator({"<|a|>": 10, "<|b|>": 11}, {b"x": 11}) == ("<|a|>", 10)
    # a reserved token before one a template writes (an install's newest token may be its tool-call tag)
    tokens = {"<|reserved_special_token_0|>": 10, "<|reserved_special_token_1|>": 11, "<|function_call|>": 12}
    assert separator(tokens, {}) == ("<|reserved_special_token_1|>", 11)
