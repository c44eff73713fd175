"""Where a command's template and tokens come from: the folder's named templates read once and the same way by
every stage, the folder's own template required before any work starts, and inferred tokens taken from the probes
rendered as verify renders them (generation prompt included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates.errors import UsageError
from hf_chat_templates.families.tokens import template_tokens
from hf_chat_templates.tokenizer.folder import read_folder
from hf_chat_templates.verification.dataset import verify_conversations

from ..helpers import build_toy_tokenizer, chatml_folder, write_jsonl


def _with_config_key(folder: Path, value: object) -> Path:
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = value
    config_path.write_text(json.dumps(config))
    return folder


def test_named_templates_in_the_config_key(tmp_path: Path) -> None:
    folder = _with_config_key(
        build_toy_tokenizer(tmp_path / "tok"),
        [
            {"name": "default", "template": "A"},
            {"name": "tool_use"},  # no template: left out, never the text "None"
            {"template": "nameless"},  # no name: left out
            "not an object",
            {"name": "default", "template": "B"},  # a second entry of one name: the first counts
            {"name": "training", "template": "T"},
        ],
    )
    parsed = read_folder(folder)
    assert parsed.config_templates() == {"default": "A", "training": "T"}
    assert parsed.named_template("training") == "T" and parsed.named_template("tool_use") is None


def test_the_file_and_the_additional_folder_come_first(tmp_path: Path) -> None:
    folder = _with_config_key(
        build_toy_tokenizer(tmp_path / "tok"),
        [{"name": "default", "template": "key"}, {"name": "training", "template": "key-training"}],
    )
    (folder / "chat_template.jinja").write_text("file")
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "training.jinja").write_text("file-training")
    parsed = read_folder(folder)
    assert parsed.named_template("default") == "file" and parsed.named_template("training") == "file-training"


def test_verify_conversations_needs_a_template_before_it_starts(tmp_path: Path) -> None:
    folder = build_toy_tokenizer(tmp_path / "tok")  # no chat template at all
    data = write_jsonl(tmp_path / "c.jsonl", ['{"messages": [{"role": "user", "content": "hi"}]}'])
    for workers in (None, 2):  # with workers, said in the parent: a worker that cannot start would hang the pool
        with pytest.raises(UsageError, match="the tokenizer has no chat template") as err:
            verify_conversations(folder, data, workers=workers)
        assert "family" in (err.value.hint or "")


def test_inferred_tokens_include_what_only_the_generation_prompt_writes(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    template = (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + (m['content'] if m['content'] is string "
        "else '') + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant' + "
        "'<|' + 'gen' + '|>' + '\\n' }}{% endif %}"  # <|gen|> is in no literal: only the rendering shows it
    )
    tokenizer = AutoTokenizer.from_pretrained(str(chatml_folder(tmp_path / "tok")))
    tokens = template_tokens(tokenizer, template)
    assert "<|gen|>" in tokens.control_tokens and tokens.stop_tokens == ("<|im_end|>",)
    assert tokens.origin == "inferred from the template's renderings"
    declared = template_tokens(tokenizer, template, stop_tokens=["<|im_start|>"], control_tokens=["[MARK]"])
    assert declared.stop_tokens == ("<|im_start|>",) and declared.origin == "declared"
    assert declared.control_tokens[:2] == ("[MARK]", "<|im_start|>") and "<|gen|>" in declared.control_tokens
