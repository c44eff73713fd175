"""Normalization for the template: JSON-string tool-call arguments, null content of tool-call turns and reasoning
fields, each decided once by probing the template, applied per record and named in the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hf_chat_templates import TemplateChoice, _compat, prepare
from hf_chat_templates.conversations.normalize import (
    ARGUMENTS_STEP,
    EARLIER_REASONING_DROPPED,
    NULL_CONTENT_STEP,
    REASONING_DROPPED,
    REASONING_STEP,
    THINK_DROPPED,
    Normalizer,
)
from hf_chat_templates.verification.dataset import verify_conversations

from ..helpers import GOOD, model_folder, write_jsonl

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

# Reads thinking; its system text names reasoning_content, which it never writes.
THINKING = GOOD.replace(
    "{%- for m in messages -%}",
    "{{- '<|im_start|>system\\nNo reasoning_content here.<|im_end|>\\n' -}}{%- for m in messages -%}",
).replace(
    "{%- if m.content is string -%}",
    "{%- if m.thinking -%}{{- '<think>' + m.thinking + '</think>' -}}{%- endif -%}{%- if m.content is string -%}",
)
# Speaks of thinking and reasoning_content in its system text, renders neither.
NAMES_ONLY = GOOD.replace(
    "{%- for m in messages -%}",
    "{{- '<|im_start|>system\\nKeep thinking and reasoning_content to yourself.<|im_end|>\\n' -}}"
    "{%- for m in messages -%}",
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
    reasoning = Normalizer.for_template(_renderer(REASONING))
    assert (reasoning.reasoning_field, reasoning.earlier_reasoning) == ("reasoning_content", True)
    thinking = Normalizer.for_template(_renderer(THINKING))
    assert thinking == Normalizer(reasoning_field="thinking", earlier_reasoning=True)


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
    report = prepare(good, data, tmp_path / "out", TemplateChoice(template=template), max_skipped=3)
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
    report = prepare(good, data, tmp_path / "out", TemplateChoice(template=template))
    assert (report.written, report.records, report.ok) == (2, 2, True)
    text = report.describe()
    assert "parsed JSON-string tool-call arguments into mappings (the template needs them): 1 records" in text
    assert report.to_dict()["skips"]["steps"] == {
        "parsed JSON-string tool-call arguments into mappings (the template needs them)": 1
    }
    checked = verify_conversations(good, data, TemplateChoice(template=template))
    assert checked.failed["renders"] == 0 and checked.tally.steps == {ARGUMENTS_STEP: 1}


def test_null_content_is_replaced_only_where_the_template_fails_on_it(good: Path, tmp_path: Path) -> None:
    template = tmp_path / "null.jinja"
    template.write_text(NULL_CRASH)
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(openai_record({"city": "Oslo"}))])
    report = prepare(good, data, tmp_path / "out", TemplateChoice(template=template))
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
        good,
        write_jsonl(tmp_path / "c.jsonl", [json.dumps(r) for r in records]),
        tmp_path / "out",
        TemplateChoice(template=template),
    )
    assert report.written == 3 and report.tally.steps == {REASONING_STEP: 2}
    assert "into 'reasoning_content' (the field the template renders): 2 records" in report.describe()
    tokenizer = AutoTokenizer.from_pretrained(str(good))
    texts = [tokenizer.decode(row) for row in load_from_disk(str(tmp_path / "out"))["input_ids"]]
    assert "<|im_start|>assistant\n<think>add</think>4<|im_end|>" in texts[0]
    assert "<|im_start|>assistant\n<think>sum</think>6<|im_end|>" in texts[1]


def test_content_is_left_as_it_is_when_the_template_reads_no_reasoning_field() -> None:
    record = {"messages": [{"role": "assistant", "content": "<think>x</think>y"}]}
    assert Normalizer.for_template(_renderer(GOOD)).apply(record) == (record, ())


def _decoded(folder: Path, out: Path) -> list[str]:
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return [tokenizer.decode(row) for row in load_from_disk(str(out))["input_ids"]]


def _answer(reasoning: dict[str, str], content: str = "4") -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": content, **reasoning}]}


def _two_turns(first: str, last: str) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": first},
            {"role": "user", "content": "3+3?"},
            {"role": "assistant", "content": last},
        ]
    }


def test_a_field_named_in_the_templates_text_counts_only_when_rendering_writes_it(good: Path, tmp_path: Path) -> None:
    # System text that speaks of "thinking", reasoning read from reasoning_content: that is where reasoning goes
    template = tmp_path / "reasoning.jinja"
    template.write_text(REASONING.replace("{%- for m", "{{- 'Think before answering; thinking helps.' -}}{%- for m", 1))
    records = [_answer({"thinking": "add them"}), _answer({"reasoning": "sum"})]
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(r) for r in records])
    report = prepare(good, data, tmp_path / "out", TemplateChoice(template=template))
    assert report.ok and report.reasoning_field == "reasoning_content" and report.tally.steps == {REASONING_STEP: 2}
    assert "into 'reasoning_content' (the field the template renders): 2 records" in report.describe()
    texts = _decoded(good, tmp_path / "out")
    assert "<think>add them</think>4" in texts[0] and "<think>sum</think>4" in texts[1]
    # Text naming reasoning_content, rendering thinking: thinking
    template.write_text(THINKING)
    moved = prepare(good, data, tmp_path / "thinking", TemplateChoice(template=template))
    assert moved.ok and moved.reasoning_field == "thinking" and moved.tally.steps == {REASONING_STEP: 1}
    assert "into 'thinking' (the field the template renders): 1 records" in moved.describe()


def test_a_template_naming_both_fields_but_rendering_neither_counts_reasoning_as_dropped(
    good: Path, tmp_path: Path
) -> None:
    template = tmp_path / "names.jinja"
    template.write_text(NAMES_ONLY)
    normalizer = Normalizer.for_template(_renderer(NAMES_ONLY))
    assert normalizer.reasoning_field is None
    assert normalizer.apply(_answer({"reasoning_content": "add"}))[1] == (REASONING_DROPPED,)
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(_answer({"reasoning_content": "add"}))])
    refused = prepare(good, data, tmp_path / "refused", TemplateChoice(template=template))
    assert not refused.ok and "1 reasoning (reasoning_content, reasoning, thinking) dropped" in refused.over_limit
    kept = prepare(good, data, tmp_path / "out", TemplateChoice(template=template), max_skipped=1)
    assert kept.ok and kept.tally.steps == {REASONING_DROPPED: 1} and kept.reasoning_field is None


def test_granites_thinking_switch_is_not_a_reasoning_field(toy_tokenizer_master: Path, tmp_path: Path) -> None:
    """Granite 3.3's template has a `thinking` variable (a switch) and renders no reasoning of the data."""
    folder = model_folder("granite-3.3", toy_tokenizer_master, tmp_path / "granite")
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(_answer({"reasoning_content": "add"}))])
    report = prepare(folder, data, tmp_path / "out", max_skipped=1)
    assert report.reasoning_field is None and report.tally.steps == {REASONING_DROPPED: 1}


def test_qwen3_counts_the_inline_reasoning_it_strips_from_earlier_turns(
    toy_tokenizer_master: Path, tmp_path: Path
) -> None:
    folder = model_folder("qwen3", toy_tokenizer_master, tmp_path / "qwen3")
    records = [
        _two_turns("<think>add first</think>4", "<think>add again</think>6"),
        _answer({}, "<think>only turn</think>4"),
        _answer({"reasoning_content": "in the field"}),
    ]
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(r) for r in records])
    refused = prepare(folder, data, tmp_path / "refused")
    assert not refused.ok and "1 reasoning of assistant turns before the last user turn dropped" in refused.over_limit
    report = prepare(folder, data, tmp_path / "out", max_skipped=1)
    assert report.ok and report.written == 3 and report.reasoning_field == "reasoning_content"
    # the last turns' reasoning moved to the field the template renders there: no loss counted for it
    assert report.tally.steps == {EARLIER_REASONING_DROPPED: 1, REASONING_STEP: 2}
    text = report.describe()
    assert "reasoning of assistant turns before the last user turn dropped" in text
    assert "into 'reasoning_content' (the field the template renders): 2 records" in text
    texts = _decoded(folder, tmp_path / "out")
    assert "add first" not in texts[0] and "<think>\nadd again\n</think>\n\n6" in texts[0]
    assert "<think>\nonly turn\n</think>" in texts[1] and "<think>\nin the field\n</think>" in texts[2]
    # the same reasoning in reasoning_content of an earlier turn is counted the same way
    earlier = _two_turns("4", "6")
    earlier["messages"][1]["reasoning_content"] = "add first"
    assert Normalizer.for_template(_renderer(_source("qwen3"))).apply(earlier)[1] == (EARLIER_REASONING_DROPPED,)


def test_deepseek_r1_distill_counts_the_inline_reasoning_it_strips(toy_tokenizer_master: Path, tmp_path: Path) -> None:
    folder = model_folder("deepseek-r1-distill-qwen", toy_tokenizer_master, tmp_path / "r1")
    records = [_answer({}, "<think>add them</think>4"), _answer({}, "<think>\n\n</think>4"), _answer({})]
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(r) for r in records])
    refused = prepare(folder, data, tmp_path / "refused")
    # Its generation prompt ends with "<think>\n", which no rendered answer starts with: every turn is left out, and
    # each record counts once toward the limit; the report still names the reasoning the template strips
    assert (
        not refused.ok and "3 of 3 records could not be used (3 every turn left out, 1 reasoning" in refused.over_limit
    )
    report = prepare(folder, data, tmp_path / "out", max_skipped=10)
    assert not report.over_limit and report.tally.steps == {THINK_DROPPED: 1}
    assert "the template strips it from the content and renders no reasoning field" in report.describe()


def test_gpt_oss_gets_reasoning_in_thinking_without_a_loss(toy_tokenizer_master: Path, tmp_path: Path) -> None:
    folder = model_folder("gpt-oss", toy_tokenizer_master, tmp_path / "gpt-oss")
    records = [_answer({"reasoning_content": "add them"}), _answer({}, "<think>sum</think>4"), _answer({})]
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(r) for r in records])
    report = prepare(folder, data, tmp_path / "out")
    assert report.ok and report.reasoning_field == "thinking" and report.tally.steps == {REASONING_STEP: 2}
    assert "into 'thinking' (the field the template renders): 2 records" in report.describe()
    texts = _decoded(folder, tmp_path / "out")
    assert "<|channel|>analysis<|message|>add them<|end|>" in texts[0]
    assert "<|channel|>analysis<|message|>sum<|end|>" in texts[1]


def _source(name: str) -> str:
    from ..helpers import corpus_templates

    return corpus_templates(name)["default"].read_text(encoding="utf-8")
