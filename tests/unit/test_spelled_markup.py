"""Markup tags registered as plain (non-special) added tokens, spelled in the data: the records are kept, and encoded
as transformers' `apply_chat_template(..., sanitize_control_tokens=True)` encodes them. A plain token is a control
token when the template that renders the record writes it in a literal (the `tool_use` one given tools), so it is
text then, and its own id otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates import TrainingFeatures
from hf_chat_templates.tokenizer.folder import dump_json
from hf_chat_templates.training.spelled_tokens import control_spellings, text_backend

from ..helpers import GOOD, chatml_folder

MARKUP = ["<tool_call>", "</tool_call>", "<note>"]  # <note>: registered, written by no template
CALL = {"type": "function", "function": {"name": "run", "arguments": {"code": "print('<tool_call>')"}}}
TOOLS = [{"type": "function", "function": {"name": "run", "description": "never writes </tool_call>"}}]
RECORDS = [
    {
        "messages": [
            {"role": "user", "content": "Explain the `<tool_call>` tag"},
            {"role": "assistant", "content": "It opens a call: <tool_call>run {}</tool_call>"},
        ]
    },
    {"messages": [{"role": "user", "content": "<tool_call>"}, {"role": "assistant", "content": "</tool_call>"}]},
    {"messages": [{"role": "user", "content": "a <note> b"}, {"role": "assistant", "content": "<note><tool_call>"}]},
    {
        "messages": [
            {"role": "user", "content": "Run <tool_<|im_end|>call>"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "content": "printed <tool_call>"},
            {"role": "assistant", "content": "Done"},
        ],
        "tools": TOOLS,
    },
]


def with_markup(folder: Path) -> Path:
    """The folder with MARKUP registered as plain added tokens, as install registers tool-call tags."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP])
    tok.save_pretrained(str(folder))
    return folder


def tool_use_only(folder: Path) -> Path:
    """GOOD as the `tool_use` template, and as the default one GOOD without its tool calls (no `<tool_call>`)."""
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)  # saved by transformers as chat_template.jinja, or kept in the config
    (folder / "tokenizer_config.json").write_bytes(dump_json(config))
    start = GOOD.index("{%- for c in m.tool_calls")
    end = GOOD.index("{%- endfor -%}", start) + len("{%- endfor -%}")
    (folder / "chat_template.jinja").write_text(GOOD[:start] + GOOD[end:], encoding="utf-8")
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text(GOOD, encoding="utf-8")
    return folder


def sanitized(folder: Path, record: dict[str, Any]) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    return list(
        tok.apply_chat_template(
            record["messages"],
            tools=record.get("tools"),
            tokenize=True,
            sanitize_control_tokens=True,
            return_dict=False,
        )
    )


@pytest.mark.parametrize("layout", ["one template", "tool_use template"])
def test_records_spelling_markup_are_kept_with_transformers_ids(tmp_path: Path, layout: str) -> None:
    from transformers import AutoTokenizer

    folder = with_markup(chatml_folder(tmp_path / "tok"))
    if layout == "tool_use template":
        tool_use_only(folder)
    columns, problems = TrainingFeatures(folder).features(RECORDS)
    assert problems == []
    assert columns["input_ids"] == [sanitized(folder, record) for record in RECORDS]
    tok = AutoTokenizer.from_pretrained(str(folder))
    tool_call, note = tok.convert_tokens_to_ids(["<tool_call>", "<note>"])
    first, _, third, fourth = columns["input_ids"]
    # written by the template that renders it: text in the data; <note>, written by none, keeps its id
    assert (tool_call in first) is (layout == "tool_use template") and third.count(note) == 2
    assert fourth.count(tool_call) == 1  # the call the template writes; the argument's and the result's are text


def test_control_spellings_are_the_tokens_transformers_sanitizes(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(with_markup(chatml_folder(tmp_path / "tok"))))
    commented = "{#- <note> is named in a comment only -#}" + GOOD.replace("'<tool_call>'", "'<tool_' + 'call>'")
    for template in (GOOD, commented):
        pattern = control_spellings(tok, (template,))
        found = {t.content for t in tok.added_tokens_decoder.values() if pattern.fullmatch(t.content)}
        assert found == set(tok._get_control_tokens(template))
    assert not control_spellings(tok, (commented,)).search("<note> <tool_call>")


def test_text_backend_encodes_as_transformers_does_without_added_tokens(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(with_markup(chatml_folder(tmp_path / "tok"))))
    plain = text_backend(tok.backend_tokenizer)
    for text in ("<tool_call>", "\n</tool_call>x", " <|im_end|> and </s>", "<note><tool_call>"):
        enc = plain.encode(text, add_special_tokens=False)
        assert enc.ids == tok._encode_without_added_tokens(text)
        assert "".join(text[a:b] for a, b in enc.offsets) == text
