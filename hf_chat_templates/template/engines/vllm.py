"""vLLM's profile: transformers' own rendering, after vLLM's preprocessing of the request, reproduced in Python.

vLLM's OpenAI-compatible server renders a chat with the model's template through transformers
(`vllm/renderers/hf.py`, `safe_apply_chat_template` calls `tokenizer.apply_chat_template`), but first rewrites the
messages (`vllm/renderers/chat_utils.py`, formerly `vllm/entrypoints/chat_utils.py`, `parse_chat_messages`):

- the content format is detected from the template's syntax tree (`vllm/renderers/hf.py`, `_detect_content_format`):
  "openai" when the template loops over a message's `content`, else "string";
- every message is rebuilt from a few keys (`_parse_chat_message_content`): role and content; an assistant's
  `tool_calls` and `reasoning` (written as `reasoning` and `reasoning_content`); a tool's `tool_call_id`; `name`
  and `task` when strings; a developer's `tools`. Every other key is dropped, `reasoning_content` and `thinking`
  given as input included;
- content becomes parts (`_parse_chat_message_content_parts`): a string is one text part, None is no part; in the
  "string" format the parts' texts are joined with "\\n" (None content becomes ""), in the "openai" format they stay
  `{"type": "text", "text": ...}` parts (a string content becomes a list of one part); a tool message's text parts
  are always joined with "\\n";
- in the "openai" format a text part keeps the keys vLLM does not know (`_collect_extra_fields`);
- tool-call `arguments` given as a JSON string are parsed into a dict; empty, invalid or non-object arguments become
  `{}`; an empty `tool_calls` list is removed; a call that is not of type "function" is refused
  (`_postprocess_messages`);
- the tools are the request's pydantic models dumped (`[tool.model_dump() for tool in request.tools]`, None when
  empty): each function has `description` and `parameters`, None when not given (`FunctionDefinition`).

Then transformers renders the result as `apply_chat_template` does (None values dropped), in its own sandbox. What
is not reproduced, and said so: the server's pydantic validation of messages against OpenAI's types (which say
`arguments` is a string; `LLM.chat` validates nothing); the filtering of template kwargs to those the template reads
(no effect on the text); media parts, which a text-only model refuses and a multimodal one replaces with its
placeholders (the profile refuses them, naming the part); the removal of Claude Code's billing-header line from
system text; Mistral tokenizers and gpt-oss, which vLLM renders without the chat template.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
from collections import deque
from collections.abc import Iterator
from typing import Any, Literal

from ... import _compat
from ..limits import RenderBudget, RenderLimits, check_output, limited
from ..rendering import Rendered, _is_refusal, describe_exception
from .base import EngineRendered, Messages, RenderJob, RequestRewrite, Tools

ContentFormat = Literal["string", "openai"]

# The vLLM source this port follows, compared line by line: chat preprocessing as one module, at this commit of
# vllm-project/vllm's main branch (later than v0.18.2, whose `vllm.renderers` has no `chat_utils`; since split into a
# `vllm/renderers/chat_utils/` package). `engine-parity` names it in its message and detail.
VLLM_FILE = "vllm/renderers/chat_utils.py"
VLLM_COMMIT = "b1fd9757f95ec13054bfa6063ed8d1b97ae0cb30"
VLLM_VERSION = f"main@{VLLM_COMMIT[:12]}"

# vllm/renderers/chat_utils.py, MM_PARSER_MAP: the part types read as text, and the key holding their text
TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}
SKIP_NONE_TEXT = ("text", "refusal")  # PART_TYPES_TO_SKIP_NONE_CONTENT
MEDIA_PARTS = (
    "input_image",
    "image_url",
    "image_embeds",
    "audio_embeds",
    "video_embeds",
    "prompt_embeds",
    "image_pil",
    "audio_url",
    "input_audio",
    "video_url",
)
# The keys of every content part type vLLM knows (`_KNOWN_CONTENT_PART_FIELDS`); a text part keeps the others
KNOWN_PART_KEYS = frozenset(
    {"type", "uuid", "detail", "closed", "name", "data", "file", "file_id", *TEXT_PARTS.values(), *MEDIA_PARTS}
)
# The keys vLLM looks for, in order, in a part without a type or with a uuid
DIRECT_KEYS = (
    "image_url",
    "image_pil",
    "image_embeds",
    "audio_embeds",
    "video_embeds",
    "prompt_embeds",
    "audio_url",
    "input_audio",
    "video_url",
    "tool_reference",
)
SUPPORTED_PARTS = sorted({*TEXT_PARTS, *MEDIA_PARTS, "tool_reference"})


class VllmRequestError(ValueError):
    """vLLM refuses the request before any template runs (an unsupported part, a message without a role)."""


# ---- content format: vllm/renderers/hf.py, _detect_content_format and the helpers it calls --------------------


def _is_var_access(node: Any, varname: str) -> bool:
    import jinja2.nodes

    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == varname


def _is_attr_access(node: Any, varname: str, key: str) -> bool:
    import jinja2.nodes

    if isinstance(node, jinja2.nodes.Getitem):
        return _is_var_access(node.node, varname) and isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == key
    if isinstance(node, jinja2.nodes.Getattr):
        return _is_var_access(node.node, varname) and node.attr == key
    return False


def _is_var_or_elems_access(node: Any, varname: str, key: str | None = None) -> bool:
    import jinja2.nodes

    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Test):
        return _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _is_var_or_elems_access(node.node, varname, key)
    return _is_attr_access(node, varname, key) if key else _is_var_access(node, varname)


def _names_assigned_from(root: Any, varname: str) -> Iterator[str]:
    """`varname` and every name `{% set %}` gives it or its elements, transitively
    (`_iter_nodes_assign_var_or_elems`)."""
    import jinja2.nodes

    yield varname
    related = deque([varname])
    while related:
        name = related.popleft()
        for assign in root.find_all(jinja2.nodes.Assign):
            if _is_var_or_elems_access(assign.node, name) and isinstance(assign.target, jinja2.nodes.Name):
                yield assign.target.name
                if assign.target.name != name:
                    related.append(assign.target.name)


def _loop_targets(root: Any, iterated: list[str], key: str | None) -> Iterator[str]:
    """The loop variables of `{% for x in NAME %}` (or `NAME[key]`) for any NAME in `iterated`."""
    import jinja2.nodes

    for loop in root.find_all(jinja2.nodes.For):
        accessed = any(_is_var_or_elems_access(loop.iter, name, key) for name in iterated)
        if accessed and isinstance(loop.target, jinja2.nodes.Name):
            yield loop.target.name


def detect_content_format(template: str) -> ContentFormat:
    """The content format vLLM picks: "openai" when the template loops over a message's `content` (`{% for part in
    message['content'] %}` with `message` a loop variable over `messages`), else "string"; "string" too when the
    template does not compile, vLLM's default."""
    try:
        root = _compat.compile_template(template).environment.parse(template)
        message_names = list(_loop_targets(root, list(_names_assigned_from(root, "messages")), None))
        return "openai" if next(_loop_targets(root, message_names, "content"), None) is not None else "string"
    except Exception:  # vLLM logs the error and falls back to its default
        return "string"


# ---- messages: vllm/renderers/chat_utils.py, parse_chat_messages ----------------------------------------------


def _text_part(text: str, content_format: ContentFormat, part: dict[str, Any] | None = None) -> Any:
    """A text as vLLM writes it: the string, or in the "openai" format a text part with the part's other keys."""
    if content_format != "openai":
        return text
    extra = {k: v for k, v in (part or {}).items() if k not in KNOWN_PART_KEYS}
    return {"type": "text", "text": text, **extra}


def _parse_part(part: Any, content_format: ContentFormat, where: str) -> Any:
    """One content part as vLLM's `_parse_chat_message_content_part` leaves it for a text-only model: its text (or a
    text part), None when vLLM skips it; VllmRequestError where vLLM refuses it."""
    if isinstance(part, str):
        return _text_part(part, content_format)
    if not isinstance(part, dict):
        raise VllmRequestError(f"{where} is {type(part).__name__}, not a string or a dict: vLLM cannot parse it")
    part_type, uuid = part.get("type"), part.get("uuid")
    if part_type is None or uuid is not None:  # vLLM then reads the part by its keys, not its type
        part_type = next((key for key in DIRECT_KEYS if key in part), None)
        if part_type is None:
            raise VllmRequestError(f"{where} has no 'type' vLLM reads: it refuses it (\"Missing 'type' field\")")
    if not isinstance(part_type, str):
        raise VllmRequestError(f"{where} has a 'type' that is not a string: vLLM refuses it")
    if part_type in TEXT_PARTS:
        text = part.get(TEXT_PARTS[part_type])
        if text is None and part_type in SKIP_NONE_TEXT:
            return None  # vLLM logs "Skipping multimodal part" and goes on
        if not isinstance(text, str):
            raise VllmRequestError(f"{where} ({part_type!r}) has no text string: vLLM fails on it")
        return _text_part(text, content_format, part)
    if part_type == "tool_reference":
        name = part.get("name")
        return {"type": "tool_reference", "name": name} if content_format == "openai" else name
    if part_type in MEDIA_PARTS:
        raise VllmRequestError(
            f"{where} is a {part_type!r} part: vLLM refuses media for a text-only model (a multimodal model gets "
            "its placeholder instead); give the text alone to compare this conversation"
        )
    raise VllmRequestError(
        f'{where} has the type {part_type!r}: vLLM refuses it ("Unsupported chat content part type"; '
        f"supported: {', '.join(SUPPORTED_PARTS)})"
    )


def _content(message: dict[str, Any], content_format: ContentFormat, index: int) -> Any:
    content = message.get("content")
    if content is None:
        parts: list[Any] = []
    elif isinstance(content, str):
        parts = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        parts = content
    else:
        raise VllmRequestError(f"message {index}: content is {type(content).__name__}, not a string or a list")
    parsed = [_parse_part(part, content_format, f"message {index}, part {j}") for j, part in enumerate(parts)]
    parsed = [part for part in parsed if part]  # vLLM keeps the truthy results: an empty text is no part
    return parsed if content_format == "openai" else "\n".join(parsed)


def _parse_message(message: dict[str, Any], content_format: ContentFormat, index: int) -> dict[str, Any]:
    """`_parse_chat_message_content`: the message rebuilt from the keys vLLM reads."""
    if not isinstance(message, dict) or "role" not in message:
        raise VllmRequestError(f"message {index} has no role: vLLM refuses the request")
    role = message["role"]
    result: dict[str, Any] = {"role": role, "content": _content(message, content_format, index)}
    if role == "assistant":
        if message.get("tool_calls") is not None:
            result["tool_calls"] = list(copy.deepcopy(message["tool_calls"]))
        if message.get("reasoning") is not None:
            result["reasoning"] = result["reasoning_content"] = message["reasoning"]
    elif role == "tool":
        if "tool_call_id" in message:
            result["tool_call_id"] = message["tool_call_id"]
        content = result["content"]
        if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            result["content"] = "\n".join(p.get("text", "") for p in content)
    if isinstance(message.get("name"), str):
        result["name"] = message["name"]
    if isinstance(message.get("task"), str):
        result["task"] = message["task"]
    if role == "developer":
        result["tools"] = copy.deepcopy(message.get("tools"))
    return result


def _postprocess(conversation: list[dict[str, Any]]) -> None:
    """`_postprocess_messages`: an empty `tool_calls` removed; `arguments` parsed from a JSON string, kept as a dict,
    and `{}` for anything else (empty, not JSON, JSON that is not an object, None)."""
    for message in conversation:
        tool_calls = message.get("tool_calls")
        if message["role"] != "assistant" or not isinstance(tool_calls, list):
            continue
        if not tool_calls:
            message.pop("tool_calls")
            continue
        for call in tool_calls:
            function = call.get("function") if isinstance(call, dict) else None
            if (
                not isinstance(call, dict)
                or call.get("type", "function") != "function"
                or not isinstance(function, dict)
            ):
                raise VllmRequestError("a tool call is not an object of type 'function' with a 'function' object")
            arguments = function.get("arguments")
            if isinstance(arguments, str) and arguments:
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError:
                    arguments = None  # vLLM logs a warning and goes on with {}
            function["arguments"] = arguments if isinstance(arguments, dict) else {}


def vllm_conversation(messages: list[dict[str, Any]], content_format: ContentFormat) -> list[dict[str, Any]]:
    """The messages as vLLM hands them to `apply_chat_template` (`parse_chat_messages`); `messages` is not changed.
    Raises VllmRequestError where vLLM refuses the request."""
    conversation = [_parse_message(message, content_format, i) for i, message in enumerate(messages)]
    _postprocess(conversation)
    return conversation


def vllm_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The tools as the server passes them: `ChatCompletionToolsParam(...).model_dump()` for each (extra keys kept
    after the declared ones), None for no tools or an empty list."""
    if not tools:
        return None
    dumped = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise VllmRequestError(f"tool {i} has no function with a name: vLLM's request validation refuses it")
        declared = {key: function.get(key) for key in ("name", "description", "parameters")}
        extra_function = {k: v for k, v in function.items() if k not in declared}
        extra_tool = {k: v for k, v in tool.items() if k not in ("type", "function")}
        entry = {"type": tool.get("type", "function"), "function": {**declared, **extra_function}, **extra_tool}
        dumped.append(copy.deepcopy(entry))
    return dumped


# ---- the steps of the preprocessing a template cannot see past ----------------------------------------------------


def parsed_arguments(messages: Messages, tools: Tools) -> tuple[Messages, Tools]:
    """The JSON-string tool-call arguments that parse into an object, parsed, as `_postprocess_messages` does. The
    arguments vLLM replaces with `{}` (empty, not JSON, not an object) are left: that loses them, it is no rewrite."""
    rewritten, changed = [], False
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and isinstance(calls, list):
            parsed_calls = []
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                arguments = function.get("arguments") if isinstance(function, dict) else None
                parsed = _json_object(arguments) if isinstance(arguments, str) else None
                if parsed is not None and isinstance(function, dict):
                    call, changed = {**call, "function": {**function, "arguments": parsed}}, True
                parsed_calls.append(call)
            message = {**message, "tool_calls": parsed_calls}
        rewritten.append(message)
    return (rewritten if changed else messages), tools


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def null_tool_fields(messages: Messages, tools: Tools) -> tuple[Messages, Tools]:
    """A tool function given without `description` or `parameters` with them as None, in the order the request's
    pydantic model dumps them (`FunctionDefinition`: name, description, parameters, then the rest)."""
    rewritten, changed = [], False
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and any(key not in function for key in ("description", "parameters")):
            declared = {key: function.get(key) for key in ("name", "description", "parameters")}
            tool, changed = {**tool, "function": {**declared, **function}}, True
        rewritten.append(tool)
    return messages, (rewritten if changed else tools)


# What vLLM's preprocessing does that the template writes as it is given (`engine-parity` names them when they
# explain a difference): the rest of it (string content sent as parts, keys dropped, None content sent as "") may
# break a template that reads the request as transformers gives it, and stays a difference to report.
REQUEST_REWRITES = (
    RequestRewrite(
        "parses JSON-string tool-call arguments into objects",
        "pass tool-call arguments as objects in training, as vLLM hands them to the template, to train what it serves",
        parsed_arguments,
    ),
    RequestRewrite(
        "passes `parameters: null` (and `description: null`) for a tool given without them",
        'give every tool a parameters schema (`{"type": "object", "properties": {}}` for none), so that '
        "training and vLLM render it alike",
        null_tool_fields,
    ),
)


# ---- the profile --------------------------------------------------------------------------------------------------


class VllmEngine:
    """vLLM's OpenAI-compatible server with a Hugging Face tokenizer: its preprocessing, then transformers."""

    name = "vllm"
    label = f"vllm ({VLLM_VERSION})"  # how findings name it: the vLLM source reproduced
    request_rewrites = REQUEST_REWRITES

    def __init__(self, limits: RenderLimits | None = None) -> None:
        self.limits = limits or RenderLimits.from_env()

    @property
    def version(self) -> str:
        import transformers

        return (
            f"vLLM's chat preprocessing ({VLLM_FILE} at {VLLM_VERSION}, reproduced) + transformers "
            f"{transformers.__version__}"
        )

    @property
    def follows(self) -> dict[str, str]:
        """The vLLM source the preprocessing reproduces: repository, file and commit."""
        return {"repository": "vllm-project/vllm", "file": VLLM_FILE, "commit": VLLM_COMMIT, "version": VLLM_VERSION}

    def unavailable(self) -> str | None:
        return None  # transformers, the only engine it needs, is a dependency of the package

    def render_all(self, template: str, jobs: list[RenderJob], *, clock: _dt.datetime) -> list[Rendered]:
        """The jobs share one budget, as a run's renders of one template do (`limits.RenderBudget`): once a render
        trips a limit, the rest fail at once with the same message."""
        content_format = detect_content_format(template)
        budget = RenderBudget(self.limits)
        with _compat.frozen_clock(clock):
            return [self._render(template, job, content_format, budget) for job in jobs]

    def _render(self, template: str, job: RenderJob, content_format: ContentFormat, budget: RenderBudget) -> Rendered:
        try:
            conversation = vllm_conversation(job.messages, content_format)
            tools = vllm_tools(job.tools)
        except VllmRequestError as err:
            return EngineRendered(None, f"vLLM refuses the request: {err}", input_refused=True)
        note = changes(job.messages, conversation, job.tools, tools, content_format)
        try:
            with limited(self.limits, budget) as limits:
                (text,) = _compat.render_conversations(
                    template,
                    [_compat.normalize_messages(conversation)],
                    tools,
                    add_generation_prompt=job.add_generation_prompt,
                    **job.variables,
                )
            return EngineRendered(check_output(text, limits, budget), note=note)
        except Exception as err:  # a template may raise anything; the check compares the outcomes
            return EngineRendered(None, describe_exception(err), refused=_is_refusal(err), note=note)


def changes(
    messages: list[dict[str, Any]],
    conversation: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    vllm_tools: list[dict[str, Any]] | None,
    content_format: ContentFormat,
) -> str | None:
    """What vLLM's preprocessing changed in the input, in words (None when nothing that reaches the template)."""
    found: list[str] = []
    for i, (given, sent) in enumerate(zip(messages, conversation)):
        dropped = sorted(k for k, v in given.items() if v is not None and k not in sent)
        if dropped:
            found.append(f"message {i}: vLLM drops {', '.join(dropped)}")
        content = given.get("content")
        if content_format == "openai" and isinstance(content, str):
            found.append(f"message {i}: the string content arrives as a list of one text part")
        elif isinstance(content, list) and isinstance(sent["content"], str) and len(content) > 1:
            found.append(f"message {i}: the content parts arrive joined with a newline")
        elif content is None and sent["content"] in ("", []):
            found.append(f"message {i}: content None arrives as {sent['content']!r}")
        functions = [c.get("function") for c in sent.get("tool_calls") or [] if isinstance(c, dict)]
        given_calls = [c.get("function") for c in given.get("tool_calls") or [] if isinstance(c, dict)]
        if functions and any(isinstance(f, dict) and isinstance(f.get("arguments"), str) for f in given_calls):
            found.append(f"message {i}: JSON-string tool-call arguments arrive parsed into objects")
    for j, (given_tool, sent_tool) in enumerate(zip(tools or [], vllm_tools or [])):
        added = [k for k, v in sent_tool["function"].items() if v is None and k not in given_tool.get("function", {})]
        if added:
            found.append(f"tool {j}: {' and '.join(added)} arrive as None")
    if not found:
        return None
    why = "loops over message content" if content_format == "openai" else "never loops over message content"
    shown = "; ".join(found[:4]) + (f"; and {len(found) - 4} more" if len(found) > 4 else "")
    return f"vLLM's preprocessing (content format {content_format!r}: the template {why}): {shown}"
