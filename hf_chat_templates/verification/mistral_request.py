"""The request mistral-common is given for a conversation, as an OpenAI request carries it: tool-call arguments as
JSON strings, and the template's default system prompt (the text it writes between `[SYSTEM_PROMPT]` and
`[/SYSTEM_PROMPT]` when the conversation has none) as the system message, its `[THINK]`…`[/THINK]` sections as
thinking chunks where the version has them (mistral-common's SystemMessage takes a ThinkChunk; v13 encodes it between
its [THINK] and [/THINK] tokens)."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

BOS = "<s>"


def openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with JSON-string tool-call arguments, as an OpenAI request carries them."""
    out = copy.deepcopy(messages)
    for m in out:
        for call in m.get("tool_calls") or []:
            fn = call.get("function", call)
            if not isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.dumps(fn.get("arguments", {}))
    return out


def default_system_prompt(texts: dict[str, str | None]) -> str | None:
    """The system prompt the template writes when the conversation has none (Mistral Small 3.x, Devstral and
    Magistral templates carry one, as the model repositories' SYSTEM_PROMPT.txt): mistral-common is given it as
    the system message, so that the comparison is of the format, not of a default the template adds."""
    text = texts.get("generation-prompt") or ""
    found = re.match(re.escape(BOS) + r"\[SYSTEM_PROMPT\](.*?)\[/SYSTEM_PROMPT\]", text, re.DOTALL)
    return found.group(1) if found else None


_THINK_SECTION = re.compile(r"\[THINK\](.*?)\[/THINK\]", re.DOTALL)


def system_content(text: str, thinks: bool) -> str | list[dict[str, str]]:
    """A default system prompt as mistral-common's request carries it: where the template writes `[THINK]`…`[/THINK]`
    in it and the version has those tokens (`thinks`: v13), each such section a thinking chunk (a ThinkChunk,
    encoded between the [THINK] and [/THINK] tokens) and the text around them text chunks; else the text as it is
    (mistral-common then encodes `[THINK]` as text, and a template that writes the token differs, as it should)."""
    if not thinks or not _THINK_SECTION.search(text):
        return text
    chunks: list[dict[str, str]] = []
    pos = 0
    for match in _THINK_SECTION.finditer(text):
        if match.start() > pos:
            chunks.append({"type": "text", "text": text[pos : match.start()]})
        chunks.append({"type": "thinking", "thinking": match.group(1)})
        pos = match.end()
    if pos < len(text):
        chunks.append({"type": "text", "text": text[pos:]})
    return chunks
