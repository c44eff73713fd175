"""Each tool call's arguments are read back from the rendering, in the syntax the template writes (JSON, a Python
call, XML parameters, a template's own delimiters), and must come back as the data says: once each, with their type,
quoting and escaping. Published templates (tests/data/call_syntax) fail where they truly lose or garble a value
and pass where they do not; a call no syntax reads is info, never an error. Text beside tool calls dropped is a
`nothing-dropped` error in every template shape that drops it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_chat_templates.verification.call_differences import differences
from hf_chat_templates.verification.call_syntax import Reading, Unreadable, read_call

from ..helpers import GOOD, check, context

CALLS = Path(__file__).resolve().parent.parent / "data" / "call_syntax"
ARGUMENTS = {"city": "qz1argument", "exact": True, "limit": None, "days": 3, "filters": {"unit": "metric"}}


def _read(text: str) -> Reading | Unreadable | None:
    return read_call(text, 0, len(text), "qz0toolname", "city", "qz1argument")


def _wrong(text: str, arguments: dict = ARGUMENTS) -> dict[str, str]:
    reading = _read(text)
    assert isinstance(reading, Reading), reading
    return dict(differences(reading, arguments))


# ---- the readers --------------------------------------------------------------------------------------------------

GOOD_CALLS = {
    "hermes-json": '<tool_call>\n{"name": "qz0toolname", "arguments": {"city": "qz1argument", "exact": true, '
    '"limit": null, "days": 3, "filters": {"unit": "metric"}}}\n</tool_call>',
    "kimi-delimiters": '<|tool_call_begin|>functions.qz0toolname:0<|tool_call_argument_begin|>{"city": "qz1argument",'
    ' "exact": true, "limit": null, "days": 3, "filters": {"unit": "metric"}}<|tool_call_end|>',
    "deepseek-fenced": '<｜tool▁call▁begin｜>function<｜tool▁sep｜>qz0toolname\n```json\n{"city": "qz1argument", '
    '"exact": true, "limit": null, "days": 3, "filters": {"unit": "\\u006detric"}}\n```<｜tool▁call▁end｜>',
    "mistral-args": '[TOOL_CALLS]qz0toolname[ARGS]{"city":"qz1argument","exact":true,"limit":null,"days":3,'
    '"filters":{"unit":"metric"}}</s>',
    "pythonic": "[qz0toolname(city='qz1argument', exact=True, limit=None, days=3, filters={'unit': 'metric'})]",
    "qwen3-coder-xml": "<tool_call>\n<function=qz0toolname>\n<parameter=city>\nqz1argument\n</parameter>\n"
    "<parameter=exact>\ntrue\n</parameter>\n<parameter=limit>\nnull\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
    '<parameter=filters>\n{"unit": "metric"}\n</parameter>\n</function>\n</tool_call>',
    "minimax-xml": '<invoke name="qz0toolname">\n<parameter name="city">qz1argument</parameter>\n'
    '<parameter name="exact">true</parameter>\n<parameter name="limit">null</parameter>\n'
    '<parameter name="days">3</parameter>\n'
    '<parameter name="filters">{"unit": "metric"}</parameter>\n</invoke>',
    "gemma-call": '<|tool_call>call:qz0toolname{city:<|"|>qz1argument<|"|>,days:3,exact:true,'
    'filters:{unit:<|"|>metric<|"|>},limit:null}<tool_call|>',
    "glm-xml": "<tool_call>qz0toolname\n<arg_key>city</arg_key>\n<arg_value>qz1argument</arg_value>\n<arg_key>exact"
    "</arg_key>\n<arg_value>true</arg_value>\n<arg_key>limit</arg_key>\n<arg_value>null</arg_value>\n<arg_key>days"
    '</arg_key>\n<arg_value>3</arg_value>\n<arg_key>filters</arg_key>\n<arg_value>{"unit": "metric"}</arg_value>\n'
    "</tool_call>",
}


@pytest.mark.parametrize("text", list(GOOD_CALLS.values()), ids=list(GOOD_CALLS))
def test_every_syntax_gives_the_arguments_back(text: str) -> None:
    assert _wrong(text) == {}


@pytest.mark.parametrize(
    ("text", "key", "says"),
    [
        ('{"name": "qz0toolname", "arguments": "{\\"city\\": \\"qz1argument\\"}"}', None, "twice"),
        ('{"city": "qz1argument", "days": "3"}', "days", "the number 3, written as the string '3'"),
        ('{"city": "qz1argument", "exact": "true"}', "exact", "true, written as the string 'true'"),
        ('{"city": "qz1argument", "filters": "{\\"unit\\": \\"metric\\"}"}', "filters", "its JSON inside a string"),
        ('{"city": "qz1argument", "unit": "metric"}', "filters", "missing from the call (the call has 'unit'"),
        ('{"city": "qz1argument", "days": 3, "days": 3}', "days", "written twice"),
        ("[qz0toolname(city=qz1argument)]", "city", "a string written without quotes"),
        ("[qz0toolname(city='qz1argument', exact=true)]", "exact", "JSON's 'true' inside a Python call"),
        ('call:qz0toolname{city:<|"|>qz1argument<|"|>,limit:None}', "limit", "the Python literal 'None'"),
        ('<invoke name="qz0toolname">\n</invoke>', "city", "missing from the call"),
        ('<function=qz0toolname>\n<parameter=city>\n"qz1argument"\n</parameter>\n</function>', "city", "the string"),
        (
            "<function=qz0toolname>\n<parameter=exact>\nTrue\n</parameter>\n</function>",
            "exact",
            "Python literal 'True'",
        ),
        ("<function=qz0toolname><parameter=limit>None</parameter></function>", "limit", "Python literal 'None'"),
        (
            "<function=qz0toolname><parameter=filters>{'unit': 'metric'}</parameter></function>",
            "filters",
            "an object, written as the Python literal \"{'unit': 'metric'}\"",
        ),
    ],
    ids=[
        "double-encoded",
        "number-as-string",
        "bool-as-string",
        "object-as-string",
        "object-flattened",
        "json-twice",
        "unquoted-string",
        "json-literal-in-python",
        "python-literal-in-gemma",
        "xml-dropped",
        "xml-quoted-string",
        "xml-python-true",
        "xml-python-none",
        "xml-python-dict",
    ],
)
def test_each_defect_is_named(text: str, key: str | None, says: str) -> None:
    arguments = {k: v for k, v in ARGUMENTS.items() if k == "city" or k in text or k == key}
    reading = _read(text)
    assert isinstance(reading, Reading), reading
    if key is None:
        assert reading.encoded_twice
        return
    wrong = dict(differences(reading, arguments))
    assert says in wrong[key], wrong


@pytest.mark.parametrize(
    ("text", "syntax", "says"),
    [
        ('{"city": "qz1argument""days": 3}', "JSON", "Expecting ',' delimiter"),
        ('[qz0toolname(city="Say "hi" qz1argument")]', "Python call", "does not parse as a Python call"),
        ("[qz0toolname(city='qz1argument' days=3)]", "Python call", "does not parse as a Python call"),
        ('call:qz0toolname{{"city": "qz1argument"}}', "Gemma call", 'a key expected, found \'{"city"'),
    ],
    ids=["json-no-separator", "python-unescaped-quotes", "python-no-separator", "json-inside-gemma"],
)
def test_a_syntax_that_does_not_parse_says_where(text: str, syntax: str, says: str) -> None:
    found = _read(text)
    assert isinstance(found, Unreadable) and found.syntax == syntax and says in found.reason, found


def test_a_syntax_no_reader_knows_is_not_read() -> None:
    assert _read("qz0toolname -> city: qz1argument") is None
    assert _read("call:qz0toolname{city:<q>qz1argument<q>}") is None  # Gemma's braces, other quotes


# ---- published templates ------------------------------------------------------------------------------------------


def _values(good: Path, name: str) -> tuple:
    ctx = context(good, (CALLS / f"{name}.jinja").read_text(encoding="utf-8"))
    result = check(ctx, "values-faithful")
    return result, [e for e in result.detail.get("examples", []) if e["severity"] == "error"]


def test_minimax_m2_drops_json_string_arguments(good: Path) -> None:
    result, errors = _values(good, "minimax-m2")
    assert result.status == "fail" and result.probe == "values-string-arguments"
    assert {e["probe"] for e in errors} == {"values-string-arguments"}
    assert result.message.startswith(
        "probe values-string-arguments: message 1: the tool-call argument 'city' of qz1toolname (XML parameters) is "
        'missing from the call (the data says "qz3argument")'
    )
    assert '<invoke·name="qz1toolnam' in result.message
    assert "in XML parameters a string as its text" in (result.hint or "")


def test_mistral_small_double_encodes_arguments(good: Path) -> None:
    result, errors = _values(good, "mistral-small-3.1")
    # and a tool result's text parts written as their list's repr (`content|string`)
    assert result.status == "fail" and {e["probe"] for e in errors} == {"values-string-arguments", "parts-tool-result"}
    assert "the tool-call argument 'city' is encoded twice (arguments given as the JSON string" in result.message


def test_llama_32_pythonic_writes_strings_without_quotes(good: Path) -> None:
    result, errors = _values(good, "llama-3.2-pythonic")
    assert result.status == "fail"
    said = [e["message"] for e in errors]
    assert any(
        "the tool-call argument 'city' of qz1toolname (Python call) is a string written without quotes" in m
        and "[qz1toolname(⟨here⟩city=qz3argument" in m
        for m in said
    ), said
    assert any(
        "values-string-arguments: message 1: the tool call of qz1toolname is written as a Python call" in m
        for m in said
    ), said


def test_qwen3_coder_writes_python_literals_in_its_xml_parameters(good: Path) -> None:
    result, errors = _values(good, "qwen3-coder")
    assert result.status == "fail" and {e["probe"] for e in errors} == {"values-typed-arguments"}
    said = [e["message"] for e in errors]
    assert any(
        "the tool-call argument 'limit' of qz1toolname (XML parameters) is null, written as the Python literal "
        "'None' where the syntax writes JSON ('null')"
        in m
        and "<parameter=⟨here⟩limit>\\nNone\\n</parameter>" in m
        for m in said
    ), said
    assert "`| tojson`, not `| string`" in (result.hint or "")


@pytest.mark.parametrize("name", ["kimi-k2-instruct", "deepseek-v3.1"])
def test_templates_that_write_their_calls_faithfully_pass(good: Path, name: str) -> None:
    result, errors = _values(good, name)
    assert errors == [], result.message
    assert result.status in ("pass", "skip"), result.message


LLAMA4_CALL = (
    "{{- '[' + c.function.name + '(' -}}"
    "{%- for k, v in c.function.arguments | items -%}"
    "{{- k + '=\"' -}}{{- '%s' | format(v) -}}{{- '\"' -}}{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}"
    "{%- endfor -%}{{- ')]' -}}"
)
GOOD_CALL = (
    "{{- '<tool_call>' + c.function.name + ' ' + (c.function.arguments if c.function.arguments is string "
    "else c.function.arguments | tojson) + '</tool_call>' -}}"
)


def test_every_value_quoted_turns_numbers_to_strings_and_leaves_quotes_unescaped(good: Path) -> None:
    ctx = context(good, GOOD.replace(GOOD_CALL, LLAMA4_CALL))
    result = check(ctx, "values-faithful")
    said = [e["message"] for e in result.detail["examples"] if e["severity"] == "error"]
    assert result.status == "fail"
    assert any("argument 'exact' of qz1toolname (Python call) is true, written as the string 'True'" in m for m in said)
    nested = [m for m in said if m.startswith("probe values-nested-arguments")]
    assert nested and "the argument 'query' holds a quote written unescaped inside its quotes" in nested[0], said


def test_a_call_syntax_no_reader_knows_is_info_not_an_error(good: Path) -> None:
    arrows = (
        "{{- '<call ' + c.function.name + ' ' -}}"
        "{%- for k, v in (c.function.arguments if c.function.arguments is mapping else {}) | items -%}"
        "{{- k + ' => ' + (v | string) -}}{%- if not loop.last -%}{{- ' ; ' -}}{%- endif -%}"
        "{%- endfor -%}{{- '>' -}}"
    )
    result = check(context(good, GOOD.replace(GOOD_CALL, arrows)), "values-faithful")
    severities = {e["severity"] for e in result.detail["examples"]}
    assert "info" in severities and "error" not in severities, result.message
    assert "written in a syntax none of JSON, a Python call or XML parameters reads" in result.message


# ---- text beside tool calls ---------------------------------------------------------------------------------------

CONTENT = (
    "{%- if m.content is string -%}{{- m.content -}}"
    "{%- elif m.content -%}{%- for p in m.content -%}{{- p.text -}}{%- endfor -%}{%- endif -%}"
)
CALLS_LOOP = "{%- for c in m.tool_calls or [] -%}" + GOOD_CALL + "{%- endfor -%}"
SHAPES = {
    # calls only in a call turn, content only in the other branch (Llama 3.x, Mistral Small 3.1)
    "calls-or-content": "{%- if m.tool_calls -%}" + CALLS_LOOP + "{%- else -%}" + CONTENT + "{%- endif -%}",
    # a call turn's content written only when it is a string (Qwen3-Coder): its text parts are lost
    "string-only-beside-calls": "{%- if m.tool_calls -%}{%- if m.content is string -%}{{- m.content -}}{%- endif -%}"
    + CALLS_LOOP
    + "{%- else -%}"
    + CONTENT
    + "{%- endif -%}",
    # content written in the first iteration of the calls loop, and only as a string (DeepSeek V3.1)
    "first-iteration": "{%- if m.tool_calls -%}{%- for c in m.tool_calls -%}"
    "{%- if loop.first and m.content is string -%}{{- m.content -}}{%- endif -%}"
    + GOOD_CALL
    + "{%- endfor -%}{%- else -%}"
    + CONTENT
    + "{%- endif -%}",
}


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_text_beside_tool_calls_dropped_is_an_error(good: Path, shape: str) -> None:
    assert CONTENT + CALLS_LOOP in GOOD
    result = check(context(good, GOOD.replace(CONTENT + CALLS_LOOP, SHAPES[shape])), "nothing-dropped")
    assert result.status == "fail" and result.severity == "error"
    beside = [e["message"] for e in result.detail["examples"] if e["probe"] in ("agent-call-with-content-parts",)]
    assert beside and beside[0].startswith(
        "probe agent-call-with-content-parts: the content part of message 1 ('qz3part') is dropped"
    ), result.message
    assert (
        "it is the text beside the turn's tool calls: the model is trained on a call turn without its text"
        in (beside[0])
    )


def test_text_beside_tool_calls_kept_passes(good: Path) -> None:
    result = check(context(good), "nothing-dropped")
    assert all(e["severity"] != "error" for e in result.detail.get("examples", [])), result.message


def test_mistral_small_drops_the_text_beside_its_calls(good: Path) -> None:
    ctx = context(good, (CALLS / "mistral-small-3.1.jinja").read_text(encoding="utf-8"))
    result = check(ctx, "nothing-dropped")
    from hf_chat_templates.verification.checks.content import _missing

    for probe_id, kind in (("agent-call-with-content", "content"), ("agent-call-with-content-parts", "content part")):
        probe = ctx.probe(probe_id)
        said = [f for f in _missing(ctx, probe, ctx.rendered[probe_id].text or "", None)]
        assert said and said[0].text.startswith(f"probe {probe_id}: the {kind} of message 1"), said
        assert "beside the turn's tool calls" in said[0].text and "text parts" in (said[0].hint or "")
    assert result.status == "fail"


def test_gemma_4_writes_json_string_arguments_inside_its_own_syntax(good: Path) -> None:
    from ..helpers import CORPUS

    ctx = context(good, (CORPUS / "gemma-4" / "chat_template.jinja").read_text(encoding="utf-8"))
    result = check(ctx, "values-faithful")
    said = {e["probe"]: e["message"] for e in result.detail["examples"] if e["severity"] == "error"}
    assert set(said) == {"values-string-arguments", "values-typed-arguments", "parts-system"}, said
    assert said["values-string-arguments"].startswith(
        "probe values-string-arguments: message 1: the tool call of qz1toolname is written as a Gemma call that does "
        "not give its arguments back: it does not parse as a Gemma call: a key expected"
    )
    assert (
        "(the arguments' JSON string written as given, inside a syntax of its own)" in said["values-string-arguments"]
    )
    assert "call:qz1toolname{⟨here⟩{" in said["values-string-arguments"]
