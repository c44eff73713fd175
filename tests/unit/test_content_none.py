"""Templates that test `message.content is none`: transformers drops None values before rendering, so an
OpenAI-format tool-call turn (`"content": None`) reaches the template with no content key, and `is none` is false
there. verify's `renders` and `nothing-dropped` findings say so when that test changes the rendering."""

from __future__ import annotations

from pathlib import Path

from hf_chat_templates.conversations.probes import core_probes
from hf_chat_templates.verification.content_none import none_tests

from ..helpers import check, context

# DeepSeek-R1's shape: the tool-call branch is chosen by `content is none`, the answer branch by `is not none`.
DEEPSEEK = (
    "{{ bos_token }}{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is none %}"
    "{{ '<｜Assistant｜><｜tool▁calls▁begin｜>' }}{%- for tool in message['tool_calls'] %}"
    "{{ '<｜tool▁call▁begin｜>' + tool['function']['name'] + '\\n' + (tool['function']['arguments'] "
    "if tool['function']['arguments'] is string else tool['function']['arguments'] | tojson) + '<｜tool▁call▁end｜>' }}"
    "{%- endfor %}{{ '<｜tool▁calls▁end｜><｜end▁of▁sentence｜>' }}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is not none %}"
    "{% set content = message['content'] %}{{ '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}{%- endif %}"
    "{%- if message['role'] == 'tool' %}{{ '<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>' }}"
    "{%- endif %}{%- endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}"
)
# The same, with an answer branch that survives a missing content: the tool calls vanish without an error.
SILENT = DEEPSEEK.replace("'<｜Assistant｜>' + content +", "'<｜Assistant｜>' + (content or '') +")
# The fix the finding names.
FIXED = DEEPSEEK.replace("message['content'] is none", "not message['content']").replace(
    "message['content'] is not none", "message['content'] is defined and message['content'] is not none"
)


def test_transformers_drops_a_none_content_before_the_template_sees_it(good: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(good))
    probe = "{% for m in messages %}{{ m.content is none }},{{ m.content is defined }};{% endfor %}"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": []}]
    rendered = tokenizer.apply_chat_template(messages, chat_template=probe, tokenize=False)
    assert rendered == "False,True;False,False;"  # the None is gone: undefined, for which `is none` is false


def test_the_syntax_tree_finds_content_tested_against_none() -> None:
    found = none_tests(DEEPSEEK)
    assert [t.expression for t in found] == ["message['content'] is none", "message['content'] is not none"]
    assert [t.negated for t in found] == [False, True]
    aliased = none_tests("{% set c = m.content %}{% if c is none %}{% elif m.content != None %}{% endif %}")
    assert [t.expression for t in aliased] == ["c is none", "m.content != none"]
    unrelated = "{% if m.content is string %}{% elif m.tool_calls is none %}{% elif not m.content %}{% endif %}"
    assert none_tests(unrelated) == () and none_tests("{% if %}") == ()


def test_a_template_that_raises_on_the_missing_content_is_explained(good: Path) -> None:
    result = check(context(good, DEEPSEEK), "renders")
    assert result.status == "fail" and result.probe == "tool-call"
    assert "UndefinedError" in result.message
    assert (
        "the template tests `message['content'] is none` (line 1) and `message['content'] is not none` (line 1), "
        "but transformers drops None values before rendering: message 1's content" in result.message
    )
    assert "where `is none` is false and `is not none` is true" in result.message
    assert "write `not message['content']` for `message['content'] is none`" in result.message
    assert result.detail["content_none_test"] == ["message['content'] is none", "message['content'] is not none"]


def test_tool_calls_the_template_loses_to_the_missing_content_are_dropped(good: Path) -> None:
    ctx = context(good, SILENT)
    assert ctx.capabilities["tool_calls"] == "no"  # transformers' rendering never shows them
    result = check(ctx, "nothing-dropped")
    assert result.status == "fail" and result.probe == "tool-call"
    assert "the tool-call name of message 1" in result.message and "is dropped" in result.message
    assert "transformers drops None values before rendering" in result.message
    assert check(ctx, "renders").message.count("transformers drops None") == 0  # renders only fails on parts


def test_a_template_that_handles_a_missing_content_passes(good: Path) -> None:
    # The core probes: the agent scenarios also show it drops content written next to tool calls (DeepSeek's shape)
    ctx = context(good, FIXED, tuple(core_probes()))
    assert ctx.capabilities["tool_calls"] == "yes"
    dropped = check(ctx, "nothing-dropped")
    assert dropped.status != "fail" and "transformers drops None" not in dropped.message
    assert "transformers drops None" not in check(ctx, "renders").message


def test_a_none_test_that_changes_nothing_is_not_mentioned(good: Path) -> None:
    # `is not none` guarding the content: undefined renders as nothing, exactly as None skipped would
    harmless = (
        "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' -}}"
        "{%- if m.content is not none and m.content is string -%}{{- m.content -}}{%- endif -%}"
        "{%- for c in m.tool_calls or [] -%}{{- '<tool_call>' + c.function.name + '</tool_call>' -}}{%- endfor -%}"
        "{{- '<|im_end|>\\n' -}}{%- endfor -%}"
    )
    ctx = context(good, harmless)
    assert none_tests(harmless) and ctx.capabilities["tool_calls"] == "yes"
    result = check(ctx, "nothing-dropped")
    assert "transformers drops None" not in result.message


# Bielik's shape: content through `| default('')`, which replaces an undefined value but not None, then searched
NULL_UNSAFE = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' -}}"
    "{%- set c = m.content | default('') -%}{%- if '</think>' in c -%}{%- set c = c.split('</think>')[-1] -%}"
    "{%- endif -%}{{- c if c is string else '' -}}"
    "{%- for call in m.tool_calls or [] -%}{{- '<tool_call>' + call.function.name + '</tool_call>' -}}{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def test_a_template_that_raises_on_a_null_content_as_given_fails(good: Path) -> None:
    result = check(context(good, NULL_UNSAFE), "renders")
    assert result.status == "fail" and result.probe == "tool-call", result.message
    assert result.message.startswith(
        "probe tool-call (an OpenAI-format tool call, arguments as a dict) renders in transformers only because it "
        "drops content None: with message 1's content None kept, as OpenAI sends it and TGI and transformers.js pass "
        "it, the template raises TypeError: argument of type 'NoneType' is not iterable; such requests cannot be "
        "served (+"
    ), result.message
    assert "`message.content or ''`" in result.hint
    fixed = NULL_UNSAFE.replace("m.content | default('')", "m.content or ''")
    assert check(context(good, fixed), "renders").status in ("pass", "info")
