"""The agent scenarios render on the ChatML baseline with ids in every format, and `prefix-stable` checks what an
agent sends at each generation point against the training rendering: earlier reasoning dropped before a later
user message is the format's design (info), a generation prompt the rendered turn lacks an error, tool results grouped
into one turn no failure."""

from __future__ import annotations

import re
from pathlib import Path

from hf_chat_templates.conversations.probes import CAPABILITIES
from hf_chat_templates.conversations.scenarios import HISTORY_REASONING, scenario_probes
from hf_chat_templates.conversations.suite import build_probes

from ..helpers import GOOD, check, context

# GOOD with reasoning rendered as <think> blocks, only for assistant turns after the last user message (Qwen3's way).
_REASONING = (
    "{%- if m.role == 'assistant' and m.reasoning_content is defined and loop.index0 > ns.last_user -%}"
    "{{- '<think>\\n' + m.reasoning_content + '\\n</think>\\n\\n' -}}{%- endif -%}"
)
QWEN3_SHAPED = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    + GOOD.replace("{{- '<|im_start|>' + m.role + '\\n' -}}", "{{- '<|im_start|>' + m.role + '\\n' -}}" + _REASONING)
)
# Consecutive tool results in one user turn, <|im_end|> only after the last of them (Qwen2.5's way).
GROUPED_RESULTS = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}"
    "{{- '<|im_start|>' + m.role + '\\n' -}}"
    "{%- if m.content is string -%}{{- m.content -}}"
    "{%- elif m.content -%}{%- for p in m.content -%}{{- p.text -}}{%- endfor -%}{%- endif -%}"
    "{%- for c in m.tool_calls or [] -%}"
    "{{- '<tool_call>' + c.function.name + ' ' + (c.function.arguments if c.function.arguments is string "
    "else c.function.arguments | tojson) + '</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def test_suite_has_forty_distinct_shapes_with_sentinels() -> None:
    probes = build_probes()
    ids = [p.id for p in probes]
    assert len(ids) == len(set(ids)) and len(ids) >= 40
    assert all(p.sentinels for p in probes)
    scenarios = scenario_probes()
    assert len(scenarios) >= 25
    for p in scenarios:
        assert p.description and set(p.requires) <= set(CAPABILITIES)
        assert all(re.fullmatch(r"qz\d+[a-z]+", s.text) for s in p.sentinels), p.id
        assert all(s.capability is None or s.capability in CAPABILITIES for s in p.sentinels)


def test_scenarios_carry_the_shapes_agents_send() -> None:
    probes = {p.id: p for p in scenario_probes()}
    empty = probes["agent-empty-tool-calls"]
    assert empty.messages[1]["tool_calls"] == [] and empty.messages[1]["content"]
    assert any(s.message == 1 and s.capability is None for s in empty.sentinels)
    beside = probes["agent-call-with-content"]
    assert beside.messages[1]["tool_calls"] and any(
        s.message == 1 and s.kind == "content" and s.capability is None for s in beside.sentinels
    )
    assert probes["agent-call-empty-content"].messages[1]["content"] == ""
    assert [m["role"] for m in probes["agent-loop"].messages] == [
        "system",
        *("user", "assistant", "tool", "assistant", "tool", "assistant", "user", "assistant"),
    ]
    history = probes["agent-reasoning-history-tools"]
    dropped = {s.message for s in history.sentinels if s.may_drop == HISTORY_REASONING}
    kept = {s.message for s in history.sentinels if s.kind == "reasoning" and s.may_drop is None}
    assert dropped == {2, 4} and kept == {6}
    assert all(s.capability == "reasoning" for s in history.sentinels if s.kind == "reasoning")
    assert "tool_call_id" not in probes["agent-result-name-only"].messages[2]
    assert "parameters" not in probes["agent-tool-without-parameters"].tools[0]["function"]  # type: ignore[index]
    assert len(probes["long-multi-turn"].generation_points) >= 6


def test_every_scenario_renders_on_chatml(good: Path) -> None:
    ctx = context(good, probes=tuple(scenario_probes()))
    failures = {p.id: ctx.rendered[p.id].error for p in ctx.probes if not ctx.rendered[p.id].ok}
    assert failures == {}
    for p in ctx.probes:
        text = ctx.rendered[p.id].text or ""
        missing = [s.text for s in p.sentinels if s.kind != "reasoning" and s.text not in text]
        assert missing == [], p.id


def test_mistral_ids_are_nine_alphanumerics() -> None:
    ids = [
        value
        for p in build_probes("mistral")
        for m in p.messages
        for value in [*(c["id"] for c in m.get("tool_calls") or []), m.get("tool_call_id")]
        if value is not None
    ]
    assert ids and all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids)
    for p in scenario_probes("mistral"):
        calls = [c["id"] for m in p.messages for c in m.get("tool_calls") or []]
        assert len(calls) == len(set(calls)), p.id


def test_prefix_stable_passes_chatml(good: Path) -> None:
    result = check(context(good), "prefix-stable")
    assert result.status == "pass"
    checked = int(re.search(r"\((\d+) points\)", result.message).group(1))  # type: ignore[union-attr]
    assert checked >= 60


def test_prefix_stable_names_earlier_reasoning_dropped_by_design(good: Path) -> None:
    """Reasoning of turns before a later user message, dropped as thinking models do: the format's design, info
    naming it and the per-turn fix; a warning when the template is to be trained on."""
    result = check(context(good, QWEN3_SHAPED), "prefix-stable")
    assert result.status == "info"
    assert result.probe == "agent-reasoning-history-tools"
    assert "message 2 (assistant) renders differently once the conversation goes past it" in result.message
    assert "the request before message 4" in result.message and "<think>" in result.message
    assert "drops the reasoning (<think>…</think>) of turns before the last user message" in result.message
    assert "prepare --per-turn" in result.message
    assert result.detail["where"] == "history" and result.detail["message_index"] == 2
    trained = check(context(good, QWEN3_SHAPED, training=True), "prefix-stable")
    assert trained.status == "warn" and "by design" in trained.message


def test_assistant_mask_warns_when_reasoning_is_dropped_within_one_exchange(good: Path) -> None:
    """A template that writes reasoning only on the last message drops it inside the agent loop too (a call turn
    followed by its tool result, no user message): not the thinking models' design, and that turn warns."""
    only_last = QWEN3_SHAPED.replace("and loop.index0 > ns.last_user", "and loop.last")
    result = check(context(good, only_last), "assistant-mask")
    loop = [e for e in result.detail["examples"] if e["message"].startswith("probe agent-reasoning-tool-loop:")]
    assert result.status == "warn" and loop
    assert loop[0]["severity"] == "warning" and "message 1 is not trained" in loop[0]["message"]
    assert "by design" not in loop[0]["message"]


def test_assistant_mask_names_turns_untrained_by_history_reasoning(good: Path) -> None:
    result = check(context(good, QWEN3_SHAPED), "assistant-mask")
    untrained = [e for e in result.detail["examples"] if "is not trained" in e["message"]]
    assert untrained and {e["severity"] for e in untrained} == {"info"}
    assert all("drops the reasoning" in e["message"] for e in untrained)


def test_prefix_stable_fails_when_the_generation_prompt_opens_a_block_the_turn_lacks(good: Path) -> None:
    thinking = GOOD.replace("'<|im_start|>assistant\\n' -}}{%- endif -%}", "'<|im_start|>assistant\\n<think>\\n' -}}")
    thinking += "{%- endif -%}"
    result = check(context(good, thinking), "prefix-stable")
    assert result.status == "fail"
    assert "the generation prompt before message" in result.message
    assert "the trained answer follows a prompt the model never sees at inference" in result.message
    assert result.detail["where"] == "generation prompt"


def test_prefix_stable_passes_tool_results_grouped_into_one_turn(good: Path) -> None:
    ctx = context(good, GROUPED_RESULTS)
    sequence = ctx.probe("agent-results-in-sequence")
    two_results = ctx.renderer.render(sequence.message_list()[:3], sequence.tool_list()).text or ""
    assert not (ctx.rendered[sequence.id].text or "").startswith(two_results)  # changes where no model writes
    assert check(ctx, "prefix-stable").status == "pass"


def test_prefix_stable_warns_when_a_header_depends_on_the_length(good: Path) -> None:
    counting = "{{- 'Turns: ' + (messages | length | string) + '\\n' -}}" + GOOD
    result = check(context(good, counting), "prefix-stable")
    assert result.status == "warn"
    assert "renders differently once the conversation goes past it" in result.message
    assert result.detail["token_position"] >= 0
