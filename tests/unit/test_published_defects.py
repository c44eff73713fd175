"""Defects of published templates (tests/data/unseen) that only show with some data or some engine, each caught by a
general rule: on a small template broken the same way, on the published template, and never on a legitimate one
(tests/data/templates, the bundled families' corrected variants, the ChatML baseline).

- values-faithful: a Python literal (`True`, `None`, `{'a': 1}`) in an XML parameter, where the format writes JSON
  (Qwen3-Coder, Qwen3.5, Seed-OSS `| string`); a tool result's text parts written as each part's dict repr (GLM-4.7);
  `reasoning_content: null` written as `None` in a turn after the first answer (Kimi K2 Thinking);
- nothing-dropped: content parts of which only the first is written (Devstral `content[0]['text']`);
- completion-matches-content: the content of a tool-call turn written `| trim` (Qwen3-Coder);
- renders: a probe transformers renders only because it drops content None (Ministral 3 `content | length`);
- assistant-mask: a call turn never closed, seen only with content None kept (DeepSeek V2.5).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_chat_templates import list_families
from hf_chat_templates.verification.checks.completion import _trimmed_beside_calls
from hf_chat_templates.verification.checks.content_kept import raises_on_none, unclosed_calls
from hf_chat_templates.verification.checks.nulls import null_literals
from hf_chat_templates.verification.context import VerifyContext
from hf_chat_templates.verification.results import CheckResult

from ..helpers import GOOD, REPO_ROOT, check, context, corpus_manifest, corpus_names, corpus_templates

UNSEEN = REPO_ROOT / "tests" / "data" / "unseen"
CONTENT = "{%- if m.content is string -%}{{- m.content -}}"
PARTS = "{%- for p in m.content -%}{{- p.text -}}{%- endfor -%}"
CALL = (
    "{{- '<tool_call>' + c.function.name + ' ' + (c.function.arguments if c.function.arguments is string "
    "else c.function.arguments | tojson) + '</tool_call>' -}}"
)


def published(name: str) -> str:
    return (UNSEEN / name / "chat_template.jinja").read_text(encoding="utf-8")


def errors(result: CheckResult, probe: str | None = None) -> list[str]:
    return [
        e["message"]
        for e in result.detail.get("examples", [])
        if e["severity"] == "error" and (probe is None or e["probe"] == probe)
    ]


# ---- values-faithful: Python literals in XML parameters ----------------------------------------------------------

XML_CALL = (
    "{{- '<tool_call>\\n<function=' + c.function.name + '>\\n' -}}"
    "{%- if c.function.arguments is string -%}{{- c.function.arguments -}}{%- else -%}"
    "{%- for k, v in c.function.arguments | items -%}"
    "{{- '<parameter=' + k + '>\\n' -}}{{- VALUE -}}{{- '\\n</parameter>\\n' -}}"
    "{%- endfor -%}{%- endif -%}{{- '</function>\\n</tool_call>' -}}"
)


def test_python_literals_in_xml_parameters_fail(good: Path) -> None:
    broken = GOOD.replace(CALL, XML_CALL.replace("VALUE", "v | string"))
    said = errors(check(context(good, broken), "values-faithful"), "values-typed-arguments")
    assert any(
        "the tool-call argument 'exact' of qz1toolname (XML parameters) is true, written as the Python literal "
        "'True' where the syntax writes JSON ('true')"
        in m
        and "<parameter=⟨here⟩exact>\\nTrue" in m
        for m in said
    ), said
    assert any("argument 'limit'" in m and "Python literal 'None'" in m for m in said), said


def test_json_values_in_xml_parameters_pass(good: Path) -> None:
    fixed = GOOD.replace(CALL, XML_CALL.replace("VALUE", "v if v is string else v | tojson"))
    assert errors(check(context(good, fixed), "values-faithful")) == []


@pytest.mark.parametrize("name", ["qwen3-coder", "qwen3.5-4b", "seed-oss"])
def test_published_xml_templates_writing_python_literals_fail(good: Path, name: str) -> None:
    said = errors(check(context(good, published(name)), "values-faithful"), "values-typed-arguments")
    assert any("is null, written as the Python literal 'None' where the syntax writes JSON" in m for m in said), said


def test_seed_oss_writes_a_dict_argument_as_its_python_repr(good: Path) -> None:
    said = errors(check(context(good, published("seed-oss")), "values-faithful"), "values-nested-arguments")
    assert any(
        "argument 'filters' of qz1toolname (XML parameters) is an object, written as the Python literal" in m
        for m in said
    ), said


# ---- values-faithful: text parts written as data, in any role ----------------------------------------------------

TOOL_PARTS_AS_REPR = GOOD.replace(
    "{%- elif m.content -%}",
    "{%- elif m.role == 'tool' -%}{%- for p in m.content -%}{{- p -}}{%- endfor -%}{%- elif m.content -%}",
)


def test_tool_result_parts_written_as_their_repr_fail(good: Path) -> None:
    said = errors(check(context(good, TOOL_PARTS_AS_REPR), "values-faithful"), "parts-tool-result")
    assert said and said[0].startswith(
        "probe parts-tool-result: message 2: the tool result is a list of text parts, written as data (the list "
        "itself, or each part, as JSON or a Python repr), not as the parts' text"
    ), said
    assert "{⟨here⟩'type':·'text'" in said[0]


def test_glm_47_writes_a_tool_results_parts_as_dict_reprs(good: Path) -> None:
    said = errors(check(context(good, published("glm-4.7-flash")), "values-faithful"), "parts-tool-result")
    assert said and "message 2: the tool result is a list of text parts, written as data" in said[0], said


# ---- values-faithful: reasoning_content null in a later turn -----------------------------------------------------

LATER_REASONING = GOOD.replace(
    "{%- if m.content is string -%}",
    "{%- if m.role == 'assistant' and loop.index0 > 1 -%}"
    "{{- '<think>' ~ m.get('reasoning_content', '') ~ '</think>' -}}{%- endif -%}"
    "{%- if m.content is string -%}",
)


def test_a_null_reasoning_written_in_a_later_turn_fails(good: Path) -> None:
    found = [f for f in null_literals(context(good, LATER_REASONING)) if f.probe == "reasoning-null"]
    assert found and found[0].severity == "error"
    assert "message 3's reasoning_content is null, and the template writes the literal None" in found[0].text
    assert "<think>None</think>" in found[0].text.replace("⟨here⟩", "")


def test_kimi_k2_thinking_writes_none_after_the_first_answer(good: Path) -> None:
    said = errors(check(context(good, published("kimi-k2-thinking")), "values-faithful"), "reasoning-null")
    assert said and "message 3's reasoning_content is null" in said[0], said
    assert "<think>None</think>" in said[0].replace("⟨here⟩", "")


# ---- nothing-dropped: only the first text part -------------------------------------------------------------------

FIRST_PART_ONLY = GOOD.replace(
    PARTS,
    "{{- m.content[0].text if m.role != 'user' else '' -}}"
    + PARTS.replace("{%- for p in m.content -%}", "{%- for p in (m.content if m.role == 'user' else []) -%}"),
)


def test_keeping_only_the_first_text_part_drops_the_others(good: Path) -> None:
    result = check(context(good, FIRST_PART_ONLY), "nothing-dropped")
    said = errors(result, "parts-assistant") + errors(result, "parts-system")
    assert any(
        m.startswith("probe parts-assistant: the content part of message 1 ('qz3part') is dropped") for m in said
    )
    assert any(m.startswith("probe parts-system: the content part of message 0 ('qz2part') is dropped") for m in said)


def test_devstral_keeps_only_the_first_text_part(good: Path) -> None:
    result = check(context(good, published("devstral-small-2507")), "nothing-dropped")
    assert result.status == "fail"
    assert any("('qz3part') is dropped (assistant content as two text parts)" in m for m in errors(result)), result


# ---- completion-matches-content: content beside calls trimmed ----------------------------------------------------

TRIMMED_BESIDE_CALLS = GOOD.replace(
    "{%- if m.content is string -%}{{- m.content -}}",
    "{%- if m.content is string and m.tool_calls -%}{{- m.content | trim -}}"
    "{%- elif m.content is string -%}{{- m.content -}}",
)


def test_content_beside_calls_written_trimmed_fails(good: Path) -> None:
    result = check(context(good, TRIMMED_BESIDE_CALLS), "completion-matches-content")
    said = errors(result, "agent-call-content-whitespace")
    assert said and said[0].startswith(
        "probe agent-call-content-whitespace: message 1: the content beside the tool calls is written trimmed: its "
        "trailing '··\\n' whitespace is not trained"
    ), said
    assert "qz3content.⟨here⟩<tool_call>" in said[0]


def test_qwen3_coder_trims_the_content_beside_its_calls(good: Path) -> None:
    said = errors(check(context(good, published("qwen3-coder")), "completion-matches-content"))
    assert any(
        "agent-call-content-whitespace: message 1: the content beside the tool calls is written trimmed" in m
        for m in said
    ), said


# ---- renders: content None kept -----------------------------------------------------------------------------------

LENGTH_OF_CONTENT = GOOD.replace(
    "{%- if m.content is string -%}",
    "{%- if m.role == 'assistant' and m['content'] | length == 0 -%}{%- elif m.content is string -%}",
)


def test_a_template_that_raises_on_content_none_fails_renders(good: Path) -> None:
    ctx = context(good, LENGTH_OF_CONTENT)
    assert ctx.rendered["tool-call"].ok
    said = errors(check(ctx, "renders"), "tool-call")
    assert said and said[0].startswith(
        "probe tool-call (an OpenAI-format tool call, arguments as a dict) renders in transformers only because it "
        "drops content None: with message 1's content None kept"
    ), said
    assert "TypeError" in said[0]


def test_ministral_3_raises_on_content_none(good: Path) -> None:
    said = errors(check(context(good, published("ministral-3-14b-reasoning")), "renders"), "tool-call")
    assert said and "renders in transformers only because it drops content None" in said[0], said


# ---- assistant-mask: a call turn never closed, with content None kept ---------------------------------------------

UNCLOSED_SINGLE_CALL = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' and m['content'] is none -%}"
    "{{- '<|im_start|>assistant\\n' -}}{%- for c in m.tool_calls -%}" + CALL + "{%- endfor -%}"
    "{%- if m.tool_calls | length > 1 -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}{{- '<|im_start|>' + m.role + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def test_a_single_call_never_closed_fails_assistant_mask(good: Path) -> None:
    ctx = context(good, UNCLOSED_SINGLE_CALL)
    assert not ctx.rendered["tool-call"].ok
    said = errors(check(ctx, "assistant-mask"), "tool-call")
    assert said and said[0].startswith(
        "probe tool-call: message 1's tool-call turn is never closed: no stop token (<|im_end|>) between its call "
        "and message 2 when the probe is rendered with content None kept"
    ), said
    closed = UNCLOSED_SINGLE_CALL.replace("m.tool_calls | length > 1", "true")
    assert unclosed_calls(context(good, closed)) == []


def test_deepseek_v25_never_closes_a_single_call(good: Path) -> None:
    # its stop token is no token of the toy vocabulary, which assistant-mask reports first: the rule alone
    ctx = context(good, published("deepseek-v2.5"), stop_tokens=["<｜end▁of▁sentence｜>"])
    said = [f.text for f in unclosed_calls(ctx) if f.probe == "tool-call-json-arguments"]
    assert said and "message 1's tool-call turn is never closed: no stop token (<｜end▁of▁sentence｜>)" in said[0]


# ---- legitimate templates stay silent -----------------------------------------------------------------------------


def _legitimate() -> list[tuple[str, str, frozenset[str]]]:
    """(name, template, the checks it is known to fail): the baseline, tests/data/templates (whose known failures
    may be the same defects, said again), the bundled families' corrected variants."""
    found = [("chatml", GOOD, frozenset[str]())]
    for name in corpus_names():
        known = frozenset(corpus_manifest(name).get("known_failures", {}))
        for kind, path in corpus_templates(name).items():
            found.append((f"{name}:{kind}", path.read_text(encoding="utf-8"), known))
    for family in list_families():
        if "corrected" in family.variants:
            found.append((f"{family.name}:corrected", family.variants["corrected"].template, frozenset()))
    return found


def _new_rule_findings(ctx: VerifyContext) -> dict[str, list[str]]:
    """What the rules above say of a template, by the check that says it."""
    values = check(ctx, "values-faithful").detail.get("examples", [])
    return {
        "completion-matches-content": [f.text for f in _trimmed_beside_calls(ctx)],
        "renders": [f.text for f in raises_on_none(ctx)],
        "assistant-mask": [f.text for f in unclosed_calls(ctx)],
        "values-faithful": [f.text for f in null_literals(ctx) if f.probe == "reasoning-null"]
        + [
            e["message"]
            for e in values
            if ("Python literal" in e["message"] and "XML parameters" in e["message"])
            or ("written as data" in e["message"] and not e["probe"].startswith("values-") and e["severity"] == "error")
        ],
    }


LEGITIMATE = _legitimate()


@pytest.mark.parametrize(("name", "template", "known"), LEGITIMATE, ids=[n for n, _, _ in LEGITIMATE])
def test_legitimate_templates_stay_silent(good: Path, name: str, template: str, known: frozenset[str]) -> None:
    said = {k: v for k, v in _new_rule_findings(context(good, template)).items() if v and k not in known}
    assert said == {}, name
