"""The corrected gemma3-tools, gigachat3 and llama3.2-pythonic templates where other engines and other inputs meet
them: llama.cpp's own engine (the WASM build of its common/jinja in ggufdoctor) and TGI's minijinja render every
probe exactly as transformers does; gemma3-tools keeps the system prompt and tools when no user turn follows them;
gigachat3 writes tool defaults as JSON; llama3.2-pythonic writes OpenAI-format JSON-string arguments as the object
they hold and refuses only strings that are not one."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_chat_templates import get_family
from hf_chat_templates.conversations.probes import weather_tool
from hf_chat_templates.conversations.suite import build_probes
from hf_chat_templates.template.rendering import normalize_for_template

FAMILIES = ("gemma3-tools", "gigachat3", "llama3.2-pythonic")
ENGINES = ("llama.cpp", "minijinja")


def _tokenizer(installed_variants: dict[tuple[str, str], Path], family: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(installed_variants[(family, "corrected")]))


def _template(family: str, variant: str = "corrected") -> str:
    return get_family(family).variant(variant).template


# ---- the same conversation in transformers, llama.cpp and TGI -------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = False


def _defaults_tool() -> dict[str, Any]:
    tool = weather_tool()
    tool["function"]["parameters"]["properties"].update(
        {
            "metric": {"type": "boolean", "default": False},
            "limit": {"type": "integer", "default": None},
            "units": {"type": "string", "default": 'say "C"\\ per day'},
            "days": {"type": "array", "items": {"type": "string"}, "default": ["mon", "tue"]},
        }
    )
    return tool


NESTED_ARGUMENTS = {"city": "Paris", "exact": True, "limit": None, "days": [1, 2.5], "where": {"lat": -1, "ok": False}}

# Shapes the probe suite does not hold, each one a fix below.
EXTRA = (
    Case("system-only", [{"role": "system", "content": "Be brief."}], add_generation_prompt=True),
    Case(
        "model-first-with-tools",
        [{"role": "system", "content": "Use tools."}, {"role": "assistant", "content": "Hello."}],
        [weather_tool()],
    ),
    Case("model-first-tools-only", [{"role": "assistant", "content": "Hello."}], [weather_tool()]),
    Case("tool-defaults", [{"role": "user", "content": "Weather?"}], [_defaults_tool()], add_generation_prompt=True),
    Case(
        "nested-string-arguments",
        [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": json.dumps(NESTED_ARGUMENTS)}}
                ],
            },
        ],
        [weather_tool()],
    ),
)


def cases() -> list[Case]:
    """Every probe an engine can be asked for (no prefill: llama.cpp and TGI have none), and the shapes above."""
    probes = [
        Case(p.id, p.message_list(), p.tool_list(), p.add_generation_prompt)
        for p in build_probes()
        if not p.continue_final_message
    ]
    return probes + list(EXTRA)


def as_llama_server_sends(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """llama-server joins text parts with "\\n" and drops other parts before any template runs, when the template
    renders plain string content (common/chat.cpp, common_chat_msgs_to_json_oaicompat with concat_typed_text):
    what transformers must be given to compare the template, not the server's preprocessing."""
    out = []
    for message in copy.deepcopy(messages):
        if isinstance(message.get("content"), list):
            parts = message["content"]
            message["content"] = "\n".join(p["text"] for p in parts if p.get("type") == "text")
        out.append(message)
    return out


def render_transformers(tok: Any, template: str, case: Case, messages: list[dict[str, Any]]) -> str:
    try:
        return str(
            tok.apply_chat_template(
                copy.deepcopy(messages),
                tools=copy.deepcopy(case.tools),
                chat_template=template,
                tokenize=False,
                add_generation_prompt=case.add_generation_prompt,
            )
        )
    except jinja2.TemplateError as err:
        return f"refused: {err}"


def render_llama_cpp(template: str, case: Case, variables: dict[str, Any]) -> str:
    """llama.cpp's engine with its message normalizer, given the request as an OpenAI client sends it."""
    from ggufdoctor.engines.llamacpp_engine import LlamaCppEngine

    engine = _ENGINE.setdefault("llama.cpp", LlamaCppEngine())
    assert engine.available, f"llama.cpp's engine cannot run: {engine.unavailable_reason}"
    context = {
        **variables,
        "messages": copy.deepcopy(case.messages),
        "tools": copy.deepcopy(case.tools),
        "add_generation_prompt": case.add_generation_prompt,
    }
    result = engine.render(template, context)
    if result.error and result.error.startswith("raise:"):
        return f"refused: {result.error[len('raise:') :]}"
    return result.text if result.error is None else f"cannot render it: {result.error}"


def render_minijinja(template: str, case: Case, variables: dict[str, Any]) -> str:
    """minijinja as TGI configures it (router/src/infer/chat_template.rs): Environment::new() (no trim_blocks or
    lstrip_blocks), pycompat methods, its own tojson, lenient undefined values, raise_exception."""
    import minijinja

    def raise_exception(message: str) -> None:
        raise Refused(message)

    env = minijinja.Environment(undefined_behavior="lenient", pycompat=True)
    env.add_function("raise_exception", raise_exception)  # type: ignore[attr-defined]
    context = {
        **variables,
        "messages": normalize_for_template(copy.deepcopy(case.messages)),
        "tools": copy.deepcopy(case.tools),
        "add_generation_prompt": case.add_generation_prompt,
    }
    try:
        return str(env.render_str(template, **context))
    except Refused as err:  # minijinja lets the function's own exception through
        return f"refused: {err}"
    except Exception as err:  # anything minijinja cannot do: the finding names it
        return f"cannot render it: {str(err).splitlines()[0]}"


class Refused(Exception):
    """The template's own raise_exception, in minijinja."""


_ENGINE: dict[str, Any] = {}


@pytest.fixture(autouse=True, scope="module")
def _release_engine() -> Iterator[None]:
    """Drop llama.cpp's engine while the interpreter still runs (wasmtime cannot free it at exit)."""
    yield
    _ENGINE.clear()


def parity_failures(tok: Any, template: str, engine: str, shapes: list[Case]) -> list[str]:
    """Each case `engine` renders differently from transformers, named with the first differing character."""
    variables = {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
    failures = []
    for case in shapes:
        if engine == "llama.cpp":
            expected = render_transformers(tok, template, case, as_llama_server_sends(case.messages))
            got = render_llama_cpp(template, case, variables)
        else:
            expected = render_transformers(tok, template, case, case.messages)
            got = render_minijinja(template, case, variables)
        if expected.startswith("refused: ") and got.startswith("refused: "):
            continue  # the template's own refusal in both (the messages differ by engine)
        if got.startswith("cannot render it: ") or (got != expected and "refused: " in (got[:9], expected[:9])):
            failures.append(f"probe {case.id}: {engine}: {got[:300]!r}; transformers: {expected[:300]!r}")
        elif got != expected:
            at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
            failures.append(
                f"probe {case.id}: {engine} gives {got[max(0, at - 30) : at + 50]!r} where transformers gives "
                f"{expected[max(0, at - 30) : at + 50]!r} (char {at})"
            )
    return failures


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_probe_renders_in_the_engine_as_in_transformers(
    family: str, engine: str, installed_variants: dict[tuple[str, str], Path]
) -> None:
    tok = _tokenizer(installed_variants, family)
    failures = parity_failures(tok, _template(family), engine, cases())
    assert failures == [], "\n".join(failures)


def test_parity_names_the_probe_and_the_engine_error(installed_variants: dict[tuple[str, str], Path]) -> None:
    """The comparison can fail: gemma3-tools' seed serializes tools with map('tojson'), which llama.cpp's engine
    does not implement, and `is sameas true` does not parse there."""
    tok = _tokenizer(installed_variants, "gemma3-tools")
    tools_declared = [c for c in cases() if c.id == "tools-declared"]
    (failure,) = parity_failures(tok, _template("gemma3-tools", "upstream"), "llama.cpp", tools_declared)
    assert "probe tools-declared: llama.cpp: 'cannot render it: render:NotImplemented: map" in failure
    sameas = "{%- for m in messages -%}{{ 'T' if m.content is sameas true else 'F' }}{%- endfor -%}"
    (failure,) = parity_failures(tok, sameas, "llama.cpp", tools_declared)
    assert "probe tools-declared: llama.cpp: 'cannot render it: compile:parser" in failure and "Parser Error" in failure


def test_minijinja_tojson_escapes_html_characters(installed_variants: dict[tuple[str, str], Path]) -> None:
    """A known difference no template can avoid while it serializes tools with tojson: TGI's minijinja escapes
    ' < > & in JSON strings (\\u0027 …), transformers and llama.cpp do not. The probes hold none of them."""
    tok = _tokenizer(installed_variants, "gemma3-tools")
    case = Case("apostrophe", [{"role": "user", "content": "Hi"}], [weather_tool(description="The city's weather.")])
    (failure,) = parity_failures(tok, _template("gemma3-tools"), "minijinja", [case])
    assert "city\\\\u0027s" in failure
    assert parity_failures(tok, _template("gemma3-tools"), "llama.cpp", [case]) == []


# ---- gemma3-tools: the system prompt and tools lead the first user turn, or a user turn of their own -------------


def official_gemma3(messages: list[dict[str, Any]], *, add_generation_prompt: bool, bos: str) -> str:
    """Gemma 3's official chat template (google/gemma-3-4b-it, tokenizer_config.json), rule for rule: the system
    message's text and a blank line lead the first turn, roles alternate from user or it raises, content is
    trimmed, the assistant's role is `model`. Written out, not copied: the Gemma Terms of Use restrict
    redistributing Gemma's files (tests/data/templates/LICENSES.md)."""
    prefix = ""
    if messages and messages[0]["role"] == "system":
        prefix, messages = messages[0]["content"] + "\n\n", messages[1:]
    out = bos
    for i, message in enumerate(messages):
        if (message["role"] == "user") != (i % 2 == 0):
            raise ValueError("Conversation roles must alternate user/assistant/user/assistant/...")
        role = "model" if message["role"] == "assistant" else message["role"]
        out += f"<start_of_turn>{role}\n" + (prefix if i == 0 else "") + message["content"].strip() + "<end_of_turn>\n"
    return out + ("<start_of_turn>model\n" if add_generation_prompt else "")


SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "Hi there."}
MODEL = {"role": "assistant", "content": "Hello."}
EMPTY_USER = {"role": "user", "content": ""}


def _gemma(tok: Any, messages: list[dict[str, Any]], tools: Any = None, prompt: bool = False) -> str:
    return str(tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=prompt))


@pytest.mark.parametrize(
    ("messages", "prompt"),
    [
        ([SYSTEM, USER], True),
        ([SYSTEM, USER, MODEL], False),
        ([USER, MODEL, USER], True),
        ([SYSTEM, USER, MODEL, USER, MODEL], False),
    ],
)
def test_gemma_renders_what_gemmas_template_renders(
    messages: list[dict[str, Any]], prompt: bool, installed_variants: dict[tuple[str, str], Path]
) -> None:
    tok = _tokenizer(installed_variants, "gemma3-tools")
    expected = official_gemma3(messages, add_generation_prompt=prompt, bos=tok.bos_token)
    assert _gemma(tok, messages, prompt=prompt) == expected


@pytest.mark.parametrize(
    ("messages", "as_given_to_gemma"),
    [
        ([SYSTEM], [SYSTEM, EMPTY_USER]),
        ([SYSTEM, MODEL, USER, MODEL], [SYSTEM, EMPTY_USER, MODEL, USER, MODEL]),
    ],
    ids=["system-only", "model-first"],
)
def test_gemma_keeps_the_system_prompt_without_a_user_turn(
    messages: list[dict[str, Any]],
    as_given_to_gemma: list[dict[str, Any]],
    installed_variants: dict[tuple[str, str], Path],
) -> None:
    """Gemma's template writes the system text in the first turn only when that turn is the user's: with none it
    drops it, and a model turn first raises. The corrected template writes the user turn that holds it, as Gemma's
    template renders the conversation with an empty user message in its place."""
    tok = _tokenizer(installed_variants, "gemma3-tools")
    got = _gemma(tok, messages, prompt=True)
    assert got == official_gemma3(as_given_to_gemma, add_generation_prompt=True, bos=tok.bos_token)
    assert got.startswith(f"{tok.bos_token}<start_of_turn>user\n{SYSTEM['content']}\n\n<end_of_turn>\n")
    if messages[1:2] == [MODEL]:
        with pytest.raises(ValueError, match="alternate"):
            official_gemma3(messages, add_generation_prompt=True, bos=tok.bos_token)
    else:
        assert SYSTEM["content"] not in official_gemma3(messages, add_generation_prompt=True, bos=tok.bos_token)


@pytest.mark.parametrize("messages", [[SYSTEM], [SYSTEM, MODEL], [MODEL]], ids=["system-only", "system-model", "model"])
def test_gemma_keeps_the_tools_without_a_user_turn(
    messages: list[dict[str, Any]], installed_variants: dict[tuple[str, str], Path]
) -> None:
    tok = _tokenizer(installed_variants, "gemma3-tools")
    tools = [weather_tool()]
    head = [m for m in messages if m["role"] == "system"]
    got = _gemma(tok, messages, tools, prompt=True)
    assert got == _gemma(tok, [*head, EMPTY_USER, *messages[len(head) :]], tools, prompt=True)
    user_turn = got.split("<end_of_turn>")[0]
    assert user_turn.startswith(f"{tok.bos_token}<start_of_turn>user\n") and json.dumps(tools[0]) in user_turn
    for message in messages:
        assert message["content"] in got


# ---- gigachat3: defaults in the TypeScript namespace are JSON -------------------------------------------------


def _defaults_written(tok: Any, template: str) -> list[str]:
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Weather?"}], tools=[_defaults_tool()], chat_template=template, tokenize=False
    )
    return re.findall(r"// default: (.*)$", str(text), flags=re.MULTILINE)


def test_gigachat_writes_defaults_as_json(installed_variants: dict[tuple[str, str], Path]) -> None:
    """GigaChat's functions are described in JSON Schema (developers.sber.ru, "Описание пользовательских функций"),
    whose defaults are JSON; the seed wrote Python's False and None, and strings without escaping."""
    tok = _tokenizer(installed_variants, "gigachat3")
    properties = _defaults_tool()["function"]["parameters"]["properties"]
    defaults = [p["default"] for p in properties.values() if "default" in p]
    written = _defaults_written(tok, _template("gigachat3"))
    assert [json.loads(w) for w in written] == defaults
    assert written[:2] == ["false", "null"]
    seed = _defaults_written(tok, _template("gigachat3", "upstream"))
    assert seed[:2] == ["False", "None"] and seed[2] == '"say "C"\\ per day"'


# ---- llama3.2-pythonic: JSON-string arguments are written as the object they hold --------------------------------


def _call(arguments: Any) -> list[dict[str, Any]]:
    function = {"name": "get_weather", "arguments": arguments}
    return [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_1", "type": "function", "function": function}],
        },
    ]


def _llama(tok: Any, arguments: Any) -> str:
    return str(tok.apply_chat_template(_call(arguments), tools=[weather_tool()], tokenize=False))


TEXT = st.text(st.characters(exclude_categories=("Cs", "Cc")) | st.sampled_from('\n\t"\\/'), max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
DUMPS = st.sampled_from([{}, {"indent": 2}, {"separators": (",", ":")}])


def test_string_arguments_render_as_the_object_they_hold(installed_variants: dict[tuple[str, str], Path]) -> None:
    """Any JSON object, as json.dumps writes it (ensure_ascii=False; compact, spaced or indented), renders exactly
    as the dict does: quotes, backslashes, newlines, non-ASCII, nesting, true/false/null and numbers."""
    tok = _tokenizer(installed_variants, "llama3.2-pythonic")

    @settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(st.dictionaries(TEXT, JSON_VALUES, max_size=4), DUMPS)
    def check(arguments: dict[str, Any], style: dict[str, Any]) -> None:
        assert _llama(tok, json.dumps(arguments, ensure_ascii=False, **style)) == _llama(tok, arguments)

    check()
    assert _llama(tok, json.dumps(NESTED_ARGUMENTS)).endswith(
        '[get_weather(city="Paris", exact=True, limit=None, days=[1, 2.5], where={lat=-1, ok=False})]<|eot_id|>'
    )


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ("Paris", "character 0: it does not start with {"),
        ('["Paris"]', "character 0: it does not start with {"),
        ('{"city": "Paris"', "it ends before the object does"),
        ('{"city": "Paris"} x', "character 18: text after the object"),
        ('{"city" "Paris"}', 'character 8: unexpected "'),
        ('{"city": Paris}', "character 9: Paris is not a JSON value"),
        ('{"city": "Paris",}', "character 17: unexpected }"),
        ("{'city': 'Paris'}", "character 1: unexpected '"),
        ('{"city": "\\x"}', "character 10: \\x is not a JSON escape"),
    ],
)
def test_arguments_that_are_not_a_json_object_are_refused(
    arguments: str, why: str, installed_variants: dict[tuple[str, str], Path]
) -> None:
    tok = _tokenizer(installed_variants, "llama3.2-pythonic")
    with pytest.raises(jinja2.TemplateError) as refused:
        _llama(tok, arguments)
    assert type(refused.value) is jinja2.TemplateError  # the template's refusal, not a crash
    assert str(refused.value) == (
        f"the arguments of tool call get_weather are a string that is not a JSON object ({why}): pythonic calls "
        "are written from a JSON object; give the arguments as a dict or as a string holding a JSON object"
    )


def test_unicode_escapes_are_refused_with_the_fix(installed_variants: dict[tuple[str, str], Path]) -> None:
    """json.dumps' default (ensure_ascii) writes é as \\u00e9: no template engine can turn that back into é."""
    tok = _tokenizer(installed_variants, "llama3.2-pythonic")
    with pytest.raises(jinja2.TemplateError) as refused:
        _llama(tok, json.dumps({"city": "Zürich"}))
    assert str(refused.value) == (
        "the arguments of tool call get_weather escape a character as \\uXXXX (character 11), which a template "
        "cannot decode: json.loads them before rendering, or write them with json.dumps(..., ensure_ascii=False)"
    )
    assert _llama(tok, json.dumps({"city": "Zürich"}, ensure_ascii=False)) == _llama(tok, {"city": "Zürich"})


def test_string_arguments_give_llama_models_ids(installed_variants: dict[tuple[str, str], Path]) -> None:
    """llama-models' ChatFormat (which json.loads OpenAI-format arguments) gives the same ids."""
    from hf_chat_templates.verification.references import llama32_ids

    tok = _tokenizer(installed_variants, "llama3.2-pythonic")
    probes = [p for p in build_probes() if p.id in ("tool-call-json-arguments", "values-string-arguments")]
    assert len(probes) == 2
    for probe in probes:
        got = tok.apply_chat_template(probe.message_list(), tools=probe.tool_list(), tokenize=True)["input_ids"]
        assert list(got) == llama32_ids(probe, date="", kwargs={}), probe.id


def test_prepare_still_parses_arguments_the_template_cannot_decode(
    installed_variants: dict[tuple[str, str], Path], tmp_path: Path
) -> None:
    """The template reads ASCII JSON strings itself now; prepare still parses every string, since json.dumps'
    default \\u escapes (Zürich) are beyond any template."""
    from datasets import load_from_disk

    from hf_chat_templates import prepare
    from hf_chat_templates.conversations.normalize import ARGUMENTS_STEP

    records = [
        {"messages": _call(json.dumps({"city": city})), "tools": [weather_tool()]} for city in ("Oslo", "Zürich")
    ]
    for record in records:
        record["messages"].append({"role": "tool", "tool_call_id": "call_1", "content": "sunny"})
        record["messages"].append({"role": "assistant", "content": "Sunny."})
    data = tmp_path / "calls.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    report = prepare(installed_variants[("llama3.2-pythonic", "corrected")], data, tmp_path / "out")
    assert report.ok and report.written == 2 and report.tally.steps == {ARGUMENTS_STEP: 2}
    tok = _tokenizer(installed_variants, "llama3.2-pythonic")
    assert '[get_weather(city="Zürich")]' in tok.decode(load_from_disk(str(tmp_path / "out"))["input_ids"][1])
