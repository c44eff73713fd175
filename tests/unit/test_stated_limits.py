"""A crash that is a template's stated limit: a tool-call turn reaching a template with no tool-call format, a
refusal whose own message raises, content parts a string-only template never reads (even when another role's parts
show up as the list's text), and an engine failing on parts a template writes as data. Each rule has a broken template
that still fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hf_chat_templates.conversations.probes import core_probes
from hf_chat_templates.template.engines.minijinja_tgi import TgiEngine
from hf_chat_templates.template.rendering import Rendered
from hf_chat_templates.verification.checks import engines as engine_check
from hf_chat_templates.verification.checks.refusals import _stringified
from hf_chat_templates.verification.runner import run_checks

from ..helpers import check, context

# Qwen2-VL's shape: no tool format at all (tools and tool_calls never read), content as a string or a list of parts.
# A tool-call turn's content None, as OpenAI sends it and TGI passes it, is iterated as parts and raises.
NO_TOOLS = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' -}}"
    "{%- if m.content is string -%}{{- m.content -}}{%- else -%}{%- for p in m.content -%}"
    "{%- if 'text' in p -%}{{- p.text -}}{%- endif -%}{%- endfor -%}{%- endif -%}{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# The same template with a tool-call format: iterating content None in a call turn is its own crash.
WITH_CALLS = NO_TOOLS.replace(
    "{{- '<|im_end|>\\n' -}}",
    "{%- for c in m.tool_calls or [] -%}{{- '<tool_call>' + c.function.name + '</tool_call>' -}}{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}",
)


def _probes(*ids: str) -> tuple[Any, ...]:
    return tuple(p for p in core_probes() if p.id in ids)


def _engine_fails(ctx: Any, *ids: str) -> list[Any]:
    """engine-parity's findings for an engine that cannot render the probes `ids` (the unit tier runs no JS)."""
    error = "Error: Expected iterable or object type in for loop: got NullValue"
    outs = {i: Rendered(None, error) for i in ids}
    findings, _ = engine_check._failures(ctx, TgiEngine(), {error: list(ids)}, outs)
    return findings


def failing(ctx: Any) -> dict[str, str]:
    return {r.id: r.message for r in run_checks(ctx) if r.status == "fail"}


def test_a_template_without_a_tool_format_crashing_on_a_call_turn_states_a_limit(good: Path) -> None:
    result = check(context(good, NO_TOOLS), "renders")
    assert result.status == "info", result.message
    crash = next(f for f in result.findings if "drops content None" in f.text)
    assert crash.severity == "info"
    assert "the template has no tool-call format (it never reads tools or tool_calls)" in crash.text
    # an engine that passes content None as given (transformers.js) fails on the call turn: info, its format
    (finding,) = _engine_fails(context(good, NO_TOOLS, probes=_probes("tool-call", "plain")), "tool-call")
    assert finding.severity == "info" and "cannot render it" in finding.text
    assert "the template has no tool-call format" in finding.text
    # a failure that also hits a probe without calls is no tool-call limit
    (finding,) = _engine_fails(context(good, NO_TOOLS, probes=_probes("tool-call", "plain")), "tool-call", "plain")
    assert (finding.severity or "error") == "error" and "no tool-call format" not in finding.text


def test_a_template_with_a_tool_format_crashing_on_content_none_stays_an_error(good: Path) -> None:
    result = check(context(good, WITH_CALLS), "renders")
    assert result.status == "fail", result.message
    crash = next(f for f in result.findings if "drops content None" in f.text)
    assert crash.severity is None or crash.severity == "error"
    assert "TypeError" in crash.text and "no tool-call format" not in crash.text
    assert crash.hint is not None and "message.content" in crash.hint
    (finding,) = _engine_fails(context(good, WITH_CALLS, probes=_probes("tool-call")), "tool-call")
    assert (finding.severity or "error") == "error" and "no tool-call format" not in finding.text


# Apertus's shape: content parts refused by raise_exception, whose message concatenates the list it refuses.
REFUSES_PARTS = (
    "{%- for m in messages -%}{%- if m.content is not string -%}"
    "{{- raise_exception('Invalid content (' + m.role + '): ' + m.content + ', expected a string') -}}{%- endif -%}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# Refuses tools in words, and crashes on parts outside its refusal: the crash is no refusal.
CRASHES_BESIDE = (
    "{%- if tools -%}{{- raise_exception('No tools, got ' + tools | length | string) -}}{%- endif -%}"
    "{%- for m in messages -%}{%- for p in m.content -%}{{- p.text + 1 -}}{%- endfor -%}{%- endfor -%}"
)


def test_a_refusal_whose_message_raises_is_the_refusal_it_is(good: Path) -> None:
    result = check(context(good, REFUSES_PARTS), "renders")
    assert result.status == "info", result.message
    parts = next(f for f in result.findings if f.probe == "content-parts")
    assert parts.severity == "info"
    assert parts.text.startswith(
        "probe content-parts (user content as a list of text parts): the template refuses content given as a list "
        "of parts (raise_exception: Invalid content (user): [{'type': 'text'"
    )
    assert "building that message raised TypeError: can only concatenate str" in parts.text


def test_a_crash_outside_a_refusals_message_stays_an_error(good: Path) -> None:
    result = check(context(good, CRASHES_BESIDE, probes=_probes("content-parts")), "renders")
    assert result.status == "fail", result.message
    assert "does not render in transformers' sandbox: TypeError" in result.message


def test_only_the_refusals_argument_is_rewritten_strings_kept() -> None:
    template = "{{ raise_exception('a + (b' + x + \"c)\\\" + d\" + (y + z)) }}{{ 'k' + v }}"
    assert _stringified(template) == "{{ raise_exception('a + (b' ~ x ~ \"c)\\\" + d\" ~ (y ~ z)) }}{{ 'k' + v }}"


# Llama 2's shape: the system content goes through `| trim` (a list becomes its repr), the user content is
# concatenated; nothing reads a part. A user's parts raise: its stated string-only input.
LLAMA2_SHAPE = (
    "{%- if messages[0].role == 'system' -%}{%- set sys = '<<SYS>>\\n' + messages[0].content | trim + '\\n<</SYS>>"
    "\\n\\n' -%}{%- set messages = messages[1:] -%}{%- else -%}{%- set sys = '' -%}{%- endif -%}"
    "{%- for m in messages -%}{%- set c = sys + m.content if loop.first else m.content -%}"
    "{%- if m.role == 'user' -%}{{- '[INST] ' + c | trim + ' [/INST]' -}}"
    "{%- elif m.role == 'assistant' -%}{{- ' ' + c | trim + '</s>' -}}{%- endif -%}{%- endfor -%}"
)


def test_parts_a_template_never_reads_are_its_limit_though_a_repr_shows_their_text(good: Path) -> None:
    ctx = context(good, LLAMA2_SHAPE)
    assert ctx.capabilities["content_parts"] == "yes"  # the system's parts show up, as the list's repr
    result = check(ctx, "renders")
    parts = next(f for f in result.findings if f.probe == "content-parts")
    assert parts.severity == "info", parts.text
    assert "the template never reads content given as a list of parts and raises on them (TypeError" in parts.text
    # the repr it writes for the system's parts is still caught
    assert check(ctx, "values-faithful").status == "fail"


def test_the_bundled_baseline_stays_silent(good: Path) -> None:
    assert failing(context(good)) == {}


# Vicuna's shape: content written with `| trim`, which transformers applies to a list as its repr.
TRIMS_CONTENT = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content | trim + '<|im_end|>\\n' -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def test_an_engine_failing_on_parts_a_template_writes_as_data_is_the_same_defect(good: Path) -> None:
    """values-faithful reports the list written as data (the defect); an engine that cannot apply `trim` to the
    list fails on the same probes: info pointing at it, not a second error. A failure on a probe without parts, or
    on a template that writes the parts' text, stays an error."""
    ctx = context(good, TRIMS_CONTENT, probes=_probes("content-parts", "plain"))
    assert "'type': 'text'" in (ctx.rendered["content-parts"].text or "")
    (finding,) = _engine_fails(ctx, "content-parts")
    assert finding.severity == "info" and "the template does not read content parts" in finding.text
    assert finding.hint is not None and "p.text" in finding.hint
    (finding,) = _engine_fails(ctx, "content-parts", "plain")
    assert (finding.severity or "error") == "error" and "content parts" not in finding.text
    reads_parts = context(good, NO_TOOLS, probes=_probes("content-parts"))
    (finding,) = _engine_fails(reads_parts, "content-parts")
    assert (finding.severity or "error") == "error" and "content parts" not in finding.text


# OpenChat's shape: user content concatenated (parts raise: string content is the limit), the system prompt through
# `| trim` (parts written as the list's repr, silently).
SYSTEM_TRIMMED = (
    "{%- if messages[0].role == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0].content | trim + '<|im_end|>\\n' -}}"
    "{%- set messages = messages[1:] -%}{%- endif -%}"
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def test_parts_written_as_data_where_the_template_refuses_them_elsewhere_warn(good: Path) -> None:
    """Another role's parts written as the list's repr instead of refused: a warning naming the limit; where the
    template reads parts (the content-parts probe renders its text), the same repr is an error."""
    result = check(context(good, SYSTEM_TRIMMED), "values-faithful")
    system = [e for e in result.detail["examples"] if e["probe"] == "parts-system"]
    assert system and system[0]["severity"] == "warning"
    assert "refuses content parts elsewhere" in system[0]["message"] and "written as data" in system[0]["message"]
    reads_parts = SYSTEM_TRIMMED.replace(
        "+ m.content +", "+ (m.content if m.content is string else m.content | map(attribute='text') | join) +"
    )
    strict = check(context(good, reads_parts), "values-faithful")
    errors = [e for e in strict.detail.get("examples", []) if e["probe"] == "parts-system"]
    assert strict.status == "fail" and errors and errors[0]["severity"] == "error"
