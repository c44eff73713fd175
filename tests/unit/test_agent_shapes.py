"""Shapes serving stacks send, and tool-call ids in the format a template requires: each on a small template shaped
like the published one (GOOD in tests/helpers.py, changed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_chat_templates.conversations.suite import build_probes

from ..helpers import GOOD, check, context, run

# Llama 3.1/3.2's shape: any message with a tool_calls key is taken for a call, and exactly one call is accepted.
SINGLE_CALL_ONLY = GOOD.replace(
    "{%- for c in m.tool_calls or [] -%}",
    "{%- if 'tool_calls' in m and m.tool_calls | length != 1 -%}"
    "{{- raise_exception('This model only supports single tool-calls at once!') -}}{%- endif -%}"
    "{%- for c in m.tool_calls or [] -%}",
)
# Mistral's shape: tool-call ids must be 9 letters and digits, and a tool result must carry one.
NINE_CHAR_IDS = GOOD.replace(
    "{%- for c in m.tool_calls or [] -%}",
    "{%- for c in m.tool_calls or [] -%}"
    "{%- if c.id is not defined or c.id | length != 9 -%}"
    "{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') -}}{%- endif -%}",
)


def test_a_template_that_refuses_empty_tool_calls_fails_renders(good: Path) -> None:
    result = check(context(good, SINGLE_CALL_ONLY), "renders")
    assert result.status == "fail" and result.probe == "agent-empty-tool-calls"
    assert "is refused by the template's raise_exception: This model only supports single tool-calls" in result.message
    assert "serving stacks send this shape as it is" in result.message
    assert "accept `tool_calls: []` as no tool calls" in (result.hint or "")


def test_nine_character_ids_are_generated_for_a_template_that_requires_them(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ctx = context(good, NINE_CHAR_IDS)
    assert ctx.id_format == "mistral"
    ids = [c["id"] for p in ctx.probes for m in p.messages for c in m.get("tool_calls") or []]
    assert ids and all(len(i) == 9 and i.isalnum() for i in ids)
    assert check(ctx, "renders").status == "pass"  # its tool handling is exercised, not refused
    template = tmp_path / "nine.jinja"
    template.write_text(NINE_CHAR_IDS)
    code, out, _ = run(capsys, "verify", str(good), "--template", str(template), "--only", "renders")
    assert code == 0
    assert "note: probe tool-call ids have 9 letters and digits: the template tests for that length" in out
    assert ctx.capabilities["tool_calls"] == "yes"
    # With OpenAI-format ids the same template refuses every tool probe: its tool handling would go unchecked
    refused = check(context(good, NINE_CHAR_IDS, build_probes("openai")), "renders")
    assert refused.status == "info" and "Tool call IDs should be alphanumeric strings with length 9" in refused.message
