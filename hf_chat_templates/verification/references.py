"""Official renderers as references: openai-harmony for gpt-oss, llama-models for Llama 3.2.

`reference-parity` renders each probe both ways and compares token ids. A probe the official renderer cannot
express is skipped, not failed. Both renderers are driven from OpenAI/transformers-format messages:

- Harmony: system/developer as `SystemContent` (date from the frozen clock, reasoning effort from the kwargs) and
  `DeveloperContent` (instructions, function tools); assistant reasoning on the analysis channel, content written
  next to tool calls as a preamble on commentary before them (the Harmony guide's "Preambles"), tool calls on
  commentary to `functions.NAME` with `<|constrain|>json`, answers on final; tool results from `functions.NAME`.
  Prompts use `render_conversation_for_completion` with the `auto_drop_analysis` kwarg (default True, harmony's).
  A conversation that ends with an assistant turn is that turn's prompt, as harmony renders it, followed by the
  turn with its analysis (`render_conversation_for_training` with `auto_drop_analysis=False`).
- Llama 3.2: `ChatFormat.encode_dialog_prompt` with `ToolPromptFormat.python_list`; with tools and no system
  message, the zero-shot system prompt documented in llama-models' `llama3_2/text_prompt_format.md`.
- Any Mistral instruct template (a folder's, a `--template` file's): mistral-common, for the version the template
  is found to follow (`mistral_reference`).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _compat
from ..errors import missing_dependency
from ..template.engines import json_worker
from ..tokenizer.base import o200k_tiktoken_file
from . import mistral_reference
from .context import CLOCKS

if TYPE_CHECKING:
    from ..conversations.probes import Probe
    from .context import VerifyContext

# llama-models' llama3_2/text_prompt_format.md, "Zero shot function calling".
LLAMA32_TOOL_SYSTEM_PROMPT = (
    "You are an expert in composing functions. You are given a question and a set of possible functions.\n"
    "Based on the question, you will need to make one or more function/tool calls to achieve the purpose.\n"
    "If none of the function can be used, point it out. If the given question lacks the parameters required by "
    "the function,\nalso point it out. You should only return the function call in tools call sections.\n\n"
    "If you decide to invoke any of the function(s), you MUST put it in the format of [func_name1(params_name1="
    "params_value1, params_name2=params_value2...), func_name2(params)]\nYou SHOULD NOT include any other text in "
    "the response.\n\nHere is a list of functions in JSON format that you can invoke.\n\n{functions}"
)


class Unsupported(Exception):
    """The official renderer cannot express this probe."""


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        if any(not isinstance(p, dict) or p.get("type", "text") != "text" for p in content):
            raise Unsupported("content parts other than text")
        return "".join(p.get("text", "") for p in content)
    raise Unsupported(f"content of type {type(content).__name__}")


def _arguments(fn: dict[str, Any]) -> str:
    args = fn.get("arguments", {})
    return args if isinstance(args, str) else json.dumps(args)


# ---- Harmony ---------------------------------------------------------------------------------------------------


HARMONY_VOCABULARY_ENV = "TIKTOKEN_ENCODINGS_BASE"


@functools.lru_cache(maxsize=1)
def harmony_encoding() -> Any:
    """The gpt-oss encoding, loaded once per process (it reads and indexes the o200k vocabulary)."""
    try:
        import openai_harmony  # noqa: F401
    except ImportError:
        raise missing_dependency("openai-harmony", "reference", "reference-parity for gpt-oss") from None
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    # Harmony reads the vocabulary's folder from this variable while it loads; set for the load only, so the
    # process environment (and what a child process inherits) is left as the caller had it.
    if os.environ.get(HARMONY_VOCABULARY_ENV):
        return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    os.environ[HARMONY_VOCABULARY_ENV] = str(o200k_tiktoken_file().parent)
    try:
        return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    finally:
        del os.environ[HARMONY_VOCABULARY_ENV]


def _harmony_turns(messages: list[dict[str, Any]]) -> list[Any]:
    """The conversation's turns as Harmony messages: reasoning on analysis, calls on commentary, answers on final."""
    from openai_harmony import Author, Message, Role

    out: list[Any] = []
    called: list[str] = []
    for m in messages:
        role = m["role"]
        if role == "user":
            out.append(Message.from_role_and_content(Role.USER, _text(m.get("content"))))
        elif role == "assistant":
            reasoning = m.get("reasoning_content") or m.get("thinking")
            if reasoning:
                out.append(Message.from_role_and_content(Role.ASSISTANT, reasoning).with_channel("analysis"))
            preamble = _text(m.get("content")) if m.get("tool_calls") else ""
            if preamble:
                out.append(Message.from_role_and_content(Role.ASSISTANT, preamble).with_channel("commentary"))
            for call in m.get("tool_calls") or []:
                fn = call.get("function", call)
                called.append(fn["name"])
                out.append(
                    Message.from_role_and_content(Role.ASSISTANT, _arguments(fn))
                    .with_channel("commentary")
                    .with_recipient(f"functions.{fn['name']}")
                    .with_content_type("<|constrain|>json")
                )
            if not m.get("tool_calls"):
                out.append(Message.from_role_and_content(Role.ASSISTANT, _text(m.get("content"))).with_channel("final"))
        elif role == "tool":
            name = m.get("name") or (called.pop(0) if called else None)
            if name is None:
                raise Unsupported("a tool result with no tool call before it")
            out.append(
                Message.from_author_and_content(Author.new(Role.TOOL, f"functions.{name}"), _text(m.get("content")))
                .with_channel("commentary")
                .with_recipient("assistant")
            )
        else:
            raise Unsupported(f"role {role!r}")
    return out


def harmony_ids(probe: Probe, *, date: str, kwargs: dict[str, Any]) -> list[int]:
    from openai_harmony import (
        Conversation,
        DeveloperContent,
        Message,
        ReasoningEffort,
        RenderConversationConfig,
        Role,
        SystemContent,
        ToolDescription,
    )

    if probe.continue_final_message:
        raise Unsupported("harmony has no prefill of a final message")
    effort = {"low": ReasoningEffort.LOW, "medium": ReasoningEffort.MEDIUM, "high": ReasoningEffort.HIGH}[
        kwargs.get("reasoning_effort", "medium")
    ]
    system = SystemContent.new().with_reasoning_effort(effort)
    if kwargs.get("current_date"):
        system = system.with_conversation_start_date(kwargs["current_date"])
    if kwargs.get("model_identity"):
        system = system.with_model_identity(kwargs["model_identity"])
    messages = list(probe.messages)
    out = [Message.from_role_and_content(Role.SYSTEM, system)]
    instructions = None
    if messages and messages[0]["role"] in ("system", "developer"):
        instructions = _text(messages[0].get("content"))
        messages = messages[1:]
    if instructions or probe.tools:
        developer = DeveloperContent.new()
        if instructions:
            developer = developer.with_instructions(instructions)
        if probe.tools:
            developer = developer.with_function_tools(
                [
                    ToolDescription.new(
                        t["function"]["name"],
                        t["function"].get("description", ""),
                        parameters=t["function"].get("parameters"),
                    )
                    for t in probe.tools
                ]
            )
        out.append(Message.from_role_and_content(Role.DEVELOPER, developer))
    encoding = harmony_encoding()
    drop = RenderConversationConfig(auto_drop_analysis=bool(kwargs.get("auto_drop_analysis", True)))
    if probe.ends_with_assistant and not probe.add_generation_prompt:
        # The messages before the trained turn are its prompt, rendered as harmony renders it; the turn keeps its
        # analysis, as the model's own template does (harmony's default for training would drop it).
        prompt = Conversation.from_messages(out + _harmony_turns(messages[:-1]))
        turn = Conversation.from_messages(_harmony_turns(messages[-1:]))
        keep = RenderConversationConfig(auto_drop_analysis=False)
        return list(encoding.render_conversation(prompt, drop)) + list(
            encoding.render_conversation_for_training(turn, keep)
        )
    out += _harmony_turns(messages)
    convo = Conversation.from_messages(out)
    if probe.add_generation_prompt:
        return list(encoding.render_conversation_for_completion(convo, Role.ASSISTANT, drop))
    return list(encoding.render_conversation(convo, drop))


# ---- Llama 3.2 -------------------------------------------------------------------------------------------------


def _llama_tool(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool["function"]
    params = dict(fn.get("parameters") or {})
    return {
        "name": fn["name"],
        "description": fn.get("description", ""),
        "parameters": {
            "type": "dict",
            "required": params.get("required", []),
            "properties": params.get("properties", {}),
        },
    }


def llama32_ids(probe: Probe, *, date: str, kwargs: dict[str, Any]) -> list[int]:
    try:
        from llama_models.datatypes import RawMessage, RawTextItem, StopReason, ToolCall, ToolPromptFormat
        from llama_models.llama3.chat_format import ChatFormat
        from llama_models.llama3.tokenizer import Tokenizer
    except ImportError:
        raise missing_dependency("llama-models", "reference", "reference-parity for Llama 3.2") from None
    if probe.continue_final_message:
        raise Unsupported("llama-models has no prefill of a final message")
    messages = list(probe.messages)
    raw = []
    if probe.tools:
        if messages and messages[0]["role"] == "system":
            raise Unsupported("a system message together with tools")
        functions = json.dumps([_llama_tool(t) for t in probe.tools], indent=4)
        raw.append(RawMessage(role="system", content=LLAMA32_TOOL_SYSTEM_PROMPT.format(functions=functions)))
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            if any(not isinstance(p, dict) or p.get("type", "text") != "text" for p in content):
                raise Unsupported("content parts other than text (images need the model's vision tokens)")
            content = [RawTextItem(text=p["text"]) for p in content]
        elif content is None:
            content = ""
        calls = []
        for j, call in enumerate(m.get("tool_calls") or []):
            fn = call.get("function", call)
            args = fn["arguments"] if isinstance(fn["arguments"], dict) else json.loads(fn["arguments"])
            calls.append(ToolCall(call_id=call.get("id", f"call_{j}"), tool_name=fn["name"], arguments=args))
        stop = StopReason.end_of_turn if m["role"] == "assistant" else None
        raw.append(RawMessage(role=m["role"], content=content, tool_calls=calls, stop_reason=stop))
    chat = ChatFormat(Tokenizer.get_instance())
    ids = list(chat.encode_dialog_prompt(raw, ToolPromptFormat.python_list).tokens)
    if not probe.add_generation_prompt:
        header = _compat.llama_header_ids(chat, "assistant")
        ids = ids[: len(ids) - len(header)]
    return ids


REFERENCES: dict[str, tuple[str, Callable[..., list[int]]]] = {
    "gpt-oss": ("openai-harmony", harmony_ids),
    "llama3.2-pythonic": ("llama-models", llama32_ids),
}


def _inputs(ctx: VerifyContext) -> tuple[Callable[..., list[int]], str, dict[str, Any]]:
    """The family's renderer, the frozen clock's date and the kwargs it renders with."""
    assert ctx.variant is not None and ctx.variant.family in REFERENCES
    renderer = REFERENCES[ctx.variant.family][1]
    date = CLOCKS[0].strftime("%Y-%m-%d" if ctx.variant.family == "gpt-oss" else "%d %b %Y")
    kwargs = dict(ctx.kwargs)
    if "strftime_now" in ctx.template and "current_date" not in kwargs:
        kwargs["current_date"] = date  # the template writes the (frozen) clock's date; so does the reference
    return renderer, date, kwargs


def reference_ids(ctx: VerifyContext, probe: Probe) -> list[int]:
    """The official renderer's ids for `probe` (raises Unsupported), with the frozen clock's date: from the worker
    `begin` started when it gave them, else rendered here."""
    begun = ctx.begun_references
    if begun is not None:
        found = begun().get(probe.id, {})
        if "ids" in found:
            return list(found["ids"])
        if "unsupported" in found:
            raise Unsupported(found["unsupported"])
    renderer, date, kwargs = _inputs(ctx)
    return renderer(probe, date=date, kwargs=kwargs)


# The worker's argument for mistral-common, the reference of every Mistral instruct template.
MISTRAL = "mistral"


def _worker_command(family: str) -> list[str]:
    return [sys.executable, "-P", "-m", WORKER_MODULE, family]


def prestart(family: str | None) -> None:
    """The worker `begin` hands the probes to, begun now for `family` when it has an official renderer (MISTRAL for
    a Mistral instruct template): it imports the renderer and loads its tokenizers while the caller loads its own."""
    if family in REFERENCES or family == MISTRAL:
        json_worker.prestart(_worker_command(family))


def uses_mistral_common(ctx: VerifyContext) -> bool:
    """Whether mistral-common is the template's reference: no bundled family's renderer, and Mistral's markup."""
    has_family = ctx.variant is not None and ctx.variant.family in REFERENCES
    return not has_family and mistral_reference.is_mistral_template(ctx.template, ctx.tool_template)


def mistral_outcomes(ctx: VerifyContext) -> tuple[list[mistral_reference.Case], dict[str, Any], dict[str, Any]]:
    """The cases, the template's renderings of them and every version's outcomes (mistral_reference.compare): from
    the worker `begin` started when it gave them, else computed here (raises MissingDependencyError)."""
    cases = mistral_reference.cases()
    begun = ctx.begun_references() if ctx.begun_references is not None else {}
    texts = begun.get("texts") or mistral_reference.rendered_texts(ctx.renderer, cases)
    compared = mistral_reference.compared_cases(cases, texts)
    found = begun.get(MISTRAL)
    if not isinstance(found, dict) or set(found) != set(mistral_reference.VERSIONS):
        found = mistral_reference.compare(compared, texts)
    return compared, texts, found


def mistral_sides(ctx: VerifyContext, case_id: str, version: str) -> tuple[list[Any], list[Any]]:
    """Both sides of one of `mistral_reference.cases()` on the version's vocabulary, the template's rendering and
    mistral-common's encoding: (id, text, special) per token (what `verify --html` aligns)."""
    cases = {c.id: c for c in mistral_reference.cases()}
    texts = mistral_reference.rendered_texts(ctx.renderer, [cases[case_id], cases["generation-prompt"]])
    default = mistral_reference.default_system_prompt(texts)
    got = mistral_reference.encode_text(version, texts[case_id] or "")
    expected = mistral_reference.reference_ids(version, cases[case_id], default)
    return mistral_reference.token_texts(version, got), mistral_reference.token_texts(version, expected)


def _begin_mistral(ctx: VerifyContext) -> None:
    cases = mistral_reference.cases()
    texts = mistral_reference.rendered_texts(ctx.renderer, cases)
    compared = mistral_reference.compared_cases(cases, texts)
    request = json.dumps({"family": MISTRAL, "cases": [c.to_json() for c in compared], "texts": texts})
    wait = json_worker.start(_worker_command(MISTRAL), request, WORKER_SECONDS)
    ctx.begun_references = functools.cache(lambda: {MISTRAL: wait(), "texts": texts})


def begin(ctx: VerifyContext) -> None:
    """The official renderer's ids of every probe begun in a process of its own (`references_worker`: its imports
    and its tokenizer load there, on another core), for `reference_ids` to take. What the worker could not give
    (it failed, or a probe raised there) is rendered here when asked for, so the outcome is the same."""
    if ctx.begun_references is not None:
        return
    if uses_mistral_common(ctx):
        if mistral_reference.available() is None:
            _begin_mistral(ctx)
        return
    if ctx.variant is None or ctx.variant.family not in REFERENCES:
        return
    _, date, kwargs = _inputs(ctx)
    fields = ("id", "messages", "tools", "add_generation_prompt", "continue_final_message")
    try:
        request = json.dumps(
            {
                "family": ctx.variant.family,
                "date": date,
                "kwargs": kwargs,
                "probes": [{name: getattr(p, name) for name in fields} for p in ctx.probes],
            }
        )
    except (TypeError, ValueError):  # what is not JSON is rendered here
        return
    wait = json_worker.start(_worker_command(ctx.variant.family), request, WORKER_SECONDS)
    ctx.begun_references = functools.cache(lambda: found if isinstance(found := wait(), dict) else {})


# How long the worker may take for every probe (a backstop: the renderers take well under a second).
WORKER_SECONDS = 120.0
WORKER_MODULE = "hf_chat_templates.verification.references_worker"
