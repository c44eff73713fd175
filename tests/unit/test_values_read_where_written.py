"""`values-faithful` reads tool calls where a template writes them: never in the tools' declarations (Granite's vLLM
template writes each tool as `"description": "name(city: str, …)"`, which is no call); and it reads the probes that
raise only on their None content as rendered with the None kept (or given as ""), so a crash on the content does not
hide arguments encoded twice (DeepSeek's templates write string arguments `| tojson`)."""

from __future__ import annotations

from pathlib import Path

from hf_chat_templates.conversations.suite import build_probes
from hf_chat_templates.verification.results import CheckResult

from ..helpers import GOOD
from .test_fidelity import CALL, chatml, values

# Each tool declared by a Python signature, as Granite's vLLM tool template writes its function library.
SIGNATURES = (
    "{%- for t in tools or [] -%}{{- '{\"description\": \"' + t.function.name + '(' -}}"
    "{%- for k, v in t.function.parameters.properties | items -%}{{- k + ': ' + v.type -}}"
    "{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}{%- endfor -%}{{- ')\"}\\n' -}}{%- endfor -%}"
)
NO_TOOLS_BLOCK = "{%- if tools -%}{{- '<|im_start|>tools\\n' + tools | tojson + '<|im_end|>\\n' -}}{%- endif -%}"


# every probe: a call turn with content beside its calls renders, so the template is known to read tool calls
ALL = tuple(build_probes())


def _errors(result: CheckResult) -> list[str]:
    return [e["message"] for e in result.detail.get("examples", []) if e["severity"] == "error"]


def test_a_tool_declared_as_a_python_signature_is_not_read_as_a_call(good: Path) -> None:
    # the calls themselves are dropped (nothing-dropped says so): only the declarations name the tool
    template = chatml(call="").replace(NO_TOOLS_BLOCK, SIGNATURES)
    assert "(city: string" in (values(good, template)[1].rendered["values-string-arguments"].text or "")
    result, _ = values(good, template)
    assert not any("Python call" in m for m in _errors(result)), result.message


def test_a_broken_python_call_after_the_declarations_still_fails(good: Path) -> None:
    unquoted = (
        "{{- '[' + c.function.name + '(' -}}{%- for k, v in c.function.arguments | items -%}"
        "{{- k + '=' + v | string -}}{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}{%- endfor -%}{{- ')]' -}}"
    )
    template = chatml(call=unquoted).replace(NO_TOOLS_BLOCK, SIGNATURES)
    result, _ = values(good, template)
    assert result.status == "fail", result.message
    called = [m for m in _errors(result) if "Python call" in m and "probe values-typed-arguments" in m]
    assert called and "assistant\\n[qz1toolname(⟨here⟩city=qz3argument" in called[0], called


# DeepSeek's way: the call branch picked by `content is none`, the content concatenated otherwise, arguments through
# `| tojson` whatever they are. transformers drops the None, so every call probe raises on the missing content.
TOJSON_CALL = "{{- '<tool_call>' + c.function.name + ' ' + c.function.arguments | tojson + '</tool_call>' -}}"
NONE_TESTED = (
    "{%- if m.content is none -%}"
    + TOJSON_CALL
    + "{%- else -%}"
    + TOJSON_CALL.replace("{{- ", "{{- m.content + ")
    + "{%- endif -%}"
)
DEEPSEEK_LIKE = GOOD.replace(
    "{%- for c in m.tool_calls or [] -%}" + CALL, "{%- for c in m.tool_calls or [] -%}" + NONE_TESTED
).replace("{%- if m.content is string -%}", "{%- if m.tool_calls -%}{%- elif m.content is string -%}")


def test_string_arguments_encoded_twice_are_found_where_the_none_content_makes_the_template_raise(good: Path) -> None:
    assert DEEPSEEK_LIKE != GOOD
    result, ctx = values(good, DEEPSEEK_LIKE, ALL)
    assert not ctx.rendered["values-string-arguments"].ok
    twice = [m for m in _errors(result) if m.startswith("probe values-string-arguments")]
    assert twice, result.message
    assert "(rendered with the None content kept, as engines that pass messages as given send it;" in twice[0]
    assert "message 1: the tool-call argument" in twice[0] and "encoded twice" in twice[0]


def test_arguments_written_as_given_stay_silent_where_the_template_raises(good: Path) -> None:
    template = DEEPSEEK_LIKE.replace(
        "c.function.arguments | tojson",
        "(c.function.arguments if c.function.arguments is string else c.function.arguments | tojson)",
    )
    result, ctx = values(good, template, ALL)
    assert not ctx.rendered["values-string-arguments"].ok
    assert not any("values-string-arguments" in m or "values-typed-arguments" in m for m in _errors(result)), (
        result.message
    )


def test_a_template_that_raises_on_none_kept_too_is_read_with_empty_content(good: Path) -> None:
    # DeepSeek-R1's way: `'</think>' in content` raises on None as well; content "" renders
    template = DEEPSEEK_LIKE.replace(
        "{%- for c in m.tool_calls or [] -%}",
        "{%- if m.role == 'assistant' and '</think>' in m.content -%}{%- endif -%}{%- for c in m.tool_calls or [] -%}",
    )
    result, _ = values(good, template, ALL)
    twice = [m for m in _errors(result) if m.startswith("probe values-string-arguments")]
    assert twice and '(rendered with the None content given as "";' in twice[0], result.message
