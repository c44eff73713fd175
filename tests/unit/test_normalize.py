"""Normalization for the template: JSON-string tool-call arguments, null content of tool-call turns and reasoning
fields, each decided once by probing the template, applied per record and named in the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hf_chat_templates import _compat, prepare
from hf_chat_templates.conversations.normalize import (
    ARGUMENTS_STEP,
    NULL_CONTENT_STEP,
    REASONING_STEP,
    Normalizer,
    reads_reasoning,
)
from hf_chat_templates.verification.dataset import verify_conversations

from ..helpers import GOOD, write_jsonl

_ARGUMENTS = "(c.function.arguments if c.function.arguments is string else c.function.arguments | tojson)"
# Refuses string arguments as Llama 3.2's pythonic template does.
REFUSING = GOOD.replace(
    "{{- '<tool_call>' + c.function.name",
    "{%- if c.function.arguments is string -%}"
    "{{- raise_exception('pythonic tool calls need arguments as a dict') -}}{%- endif -%}"
    "{{- '<tool_call>' + c.function.name",
)
# Writes string arguments JSON-encoded again.
DOUBLE = GOOD.replace(_ARGUMENTS, "c.function.arguments | tojson")
# Fails on an assistant turn whose content is null (transformers drops the key).
NULL_CRASH = GOOD.replace(
    "{{- '<|im_start|>' + m.role + '\\n' -}}", "{{- '<|im_start|>' + m.role + '\\n' + m.content -}}"
)
# Reads reasoning_content.
REASONING = GOOD.replace(
    "{%- if m.content is string -%}",
    "{%- if m.reasoning_content -%}{{- '<think>' + m.reasoning_content + '</think>' -}}{%- endif -%}"
    "{%- if m.content is string -%}",
)

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def _renderer(template: str) -> Any:
    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        return _compat.render_conversations(template, [_compat.normalize_messages(messages)], tools)[0]

    return render


def openai_record(arguments: Any = '{"city": "Oslo"}', content: Any = None) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": content,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
        ],
        "tools": TOOLS,
    }


def test_the_probes_decide_each_step_from_the_template() -> None:
    assert Normalizer.for_template(_renderer(GOOD)) == Normalizer()
    assert Normalizer.for_template(_renderer(REFUSING)).parse_arguments
    assert Normalizer.for_template(_renderer(DOUBLE)).parse_arguments
    null = Normalizer.for_template(_renderer(NULL_CRASH))
    assert null.null_content and not null.parse_arguments
    assert Normalizer.for_template(_renderer(REASONING), [REASONING]).reasoning_field == "reasoning_content"
    assert reads_reasoning(["{{ message.thinking }}"]) == "thinking"
    assert reads_reasoning([GOOD, None]) is None


def test_apply_parses_arguments_and_replaces_null_content_without_touching_the_input() -> None:
    record = openai_record()
    before = json.dumps(record)
    normal, steps = Normalizer(parse_arguments=True, null_content=True).apply(record)
    assert steps == (ARGUMENTS_STEP, NULL_CONTENT_STEP)
    turn = normal["messages"][1]
    assert turn["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"} and turn["content"] == ""
    assert json.dumps(record) == before
    assert Normalizer(parse_arguments=True).apply(openai_record({"city": "Oslo"}, "")) == (
        openai_record({"city": "Oslo"}, ""),
        (),
    )


def test_arguments_that_are_not_a_json_object_are_a_malformed_record(good: Path, tmp_path: Path) -> None:
    template = tmp_path / "refusing.jinja"
    template.write_text(REFUSING)
    records = [openai_record(), openai_record("city=Oslo"), openai_record("[1, 2]"), openai_record('{"a": NaN}')]
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(r) for r in records])
    report = prepare(good, data, tmp_path / "out", template=template, max_skipped=3)
    assert report.written == 1 and report.tally.steps == {ARGUMENTS_STEP: 1} and report.unrendered == []
    assert [n for n, _ in report.bad_lines] == [2, 3, 4]
    assert "arguments 'city=Oslo' are not JSON" in report.bad_lines[0][1]
    assert "arguments '[1, 2]' are not a JSON object" in report.bad_lines[1][1]
    assert "are not JSON" in report.bad_lines[2][1]  # NaN is not JSON
    # On a template that takes strings as given, the same records would be trained as written: refused there too
    kept = prepare(good, data, tmp_path / "kept", max_skipped=3)
    assert [n for n, _ in kept.bad_lines] == [2, 3, 4]


def test_reasoning_a_template_never_renders_counts_as_a_loss(good: Path, tmp_path: Path) -> None:
    reasoned = {
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "reasoning_content": "two and two", "content": "4"},
        ]
    }
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(reasoned)])
    refused = prepare(good, data, tmp_path / "refused")  # GOOD renders no reasoning
    assert not refused.ok and "reasoning (reasoning_content, reasoning, thinking) dropped" in refused.over_limit
    report = prepare(good, data, tmp_path / "out", max_skipped=1)
    assert report.ok and report.written == 1
    assert "reasoning (reasoning_content, reasoning, thinking) dropped: the template renders no reasoning" in (
        report.describe()
    )


def test_openai_records_with_string_arguments_prepare_on_a_template_that_refuses_them(
    good: Path, tmp_path: Path
) -> None:
    template = tmp_path / "refusing.jinja"
    template.write_text(REFUSING)
    plain = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(openai_record()), json.dumps(plain)])
    report = prepare(good, data, tmp_path / "out", template=template)
    assert (report.written, report.records, report.ok) == (2, 2, True)
    text = report.describe()
    assert "parsed JSON-string tool-call arguments into mappings (the template needs them): 1 records" in text
    assert report.to_dict()["skips"]["steps"] == {
        "parsed JSON-string tool-call arguments into mappings (the template needs them)": 1
    }
    checked = verify_conversations(good, data, template=template)
    assert checked.failed["renders"] == 0 and checked.tally.steps == {ARGUMENTS_STEP: 1}


def test_null_content_is_replaced_only_where_the_template_fails_on_it(good: Path, tmp_path: Path) -> None:
    template = tmp_path / "null.jinja"
    template.write_text(NULL_CRASH)
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(openai_record({"city": "Oslo"}))])
    report = prepare(good, data, tmp_path / "out", template=template)
    assert report.written == 1 and report.tally.steps == {NULL_CONTENT_STEP: 1}
    assert 'replaced null content of assistant tool-call turns with ""' in report.describe()


def test_reasoning_aliases_move_to_the_field_the_template_reads(good: Path, tmp_path: Path) -> None:
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    template = tmp_path / "reasoning.jinja"
    template.write_text(REASONING)
    records = [
        {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>add</think>\n4"}]},
        {"messages": [{"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "6", "reasoning": "sum"}]},
        {"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]},
    ]
    report = prepare(
        good, write_jsonl(tmp_path / "c.jsonl", [json.dumps(r) for r in records]), tmp_path / "out", template=template
    )
    assert report.written == 3 and report.tally.steps == {REASONING_STEP: 2}
    assert "into 'reasoning_content' (the field the template reads): 2 records" in report.describe()
    tokenizer = AutoTokenizer.from_pretrained(str(good))
    texts = [tokenizer.decode(row) for row in load_from_disk(str(tmp_path / "out"))["input_ids"]]
    assert "<|im_start|>assistant\n<think>add</think>4<|im_end|>" in texts[0]
    assert "<|im_start|>assistant\n<think>sum</think>6<|im_end|>" in texts[1]


def test_content_is_left_as_it_is_when_the_template_reads_no_reasoning_field() -> None:
    record = {"messages": [{"role": "assistant", "content": "<think>x</think>y"}]}
    assert Normalizer.for_template(_renderer(GOOD), [GOOD]).apply(record) == (record, ())
