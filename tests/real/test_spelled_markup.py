"""Content that spells a markup or control token, prepared on real vocabularies: every record is written, its ids
equal transformers' `apply_chat_template(..., tokenize=True, sanitize_control_tokens=True)` and its labels the
assistant mask transformers gives for those ids.

Markup tags (`<tool_call>`, `<think>`) are plain added tokens on these folders, as the models ship them (and as
install registers them). transformers takes a plain added token as a control token when the template that renders
the conversation writes it (the `tool_use` one when tools are given): spelled in the data it is then text, and
otherwise the token's own id (Hermes 3's default template writes no `<tool_call>`).

The mask transformers cannot give with sanitize_control_tokens, so it is made of its own parts: the conversation
marked by `mark_control_tokens`, rendered by the training variant of the template (`render_jinja_template`, the
`{% generation %}` spans), the markers taken out, and each token of the sanitized ids placed by decoding (a token
is trained when it overlaps a span, transformers' rule).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates import TemplateChoice, derive_training_template, prepare
from hf_chat_templates.training.features import IGNORE_INDEX

from ..helpers import corpus_manifest, model_folder, write_jsonl

MARKERS = ("\U000f0000", "\U000f0001")


def user_and_answer(user: str, answer: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]}


def tool_exchange(arguments: dict[str, Any], result: str, description: str) -> dict[str, Any]:
    call = {"type": "function", "function": {"name": "run", "arguments": arguments}}
    return {
        "messages": [
            {"role": "user", "content": "Run it"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": result},
            {"role": "assistant", "content": "Done: </tool_call> was printed"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "run",
                    "description": description,
                    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
                },
            }
        ],
    }


RECORDS = {
    "tag-explained": user_and_answer(
        "Explain the `<tool_call>` tag", "It wraps a call: <tool_call>{...}</tool_call> and nothing else"
    ),
    "at-the-ends": user_and_answer("<tool_call>", "</tool_call>"),
    "turn-end": user_and_answer("Say <|im_end|> please", "<|im_end|>"),
    # not at the start of the answer: prepare reads a leading <think>…</think> as reasoning (`Normalizer`)
    "think": user_and_answer("What does <think> do?", "It opens <think>reasoning</think>, closed by </think>"),
    "glued": user_and_answer("a<tool_call></tool_call><|im_end|>b", "x</tool_call>y<think>z"),
    # a token that the text on both sides of another would spell once that one is taken out, and a half token
    "split-across": user_and_answer("<tool_<|im_end|>call> and <tool_</tool_call>call>", "ends in <|im_"),
    "tool-arguments": tool_exchange(
        {"code": "print('<tool_call>')", "stop": "<|im_end|>", "think": "<think>"},
        "<tool_response>printed <tool_call></tool_response>",
        "Runs code; never write <tool_call> or <|im_end|> in it",
    ),
}


@pytest.fixture(scope="module")
def folders(llama3_base: Path, sp_base: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Corpus templates as the models ship them, on the Llama 3 vocabulary (byte-level BPE), and Qwen2.5's on a
    SentencePiece one (a normalizer and prefix spaces: what the newline before each piece is there for)."""
    root = tmp_path_factory.mktemp("spelled")
    made = {name: model_folder(name, llama3_base, root / name) for name in ("qwen2.5", "qwen3", "hermes-3", "glm-4.6")}
    made["smollm3"] = model_folder("smollm3", llama3_base, root / "smollm3")
    made["qwen2.5-sp"] = model_folder("qwen2.5", sp_base, root / "qwen2.5-sp")
    return made


def training_template(tokenizer: Any, name: str, tools: Any) -> str:
    """The training variant of the template transformers renders the conversation with."""
    manifest = corpus_manifest(name.removesuffix("-sp"))
    template = tokenizer.get_chat_template(None, tools)
    controls = [t for t in [*manifest["special_tokens"], *manifest.get("added_tokens", [])] if t in template]
    return derive_training_template(template, manifest["stop_tokens"], controls)


def transformers_reference(tokenizer: Any, name: str, record: dict[str, Any]) -> tuple[list[int], list[int]]:
    """(ids, labels) as transformers gives them: the sanitized ids, and labels where its assistant mask is set."""
    from transformers.utils.chat_template_utils import (
        _get_control_token_patterns,
        mark_control_tokens,
        render_jinja_template,
    )

    messages, tools = record["messages"], record.get("tools")
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=True, sanitize_control_tokens=True, return_dict=False
    )
    controls, _ = _get_control_token_patterns(tokenizer._get_control_tokens(tokenizer.get_chat_template(None, tools)))
    rendered, indices = render_jinja_template(
        conversations=[mark_control_tokens(messages, controls)],
        tools=mark_control_tokens(tools, controls),
        chat_template=training_template(tokenizer, name, tools),
        return_assistant_tokens_mask=True,
        **tokenizer.special_tokens_map,
    )
    # positions in the rendering without the markers, as encode_marked_chat encodes it
    before = [0]  # markers before each position
    for c in rendered[0]:
        before.append(before[-1] + (c in MARKERS))
    text = "".join(c for c in rendered[0] if c not in MARKERS)
    spans = [(a - before[a], b - before[b]) for a, b in indices[0] if b > a]
    ends = [len(tokenizer.decode(ids[:k], clean_up_tokenization_spaces=False)) for k in range(len(ids) + 1)]
    assert tokenizer.decode(ids, clean_up_tokenization_spaces=False) == text, "the ids do not spell the rendering"
    trained = [any(ends[k] < b and ends[k + 1] > a for a, b in spans) for k in range(len(ids))]
    return ids, [i if t else IGNORE_INDEX for i, t in zip(ids, trained)]


CASES = [
    ("qwen2.5", ["tag-explained", "at-the-ends", "turn-end", "glued", "split-across", "tool-arguments"]),
    ("qwen3", ["tag-explained", "at-the-ends", "turn-end", "think", "glued", "split-across", "tool-arguments"]),
    ("hermes-3", ["tag-explained", "at-the-ends", "turn-end", "glued", "split-across", "tool-arguments"]),
    ("glm-4.6", ["tag-explained", "at-the-ends", "think", "glued", "tool-arguments"]),
    ("smollm3", ["think", "turn-end", "glued"]),
    ("qwen2.5-sp", ["tag-explained", "at-the-ends", "turn-end", "glued", "split-across", "tool-arguments"]),
]


@pytest.mark.parametrize(("name", "keys"), CASES, ids=[name for name, _ in CASES])
def test_records_spelling_markup_are_written_as_transformers_encodes_them(
    name: str, keys: list[str], folders: dict[str, Path], tmp_path: Path
) -> None:
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    records = [RECORDS[key] for key in keys]
    data = write_jsonl(tmp_path / "spelled.jsonl", [json.dumps(r) for r in records])
    kwargs = corpus_manifest(name.removesuffix("-sp")).get("kwargs") or None
    report = prepare(folders[name], data, tmp_path / "out", TemplateChoice(kwargs=kwargs))
    assert (report.skipped, report.unrendered) == ([], []), f"{name}: records left out"
    assert report.written == len(records)
    rows = load_from_disk(str(tmp_path / "out"))
    tokenizer = AutoTokenizer.from_pretrained(str(folders[name]))
    for key, record, row in zip(keys, records, rows):
        ids, labels = transformers_reference(tokenizer, name, record)
        assert row["input_ids"] == ids, f"{name} {key}: {tokenizer.convert_ids_to_tokens(row['input_ids'])}"
        assert row["labels"] == labels, f"{name} {key}: the labels differ from transformers' assistant mask"
