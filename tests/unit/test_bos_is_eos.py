"""A tokenizer whose BOS is its EOS (Granite, GPT-2 style) ends every turn with that id: that is not a double BOS;
two at the very start still are. The same on the probes and on dataset records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import TemplateChoice
from hf_chat_templates.verification.dataset import verify_conversations

from ..helpers import GOOD, chatml_folder, check, context, write_jsonl


@pytest.fixture
def same_bos_eos(tmp_path: Path) -> Path:
    folder = chatml_folder(tmp_path / "tok")
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["bos_token"] = config["eos_token"] = "<|im_end|>"
    config_path.write_text(json.dumps(config))
    return folder


def test_turn_ends_are_not_a_double_bos(same_bos_eos: Path) -> None:
    result = check(context(same_bos_eos), "no-double-bos")
    assert result.status == "pass", result.message


def test_two_at_the_start_still_are(same_bos_eos: Path) -> None:
    result = check(context(same_bos_eos, "{{ bos_token }}{{ bos_token }}" + GOOD), "no-double-bos")
    assert result.status == "fail" and "at token positions [0, 1]" in result.message


def test_records_too(same_bos_eos: Path, tmp_path: Path) -> None:
    line = json.dumps({"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}]})
    data = write_jsonl(tmp_path / "c.jsonl", [line, line])
    assert verify_conversations(same_bos_eos, data).failed["no-double-bos"] == 0
    doubled = tmp_path / "doubled.jinja"
    doubled.write_text("{{ bos_token }}{{ bos_token }}" + GOOD)
    assert verify_conversations(same_bos_eos, data, TemplateChoice(template=doubled)).failed["no-double-bos"] == 2
