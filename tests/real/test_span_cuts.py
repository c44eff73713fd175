"""Spans as token ranges on a real byte-level BPE vocabulary (Llama 3's): a span is every token that overlaps it,
as transformers builds `assistant_masks`, also where its last character is several tokens ("Ⅻ" is two) and
`char_to_token` gives only the first; whatever encoded the text (tokenizers, tiktoken, segments)."""

from __future__ import annotations

import json
from pathlib import Path

from hf_chat_templates import prepare
from hf_chat_templates.families.tokens import template_tokens
from hf_chat_templates.template.spans import Span, token_mask
from hf_chat_templates.template.training_variant import derive_training_template
from hf_chat_templates.training import bpe_engine
from hf_chat_templates.training.cuts import span_cuts
from hf_chat_templates.training.segments import SegmentEncoder

from ..helpers import expected_labels, model_folder, write_jsonl
from .test_segments import backend_of

# Each answer's last character, and how many tokens it is on Llama 3's vocabulary.
ENDINGS = {"Ⅻ": 2, "𝔘": 3, "🦙": 3, "😊": 2, "。": 1, "x": 1}


def _texts() -> tuple[list[str], list[tuple[Span, ...]]]:
    """Answers between control tokens, and ending the text: a span ends before a control token or at the end."""
    texts, spans = [], []
    for last in ENDINGS:
        head = "<|start_header_id|>assistant<|end_header_id|>\n\n"
        answer = f"It is {last}"
        middle = f"{head}{answer}<|eot_id|>{head}"
        texts.append(middle + answer)
        spans.append(
            (Span(1, len(head), len(head) + len(answer), None), Span(3, len(middle), len(middle) + len(answer), None))
        )
    return texts, spans


def _expected(offsets: list[tuple[int, int]], spans: tuple[Span, ...]) -> list[tuple[int, int]]:
    """Each span's tokens as transformers marks them (`token_mask`), as a range."""
    ranges = []
    for span in spans:
        marked = [t for t, m in enumerate(token_mask(offsets, (span,))) if m]
        ranges.append((marked[0], marked[-1] + 1))
    return ranges


def test_a_span_is_every_token_that_overlaps_it_whatever_encoded_it(llama3_base: Path) -> None:
    backend = backend_of(llama3_base)
    texts, spans = _texts()
    whole = backend.encode_batch(texts, add_special_tokens=False)
    for text, encoding in zip(texts, whole):
        last = text[-1]
        assert sum(1 for a, b in encoding.offsets if b > len(text) - 1) == ENDINGS[last], last
    expected = [_expected(e.offsets, s) for e, s in zip(whole, spans)]
    engine, why = bpe_engine.load(backend)
    assert engine is not None, why
    segments = SegmentEncoder(backend, sample=0)
    assert not segments.off, segments.off
    for name, encodings in (
        ("tokenizers", whole),
        ("tiktoken", engine.encode_batch(texts, specials=True)),
        ("segments", segments.encode_batch(texts)[0]),
    ):
        sizes = [len(e) for e in encodings]
        assert span_cuts(encodings, spans, sizes) == expected, name
        one_by_one = [span_cuts([e], [s], [n])[0] for e, s, n in zip(encodings, spans, sizes)]
        assert one_by_one == expected, name
        # cut short inside the last answer's last character: only the tokens kept
        short = [n - 1 for n in sizes]
        assert [c[-1] for c in span_cuts(encodings, spans, short)] == [
            (a, n) for (a, _), n in zip([e[-1] for e in expected], short)
        ], name


def test_prepare_trains_every_token_of_an_answers_last_character(llama3_base: Path, tmp_path: Path) -> None:
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    folder = model_folder("glm-4.6", llama3_base, tmp_path / "glm")  # no token ends a turn: the answer ends a span
    record = {
        "messages": [
            {"role": "user", "content": "Roman twelve?"},
            {"role": "assistant", "content": "It is Ⅻ"},
            {"role": "user", "content": "And the llama?"},
            {"role": "assistant", "content": "🦙"},
        ]
    }
    report = prepare(folder, write_jsonl(tmp_path / "c.jsonl", [json.dumps(record)]), tmp_path / "out")
    assert report.written == 1, report.describe()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    config = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    tokens = template_tokens(tokenizer, tokenizer.chat_template, generation_config=config)
    training = derive_training_template(tokenizer.chat_template, tokens.stop_tokens, tokens.control_tokens)
    labels = load_from_disk(str(tmp_path / "out"))[0]["labels"]
    assert labels == expected_labels(folder, training, record)
    trained = tokenizer.decode([t for t in labels if t >= 0])
    assert trained.endswith("It is Ⅻ\n<think></think>\n🦙"), trained
