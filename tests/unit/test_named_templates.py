"""Named templates are used as transformers uses them: a conversation given tools is rendered with the folder's
`tool_use` template, by verify's probes and by prepare's records alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates.tokenizer.folder import dump_json

from ..helpers import GOOD, chatml_folder, run, write_jsonl


def without_tools(template: str) -> str:
    """GOOD with its tools block and tool calls taken out: a `default` template that ignores tools."""
    start = template.index("{%- for c in m.tool_calls")
    end = template.index("{%- endfor -%}", start) + len("{%- endfor -%}")
    return template[:start].split("{%- endif -%}", 1)[1] + template[end:]


def own_templates(folder: Path, *, tool_use: bool = True) -> Path:
    """The folder's template as `chat_template.jinja` without tools, and GOOD as its `tool_use` template."""
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (folder / "tokenizer_config.json").write_bytes(dump_json(config))
    (folder / "chat_template.jinja").write_text(without_tools(GOOD), encoding="utf-8")
    if tool_use:
        (folder / "additional_chat_templates").mkdir()
        (folder / "additional_chat_templates" / "tool_use.jinja").write_text(GOOD, encoding="utf-8")
    return folder


def test_a_named_tool_use_template_is_verified_with_the_tool_probes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hermes ships a `default` template without tools and a `tool_use` one: transformers renders a conversation
    given tools with `tool_use`, and so does verify, so the tool probes exercise it and nothing fails."""
    folder = own_templates(chatml_folder(tmp_path / "tok"))
    code, out, _ = run(capsys, "verify", str(folder), "--json")
    doc = json.loads(out)
    assert doc["capabilities"]["tools"] == "yes" and doc["capabilities"]["tool_calls"] == "yes"
    failed = [c["id"] + ": " + c["message"] for c in doc["checks"] if c["status"] == "fail"]
    assert code == 0 and not failed, failed
    # The default alone does not render tool calls: verified without its tool_use template, tools read "no".
    alone = own_templates(chatml_folder(tmp_path / "alone"), tool_use=False)
    _, out, _ = run(capsys, "verify", str(alone), "--json")
    assert json.loads(out)["capabilities"]["tool_calls"] == "no"


def test_prepare_renders_records_with_tools_with_the_tool_use_template(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The prepared ids are what apply_chat_template gives: with tools, the `tool_use` template's rendering."""
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    folder = own_templates(chatml_folder(tmp_path / "tok"))
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
    ]
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps({"messages": messages, "tools": tools})])
    code, _, err = run(capsys, "prepare", str(folder), "--conversations", str(data), "--output", str(tmp_path / "ds"))
    assert code == 0, err
    row = load_from_disk(str(tmp_path / "ds"))[0]
    expected = AutoTokenizer.from_pretrained(str(folder)).apply_chat_template(messages, tools=tools, tokenize=True)
    expected = expected["input_ids"] if isinstance(expected, dict) or hasattr(expected, "keys") else expected
    assert row["input_ids"] == list(expected)
    trained = AutoTokenizer.from_pretrained(str(folder)).decode([t for t in row["labels"] if t != -100])
    assert "<tool_call>get_weather" in trained
