"""No data loss hides behind "not read": a field the data carries and the model never sees is a finding, with the
loss named in words and its context; what the template never reads is a warning, an error when trained on.

Each broken template is GOOD (tests/helpers.py) changed the way a published template is shaped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import TemplateChoice
from hf_chat_templates.conversations.probes import _Builder, _done, tool_call, weather_tool

from ..helpers import GOOD, check, context, run

# Mistral Nemo's shape: the system prompt is written into the last user turn, only when that turn is the last message.
SYSTEM_IN_LAST_USER = (
    "{%- if messages[0].role == 'system' -%}{%- set system = messages[0].content -%}"
    "{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for m in loop_messages -%}"
    "{{- '<|im_start|>' + m.role + '\\n' -}}"
    "{%- if m.role == 'user' and loop.last and system is defined -%}{{- system + '\\n\\n' -}}{%- endif -%}"
    "{%- if m.content is string -%}{{- m.content -}}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# Llama 3.x's shape: an assistant turn with tool calls writes the calls, never its content.
CONTENT_OR_CALLS = GOOD.replace(
    "{%- if m.content is string -%}{{- m.content -}}",
    "{%- if m.tool_calls -%}{%- elif m.content is string -%}{{- m.content -}}",
)
# A SmolLM3 variant's shape: tools in the system prompt, assistant tool calls never written.
NO_CALLS = GOOD.replace("{%- for c in m.tool_calls or [] -%}", "{%- for c in [] -%}")
# A thinking model's template (enable_thinking) that writes no reasoning_content: reasoning data trains nothing.
# A thinking switch that asks for reasoning inside <think></think> tags, and content written as it is: reasoning
# lives inside content by design (Granite 3.3's format)
THINKING_INLINE = (
    "{%- if enable_thinking -%}{{- '<|im_start|>system\\nThink first, inside <think></think> tags.<|im_end|>\\n' -}}"
    "{%- endif -%}" + GOOD
)
# A thinking switch and no place for reasoning: no think tags, no reasoning field
THINKING_WITHOUT_REASONING = (
    "{%- if enable_thinking is defined and not enable_thinking -%}{{- '<|im_start|>system\\n/no_think<|im_end|>\\n' -}}"
    "{%- endif -%}" + GOOD
)
# The inline format cutting content at </think>: its reasoning is dropped
THINKING_CUT = THINKING_INLINE.replace("{{- m.content -}}", "{{- m.content.split('</think>')[-1] -}}")
TRIMMED = GOOD.replace("{{- m.content -}}", "{{- m.content | trim -}}")


def test_a_system_prompt_written_only_before_a_generation_prompt_is_lost_from_every_training_sample(
    good: Path,
) -> None:
    ctx = context(good, SYSTEM_IN_LAST_USER)
    assert ctx.capabilities["system"] == "yes"  # read: the request before the answer shows it
    result = check(ctx, "nothing-dropped")
    assert result.status == "fail" and result.severity == "error" and result.cause == "template"
    assert "the system content of message 0" in result.message
    assert "is dropped when the conversation ends with an assistant turn" in result.message
    assert "every training sample loses it" in result.message
    assert result.detail["message_index"] == 0 and result.detail["kind"] == "system"


def _content_next_to_a_call() -> tuple:
    b = _Builder("content-and-call")
    b.add("user", "Weather in Paris {}?")
    index = len(b.messages)
    text, city = b.word("content"), b.word("argument")
    b.messages.append(
        {
            "role": "assistant",
            "content": f"Let me check {text}.",
            "tool_calls": [tool_call("get_weather", {"city": city})],
        }
    )
    b.note(text, "content", index, None)
    b.note(city, "argument", index, "tool_calls")
    b.add("tool", "Sunny {}.", kind="tool_result", capability="tool_results", tool_call_id="call_1")
    b.add("assistant", "It is sunny {}.")
    probes: list = []
    _done(probes, b, "content next to a tool call", tools=[weather_tool()], requires=("tool_calls",))
    return tuple(probes)


def test_content_next_to_tool_calls_dropped_is_a_failure(good: Path) -> None:
    probes = _content_next_to_a_call()
    assert check(context(good, GOOD, probes), "nothing-dropped").status == "pass"
    result = check(context(good, CONTENT_OR_CALLS, probes), "nothing-dropped")
    assert result.status == "fail" and result.probe == "content-and-call"
    assert "the content of message 1" in result.message and "is dropped" in result.message


def test_tool_calls_dropped_by_a_template_that_shows_tools_fail(good: Path) -> None:
    ctx = context(good, NO_CALLS)
    assert ctx.capabilities["tools"] == "yes" and ctx.capabilities["tool_calls"] == "no"
    result = check(ctx, "nothing-dropped")
    assert result.status == "fail"
    failing = [e["message"] for e in result.detail["examples"] if e["severity"] == "error"]
    assert any(
        "tool calls are never rendered" in m and "although the template renders the tool definitions" in m
        for m in failing
    )


def test_data_a_template_never_reads_nor_names_is_its_limit_a_warning_with_such_data_an_error_when_trained_on(
    good: Path,
) -> None:
    result = check(context(good), "nothing-dropped")
    assert result.status == "info" and result.severity == "info"
    assert "reasoning (reasoning_content) is never rendered: reasoning data trains nothing" in result.message
    assert "the template has no reasoning support" in result.message
    assert "(with --training: a failure)" in result.message
    with_data = check(context(good, data_fields={"reasoning": 4}), "nothing-dropped")
    assert with_data.status == "warn" and "the data has it: it is lost" in with_data.message
    trained = check(context(good, training=True), "nothing-dropped")
    assert trained.status == "fail" and "with --training" not in trained.message


def test_a_field_the_data_never_has_loses_nothing_when_trained_on(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    without = check(context(good, training=True, data_fields={"system": 3}), "nothing-dropped")
    assert without.status == "info" and "the data has none: nothing of it is lost" in without.message
    with_reasoning = check(context(good, training=True, data_fields={"reasoning": 1}), "nothing-dropped")
    assert with_reasoning.status == "fail"
    from ..helpers import write_jsonl

    plain = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    thinking = {"messages": [plain["messages"][0], {**plain["messages"][1], "reasoning_content": "think"}]}
    data = write_jsonl(tmp_path / "plain.jsonl", [json.dumps(plain)])
    only = ("--only", "nothing-dropped")
    assert run(capsys, "verify", str(good), "--training", "--conversations", str(data), *only)[0] == 0
    data = write_jsonl(tmp_path / "thinking.jsonl", [json.dumps(thinking)])
    code, out, _ = run(capsys, "verify", str(good), "--training", "--conversations", str(data), *only)
    assert code == 1 and "reasoning (reasoning_content) is never rendered" in out


def test_a_thinking_models_template_that_drops_reasoning_fails(good: Path) -> None:
    result = check(context(good, THINKING_WITHOUT_REASONING), "nothing-dropped")
    assert result.status == "fail"
    assert "reasoning data trains nothing although the template is a thinking model's" in result.message


def test_a_format_that_keeps_reasoning_inside_content_is_a_warning_not_an_error(good: Path) -> None:
    for training in (False, True):
        result = check(context(good, THINKING_INLINE, training=training), "nothing-dropped")
        assert result.status == "warn", result.message
        assert "the format keeps reasoning inside content by design" in result.message
        assert "with --training: a failure" not in result.message
        assert "<think>…</think>" in (result.hint or "")
    # The data has no reasoning: nothing is lost
    quiet = check(context(good, THINKING_INLINE, training=True, data_fields={"system": 1}), "nothing-dropped")
    assert quiet.status == "info"
    cut = check(context(good, THINKING_CUT), "nothing-dropped")
    assert cut.status == "fail" and "although the template is a thinking model's" in cut.message


def test_trimmed_content_is_not_what_the_data_says(good: Path) -> None:
    assert check(context(good), "completion-matches-content").status == "pass"
    result = check(context(good, TRIMMED), "completion-matches-content")
    assert result.status == "fail" and result.probe == "whitespace"
    assert "the trained completion is the content trimmed" in result.message
    assert "its leading '\\n··' and trailing '··' whitespace is not trained" in result.message
    assert "drop `| trim`" in (result.hint or "")
    # SmolLM3's shape: only the leading newlines stripped
    lstripped = GOOD.replace("{{- m.content -}}", "{{- m.content.lstrip('\\n') -}}")
    result = check(context(good, lstripped), "completion-matches-content")
    assert result.status == "fail" and "its leading '\\n' whitespace is not trained" in result.message


def test_fail_on_sets_the_exit_code(capsys: pytest.CaptureFixture[str], good: Path, tmp_path: Path) -> None:
    code, out, _ = run(capsys, "verify", str(good))
    assert code == 0 and "info nothing-dropped" in out and "info injection" in out and "warn " not in out
    code, _, _ = run(capsys, "verify", str(good), "--fail-on", "warning")
    assert code == 0
    placeholder = tmp_path / "placeholder.jinja"  # a placeholder written as text: a warning
    placeholder.write_text("{{- 'You are {persona}.\\n' -}}" + GOOD)
    code, out, _ = run(capsys, "verify", str(good), "--template", str(placeholder), "--only", "structure")
    assert code == 0 and "warn structure" in out and "fix (" in out
    code, _, _ = run(
        capsys, "verify", str(good), "--template", str(placeholder), "--only", "structure", "--fail-on", "warning"
    )
    assert code == 1
    code, _, _ = run(capsys, "verify", str(good), "--training")
    assert code == 1


def test_injection_is_info_unless_sanitizing_is_asked_for(good: Path) -> None:
    assert check(context(good), "injection").status == "info"
    sanitized = check(context(good, sanitize=True), "injection")
    assert sanitized.status == "pass" and "with sanitize_control_tokens=True" in sanitized.message


# ---- the same losses in a dataset's records (verify --conversations) ------------------------------------------


def _record_with_everything() -> dict:
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Reykjavík"}}}
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": {}}}
    return {
        "tools": [tool],
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "cold"},
            {"role": "assistant", "content": "It is cold."},
        ],
    }


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (GOOD.replace("tools | tojson", "'[]'"), "tool 0 (its description): 'Current weather'"),
        (
            GOOD.replace("c.function.arguments | tojson", "'{}'"),
            "message 1 (argument city of a tool call): 'Reykjavík'",
        ),
    ],
    ids=["tool-definitions", "call-arguments"],
)
def test_a_record_whose_tools_or_arguments_the_template_drops_fails_nothing_dropped(
    tmp_path: Path, broken: str, says: str
) -> None:
    from hf_chat_templates.verification.dataset import verify_conversations

    from ..helpers import chatml_folder, write_jsonl

    folder = chatml_folder(tmp_path / "tok")
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(_record_with_everything())])
    assert verify_conversations(folder, data).failed["nothing-dropped"] == 0
    template = tmp_path / "broken.jinja"
    template.write_text(broken)
    report = verify_conversations(folder, data, TemplateChoice(template=template))
    assert report.failed["nothing-dropped"] == 1
    assert report.examples["nothing-dropped"][0] == (1, f"{says} is not in the rendering")
