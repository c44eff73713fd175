"""Input formats of conversation records, brought to one shape: `{"messages": [...], "tools": [...]}`.

`messages` and `openai` (OpenAI fine-tuning data) hold a list of `{"role", "content"}` messages; `sharegpt` holds
`conversations` of `{"from", "value"}` turns, mapped here onto messages (a `function_call` turn becomes an assistant
tool call, an `observation` its result). `auto` decides per record. Every shape a template or a check could trip
on (`tool_calls` that is not a list, a call without a name, content parts that are not objects) is a problem
named with its message index, so nothing downstream meets a TypeError.
"""

from __future__ import annotations

import json
from typing import Any

INPUT_FORMATS = ("auto", "openai", "sharegpt", "messages")
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
    "function_call": "function_call",
    "observation": "tool",
    "tool": "tool",
    "function_response": "tool",
}
SHAREGPT_STEP = "sharegpt"
TOOLS_STEP = "tools-json"


def _call_problem(i: int, k: int, call: Any) -> str | None:
    where = f"message {i}: tool call {k}"
    if not isinstance(call, dict):
        return f"{where} is not an object"
    function = call.get("function", call)
    if not isinstance(function, dict):
        return f"{where}: 'function' is not an object"
    if not isinstance(function.get("name"), str) or not function["name"]:
        return f"{where} has no function name"
    arguments = function.get("arguments")
    if arguments is not None and not isinstance(arguments, (dict, str)):
        return f"{where}: 'arguments' must be an object or a JSON string, not {type(arguments).__name__}"
    return None


def _message_problem(i: int, m: Any) -> str | None:
    if not isinstance(m, dict):
        return f"message {i} is not an object"
    if not isinstance(m.get("role"), str):
        return f"message {i} has no 'role'"
    content = m.get("content")
    if content is not None and not isinstance(content, (str, list)):
        return f"message {i}: 'content' must be a string, a list of parts or null, not {type(content).__name__}"
    for k, part in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(part, dict):
            return f"message {i}: content part {k} is not an object"
    calls = m.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        return f"message {i}: 'tool_calls' must be a list, not {type(calls).__name__}"
    for k, call in enumerate(calls or ()):
        problem = _call_problem(i, k, call)
        if problem:
            return problem
    return None


def validate_record(obj: Any) -> str | None:
    """Why a parsed record is not a conversation `{"messages": [...], "tools": [...]}`, or None when it is one."""
    if not isinstance(obj, dict):
        return f"expected a JSON object, found {type(obj).__name__}"
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        return "no 'messages' list (or it is empty)"
    for i, m in enumerate(messages):
        problem = _message_problem(i, m)
        if problem:
            return problem
    tools = obj.get("tools")
    if tools is not None and not isinstance(tools, list):
        return "'tools' must be a list"
    for k, tool in enumerate(tools or ()):
        if not isinstance(tool, dict):
            return f"tool {k} is not an object"
    return None


def _tools(value: Any, steps: list[str]) -> tuple[Any, str | None]:
    """A tools column as a list: a JSON string is parsed, a bare function spec is wrapped as OpenAI writes it."""
    if isinstance(value, str):
        if not value.strip():
            return None, None
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return None, "'tools' is a string that is not a JSON list"
        steps.append(TOOLS_STEP)
    if isinstance(value, list):
        value = [
            {"type": "function", "function": t}
            if isinstance(t, dict) and "name" in t and "function" not in t and "type" not in t
            else t
            for t in value
        ]
    return value, None


def _function_calls(value: Any, first_id: int) -> tuple[list[dict[str, Any]], str | None]:
    """The OpenAI tool calls of a ShareGPT `function_call` turn: JSON `{"name", "arguments"}` or a list of them."""
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except (json.JSONDecodeError, RecursionError):
        return [], 'is not JSON {"name": ..., "arguments": ...}'
    calls = parsed if isinstance(parsed, list) else [parsed]
    out = []
    for k, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return [], "has no function name"
        arguments = call.get("arguments", call.get("parameters", {}))
        function = {"name": call["name"], "arguments": arguments}
        out.append({"id": f"call_{first_id + k}", "type": "function", "function": function})
    return out, None


def _sharegpt_message(turn: Any, i: int, pending: list[dict[str, Any]], count: int) -> tuple[Any, str | None]:
    """One ShareGPT turn as a message; `pending` holds the calls still waiting for their results."""
    if not isinstance(turn, dict):
        return None, f"turn {i} is not an object"
    source = turn.get("from", turn.get("role"))
    value = turn.get("value", turn.get("content"))
    if not isinstance(source, str):
        return None, f"turn {i} has no 'from'"
    role = SHAREGPT_ROLES.get(source.lower())
    if role is None:
        known = ", ".join(sorted(SHAREGPT_ROLES))
        return None, f"turn {i}: unknown role {source!r} (known: {known})"
    if role == "function_call":
        calls, problem = _function_calls(value, count)
        if problem:
            return None, f"turn {i}: function_call {problem}"
        pending[:] = list(calls)
        return {"role": "assistant", "content": None, "tool_calls": calls}, None
    if value is not None and not isinstance(value, (str, list)):
        return None, f"turn {i}: 'value' must be a string, not {type(value).__name__}"
    message: dict[str, Any] = {"role": role, "content": value}
    if role == "tool" and pending:
        call = pending.pop(0)
        message.update(tool_call_id=call["id"], name=call["function"]["name"])
    return message, None


def from_sharegpt(obj: dict[str, Any], column: str) -> tuple[dict[str, Any] | None, str | None]:
    """A ShareGPT record as messages: a `system` column becomes the first message."""
    turns = obj.get(column)
    if not isinstance(turns, list) or not turns:
        other = next((c for c in ("messages", "conversations") if c != column and isinstance(obj.get(c), list)), None)
        hint = f"; the record has {other!r}: try --input-format auto" if other else ""
        return None, f"no {column!r} list (or it is empty){hint}"
    messages: list[dict[str, Any]] = []
    system = obj.get("system")
    if isinstance(system, str) and system:
        messages.append({"role": "system", "content": system})
    pending: list[dict[str, Any]] = []
    calls = 0
    for i, turn in enumerate(turns):
        message, problem = _sharegpt_message(turn, i, pending, calls)
        if problem:
            return None, problem
        calls += len(message.get("tool_calls") or ())
        messages.append(message)
    return {"messages": messages}, None


def _is_sharegpt(turns: Any) -> bool:
    return isinstance(turns, list) and bool(turns) and isinstance(turns[0], dict) and "from" in turns[0]


def detect(obj: dict[str, Any], messages_column: str) -> str:
    """`sharegpt` or `messages` for one record (auto): ShareGPT turns carry `from`, messages carry `role`."""
    if messages_column in obj and not _is_sharegpt(obj[messages_column]):
        return "messages"
    if _is_sharegpt(obj.get(messages_column)) or _is_sharegpt(obj.get("conversations")):
        return "sharegpt"
    return "messages"


def to_conversation(
    obj: Any, input_format: str, messages_column: str | None, tools_column: str
) -> tuple[dict[str, Any] | None, str | None, tuple[str, ...]]:
    """(record, None, steps) for a record in `input_format`, or (None, why, ()) when it is not a conversation;
    `steps` names the mappings applied (ShareGPT turns, a JSON-string tools column)."""
    if not isinstance(obj, dict):
        return None, f"expected a JSON object, found {type(obj).__name__}", ()
    steps: list[str] = []
    kind = detect(obj, messages_column or "messages") if input_format == "auto" else input_format
    if kind == "sharegpt":
        column = messages_column or "conversations"
        if input_format == "auto" and not _is_sharegpt(obj.get(column)):
            column = "conversations"
        if not _is_sharegpt(obj.get(column)) and isinstance(obj.get(column), list) and obj[column]:
            record: dict[str, Any] = {"messages": obj[column]}
        else:
            mapped, problem = from_sharegpt(obj, column)
            if mapped is None:
                return None, problem, ()
            record = mapped
            steps.append(SHAREGPT_STEP)
    else:
        column = messages_column or "messages"
        if column not in obj and input_format == "auto" and isinstance(obj.get("conversations"), list):
            column = "conversations"
        record = {"messages": obj.get(column)}
        if column != "messages" and not isinstance(record["messages"], list):
            return None, f"no {column!r} list (or it is empty)", ()
    tools, problem = _tools(obj.get(tools_column), steps)
    if problem:
        return None, problem, ()
    if tools is not None:
        record["tools"] = tools
    problem = validate_record(record)
    return (None, problem, ()) if problem else (record, None, tuple(steps))
