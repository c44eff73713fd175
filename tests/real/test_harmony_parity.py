"""gpt-oss's corrected template against openai-harmony, the official renderer, token for token: the trained turn keeps
its analysis and history follows harmony's auto_drop_analysis; content written next to tool calls is a preamble on
the commentary channel (the Harmony guide's "Preambles"); function tools are harmony's TypeScript for the schemas
Hypothesis generates. llama.cpp's engine and TGI's minijinja render the template as transformers does."""

from __future__ import annotations

import copy
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai_harmony as oh
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_chat_templates import TemplateChoice, get_family, install
from hf_chat_templates.conversations.suite import build_probes
from hf_chat_templates.template.rendering import normalize_for_template
from hf_chat_templates.verification.references import harmony_encoding
from hf_chat_templates.verification.runner import load_context

DEFAULTS = get_family("gpt-oss").variant("corrected").kwarg_defaults


@pytest.fixture(scope="module")
def folder(o200k_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install("gpt-oss", o200k_base, tmp_path_factory.mktemp("gpt-oss") / "tok").output


@pytest.fixture(scope="module")
def tok(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def template() -> str:
    return get_family("gpt-oss").variant("corrected").template


def rendered_ids(tok: Any, messages: list[dict[str, Any]], tools: Any = None, **kwargs: Any) -> list[int]:
    out = tok.apply_chat_template(
        copy.deepcopy(messages), tools=copy.deepcopy(tools), tokenize=True, **{**DEFAULTS, **kwargs}
    )
    return list(out["input_ids"])


def mismatch(tok: Any, got: list[int], expected: list[int]) -> str:
    """Where the template's ids leave harmony's: the token index and the text around it on both sides."""
    at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    return (
        f"token {at} differs from openai-harmony: template {tok.decode(got[max(0, at - 8) : at + 8])!r} vs "
        f"harmony {tok.decode(expected[max(0, at - 8) : at + 8])!r}"
    )


# ---- harmony's side, written out message by message -----------------------------------------------------------


def header(tools: list[dict[str, Any]] | None = None) -> list[Any]:
    """The system message (the template's defaults) and, with tools, the developer message declaring them."""
    out = [oh.Message.from_role_and_content(oh.Role.SYSTEM, oh.SystemContent.new())]
    if tools:
        descriptions = [
            oh.ToolDescription.new(
                t["function"]["name"], t["function"].get("description", ""), parameters=t["function"].get("parameters")
            )
            for t in tools
        ]
        developer = oh.DeveloperContent.new().with_function_tools(descriptions)
        out.append(oh.Message.from_role_and_content(oh.Role.DEVELOPER, developer))
    return out


def user(text: str) -> Any:
    return oh.Message.from_role_and_content(oh.Role.USER, text)


def assistant(text: str, channel: str) -> Any:
    return oh.Message.from_role_and_content(oh.Role.ASSISTANT, text).with_channel(channel)


def call(name: str, arguments: str) -> Any:
    return assistant(arguments, "commentary").with_recipient(f"functions.{name}").with_content_type("<|constrain|>json")


def result(name: str, text: str) -> Any:
    message = oh.Message.from_author_and_content(oh.Author.new(oh.Role.TOOL, f"functions.{name}"), text)
    return message.with_channel("commentary").with_recipient("assistant")


def harmony_prompt(messages: list[Any], *, auto_drop: bool = True) -> list[int]:
    config = oh.RenderConversationConfig(auto_drop_analysis=auto_drop)
    convo = oh.Conversation.from_messages(messages)
    return list(harmony_encoding().render_conversation_for_completion(convo, oh.Role.ASSISTANT, config))


def harmony_trained(history: list[Any], turn: list[Any], *, auto_drop: bool = True) -> list[int]:
    """The prompt harmony renders for the history (its auto_drop_analysis applied), then the trained turn with its
    analysis, ending in <|return|> (render_conversation_for_training with auto_drop_analysis=False)."""
    encoding = harmony_encoding()
    prompt = encoding.render_conversation(
        oh.Conversation.from_messages(history), oh.RenderConversationConfig(auto_drop_analysis=auto_drop)
    )
    tail = encoding.render_conversation_for_training(
        oh.Conversation.from_messages(turn), oh.RenderConversationConfig(auto_drop_analysis=False)
    )
    return list(prompt) + list(tail)


WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL: dict[str, Any] = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
ARGS = '{"city": "Paris"}'


# ---- 1. reasoning: the trained turn keeps its analysis; history follows auto_drop_analysis ------------------------


@pytest.mark.parametrize("field", ["reasoning_content", "thinking"])
def test_the_trained_turn_keeps_its_analysis(tok: Any, field: str) -> None:
    messages = [{"role": "user", "content": "2+2?"}, {"role": "assistant", field: "Add them.", "content": "4"}]
    got = rendered_ids(tok, messages)
    expected = harmony_trained([*header(), user("2+2?")], [assistant("Add them.", "analysis"), assistant("4", "final")])
    assert got == expected, mismatch(tok, got, expected)


# (messages, harmony's messages) for prompts: an earlier answer's analysis is dropped only when the last assistant
# message is a final answer; after a tool call harmony keeps it, and analysis after the first answer is kept.
PROMPTS: dict[str, tuple[list[dict[str, Any]], list[Any]]] = {
    "after-an-answer": (
        [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "reasoning_content": "think 1", "content": "a1"},
            {"role": "user", "content": "q2"},
        ],
        [user("q1"), assistant("think 1", "analysis"), assistant("a1", "final"), user("q2")],
    ),
    "after-a-tool-call": (
        [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "reasoning_content": "think 1", "content": "a1"},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "reasoning_content": "think 2", "tool_calls": [CALL]},
            {"role": "tool", "content": "sunny"},
        ],
        [
            user("q1"),
            assistant("think 1", "analysis"),
            assistant("a1", "final"),
            user("q2"),
            assistant("think 2", "analysis"),
            call("get_weather", ARGS),
            result("get_weather", "sunny"),
        ],
    ),
    "after-two-answers": (
        [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "reasoning_content": "think 1", "content": "a1"},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "reasoning_content": "think 2", "content": "a2"},
            {"role": "user", "content": "q3"},
        ],
        [
            user("q1"),
            assistant("think 1", "analysis"),
            assistant("a1", "final"),
            user("q2"),
            assistant("think 2", "analysis"),
            assistant("a2", "final"),
            user("q3"),
        ],
    ),
}


@pytest.mark.parametrize("auto_drop", [True, False])
@pytest.mark.parametrize("shape", sorted(PROMPTS))
def test_prompts_drop_analysis_as_harmony_does(tok: Any, shape: str, auto_drop: bool) -> None:
    messages, theirs = PROMPTS[shape]
    tools = [WEATHER] if shape == "after-a-tool-call" else None
    got = rendered_ids(tok, messages, tools, add_generation_prompt=True, auto_drop_analysis=auto_drop)
    expected = harmony_prompt(header(tools) + theirs, auto_drop=auto_drop)
    assert got == expected, mismatch(tok, got, expected)


@pytest.mark.parametrize("auto_drop", [True, False])
@pytest.mark.parametrize("shape", sorted(PROMPTS))
def test_a_trained_turn_follows_the_prompt_harmony_renders(tok: Any, shape: str, auto_drop: bool) -> None:
    """Training on the turn after each prompt: the prompt exactly as harmony renders it, then the turn."""
    messages, theirs = PROMPTS[shape]
    tools = [WEATHER] if shape == "after-a-tool-call" else None
    turn: dict[str, Any] = {"role": "assistant", "reasoning_content": "think last", "content": "last"}
    got = rendered_ids(tok, [*messages, turn], tools, auto_drop_analysis=auto_drop)
    expected = harmony_trained(
        header(tools) + theirs, [assistant("think last", "analysis"), assistant("last", "final")], auto_drop=auto_drop
    )
    assert got == expected, mismatch(tok, got, expected)


@pytest.mark.parametrize(("variant", "reads"), [("corrected", "yes"), ("upstream", "no")])
def test_the_capability_report_says_what_the_variant_reads(folder: Path, variant: str, reads: str) -> None:
    """`reads: reasoning=` comes from the renderings (VerifyContext.capabilities): yes when some probe's reasoning
    survives in one. The seed never writes `thinking` or `reasoning_content` (its tool-call branch writes `content`
    on the analysis channel, and OpenAI-format calls crash it), so no is the truth for it."""
    probes = [p for p in build_probes() if p.id in ("reasoning", "agent-reasoning-tool-loop")]
    ctx, *_ = load_context(folder, TemplateChoice(family="gpt-oss", variant=variant), probes=probes)
    assert ctx.capabilities["reasoning"] == reads


# ---- 2. content next to tool calls: a preamble on commentary, before the calls -----------------------------------


def test_content_next_to_tool_calls_is_a_commentary_preamble(tok: Any) -> None:
    turn: dict[str, Any] = {
        "role": "assistant",
        "reasoning_content": "Need weather.",
        "content": "Checking.",
        "tool_calls": [CALL],
    }
    theirs = [assistant("Need weather.", "analysis"), assistant("Checking.", "commentary"), call("get_weather", ARGS)]
    messages = [{"role": "user", "content": "Weather in Paris?"}, turn, {"role": "tool", "content": "sunny"}]
    got = rendered_ids(tok, messages, [WEATHER], add_generation_prompt=True)
    expected = harmony_prompt([*header([WEATHER]), user("Weather in Paris?"), *theirs, result("get_weather", "sunny")])
    assert got == expected, mismatch(tok, got, expected)
    assert "<|channel|>final" not in tok.decode(got)  # no answer before the result arrives

    trained = rendered_ids(tok, messages[:2], [WEATHER])
    expected = harmony_trained([*header([WEATHER]), user("Weather in Paris?")], theirs)
    assert trained == expected, mismatch(tok, trained, expected)
    assert tok.decode(trained).endswith("<|call|>")


# ---- 3. tool schemas: harmony's TypeScript, for generated schemas ------------------------------------------------

_TEXT = st.text(alphabet=st.sampled_from(list("abcXYZ019 _-.,:;()'\"\\/éж中🙂")), max_size=10)
_DESCRIPTION = st.one_of(st.sampled_from(["pick one", "first line\nsecond line", "ends with a newline\n"]), _TEXT)
_NAME = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)
_NUMBER = st.one_of(st.integers(-1000, 1000), st.integers(-400, 400).map(lambda n: n / 4))
_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), _NUMBER, _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_NAME, inner, max_size=3)),
    max_leaves=5,
)
_COMMON = {"description": _DESCRIPTION, "nullable": st.booleans(), "title": _TEXT}
_LEAF = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("string")},
        optional={
            **_COMMON,
            "enum": st.lists(_TEXT, min_size=1, max_size=3, unique=True),
            "default": st.one_of(_TEXT, st.none()),
            "examples": st.lists(_TEXT, max_size=2),
        },
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["number", "integer"])},
        optional={**_COMMON, "default": _NUMBER, "enum": st.lists(st.integers(-5, 5), min_size=1, max_size=3)},
    ),
    st.fixed_dictionaries({"type": st.just("boolean")}, optional={**_COMMON, "default": st.booleans()}),
    st.fixed_dictionaries(
        {"type": st.lists(st.sampled_from(["string", "integer", "number", "boolean", "null"]), min_size=1, max_size=3)}
    ),
    st.fixed_dictionaries(
        {
            "anyOf": st.lists(
                st.fixed_dictionaries({"type": st.sampled_from(["string", "null"])}), min_size=2, max_size=2
            )
        },
        optional={"description": _DESCRIPTION},
    ),
)


def _object(properties: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """An object schema whose `required` names some of its properties."""
    return properties.flatmap(
        lambda props: st.fixed_dictionaries(
            {
                "type": st.just("object"),
                "properties": st.just(props),
                "required": st.lists(st.sampled_from(sorted(props)), unique=True) if props else st.just([]),
            },
            optional={**_COMMON, "default": _JSON},
        )
    )


def _compound(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        _object(st.dictionaries(_NAME, inner, max_size=3)),
        st.fixed_dictionaries({"type": st.just("array")}, optional={"items": inner, **_COMMON, "default": _JSON}),
        st.fixed_dictionaries(
            {"oneOf": st.lists(inner, min_size=1, max_size=3)},
            optional={"description": _DESCRIPTION, "default": _JSON, "nullable": st.booleans()},
        ),
    )


_SCHEMA = st.recursive(_LEAF, _compound, max_leaves=8)
_PARAMETERS = st.one_of(
    st.none(), st.just({"type": "object", "properties": {}}), _object(st.dictionaries(_NAME, _SCHEMA, max_size=4))
)
_TOOLS = st.lists(
    st.fixed_dictionaries({"name": _NAME, "description": _DESCRIPTION, "parameters": _PARAMETERS}),
    min_size=1,
    max_size=3,
    unique_by=lambda fn: fn["name"],
).map(lambda fns: [{"type": "function", "function": {k: v for k, v in fn.items() if v is not None}} for fn in fns])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tools=_TOOLS)
def test_tool_schemas_render_as_harmony_typescript(tok: Any, tools: list[dict[str, Any]]) -> None:
    messages = [{"role": "user", "content": "Hi"}]
    got = rendered_ids(tok, messages, tools, add_generation_prompt=True)
    expected = harmony_prompt([*header(tools), user("Hi")])
    if got != expected:
        ours, theirs = tok.decode(got), tok.decode(expected)
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        pytest.fail(
            f"the developer message differs from harmony's at char {at}: template {ours[max(0, at - 60) : at + 40]!r} "
            f"vs harmony {theirs[max(0, at - 60) : at + 40]!r}"
        )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tools=_TOOLS)
def test_tool_schemas_render_alike_in_llama_cpp_and_minijinja(llama_cpp: Any, tools: list[dict[str, Any]]) -> None:
    case: Case = ([{"role": "user", "content": "Hi"}], tools, True)
    expected = _transformers(case)
    assert_same("llama.cpp", _llama_cpp(llama_cpp, case), expected)
    assert_same("minijinja", _minijinja(case), expected)


# ---- the same renderings in llama.cpp's engine and TGI's minijinja -----------------------------------------------

RICH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "plan",
        "description": "Plan a trip.\nTwo lines.",
        "parameters": {
            "type": "object",
            "properties": {
                "stops": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                },
                "mode": {"type": "string", "enum": ["car", "train"], "default": "car", "description": "How."},
                "budget": {"oneOf": [{"type": "number"}, {"type": "string", "description": "x"}], "default": 5},
                "extra": {"type": "object", "description": "More.", "default": {"a": [1, 'b"c'], "n": None}},
                "note": {"type": ["string", "null"], "nullable": True},
                "any": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
            "required": ["stops"],
        },
    },
}
Case = tuple[list[dict[str, Any]], list[dict[str, Any]] | None, bool]
CASES: dict[str, Case] = {
    **{f"prompt-{k}": (m, [WEATHER] if "tool" in k else None, True) for k, (m, _) in PROMPTS.items()},
    "trained-with-reasoning": (
        [{"role": "user", "content": "q"}, {"role": "assistant", "reasoning_content": "th", "content": "a"}],
        None,
        False,
    ),
    "preamble": (
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "q"},
            {"role": "assistant", "reasoning_content": "th", "content": "Checking.", "tool_calls": [CALL]},
            {"role": "tool", "content": "sunny"},
            {"role": "assistant", "content": "Sunny."},
        ],
        [WEATHER, RICH_TOOL],
        False,
    ),
}


def _transformers(case: Case) -> str:
    from hf_chat_templates import _compat

    messages, tools, prompt = copy.deepcopy(case)
    texts = _compat.render_conversations(template(), [messages], tools, add_generation_prompt=prompt, **DEFAULTS)
    return texts[0]


@pytest.fixture(scope="module")
def llama_cpp() -> Iterator[Any]:
    """One engine for the module (it compiles its WebAssembly module once), released before the interpreter exits."""
    from ggufdoctor.engines.llamacpp_engine import LlamaCppEngine

    engine = LlamaCppEngine()
    yield engine
    del engine
    gc.collect()


def _llama_cpp(engine: Any, case: Case) -> str:
    assert engine.available, f"llama.cpp's engine cannot run: {engine.unavailable_reason}"
    messages, tools, prompt = copy.deepcopy(case)
    context = {**DEFAULTS, "messages": messages, "tools": tools, "add_generation_prompt": prompt}
    out = engine.render(template(), context)
    assert out.error is None, f"llama.cpp cannot render the template: {out.error}"
    return str(out.text)


def _minijinja(case: Case) -> str:
    """minijinja as TGI configures it: lenient undefined values, pycompat methods, its own tojson."""
    import minijinja

    env = minijinja.Environment(undefined_behavior="lenient", pycompat=True)
    messages, tools, prompt = copy.deepcopy(case)
    context = {**DEFAULTS, "messages": normalize_for_template(messages), "tools": tools}
    return str(env.render_str(template(), add_generation_prompt=prompt, **context))


@pytest.mark.parametrize("engine", ["llama.cpp", "minijinja"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_other_engines_render_as_transformers(engine: str, case: str, request: pytest.FixtureRequest) -> None:
    expected = _transformers(CASES[case])
    if engine == "llama.cpp":
        got = _llama_cpp(request.getfixturevalue("llama_cpp"), CASES[case])
    else:
        got = _minijinja(CASES[case])
    assert_same(engine, got, expected)


def assert_same(engine: str, got: str, expected: str) -> None:
    at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    ours, theirs = got[max(0, at - 40) : at + 40], expected[max(0, at - 40) : at + 40]
    where = f"char {at}: {ours!r} where transformers gives {theirs!r}"
    assert got == expected, f"{engine} renders differently at {where}"
