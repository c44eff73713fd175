"""Whether a conversation's instability is the format's own: the official renderer the template follows renders
the same conversation with the same instability.

`prefix-stable` and `assistant-mask` report a request at generation point k that is not a prefix of the whole
conversation's rendering. Mistral's formats write `[AVAILABLE_TOOLS]` before the last user message, so the history
renders otherwise once the conversation goes past it: mistral-common, Mistral's own request encoder, does exactly
that. Where `reference-parity` finds the version of mistral-common the template follows (or the closest one), and
mistral-common's own request before message k differs from its rendering of the whole conversation only where the
tool list stands, as the template's does, the instability is the format's: a stated limit (info), met by training
one sample per turn. Where mistral-common is stable and the template is not, or the template also changes the
history elsewhere, the template is reported as before.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import mistral_reference as mr

if TYPE_CHECKING:
    from ..conversations.probes import Probe
    from .context import VerifyContext

PER_TURN_HINT = (
    "train one sample per assistant turn, each with its own request as prompt (prepare --per-turn), as the format "
    "is served"
)


@dataclass(frozen=True)
class Official:
    """The official renderer the template was found to follow: its name, version and the default system prompt
    it was given."""

    name: str
    version: str
    default_system: str | None


def official_format(ctx: VerifyContext) -> Official | None:
    """mistral-common's version the template follows, as `reference-parity` finds it (every skeleton probe alike,
    else the closest version: a variant of the format, such as llama.cpp's Mistral Small 3.1 with its own tool
    prompt, still places `[AVAILABLE_TOOLS]` as the format does, and `format_own` compares exactly that), or None:
    not a Mistral instruct template, or mistral-common not installed. Computed once."""
    if "format_history" in ctx.cache:
        found: Official | None = ctx.cache["format_history"]
        return found
    from .references import mistral_outcomes, uses_mistral_common

    found = None
    if uses_mistral_common(ctx) and mr.available() is None:
        compared, texts, outcomes = mistral_outcomes(ctx)
        if compared and mr.is_mistral_template(*texts.values()):
            match = mr.choose(outcomes, compared)
            name = f"mistral-common {match.version}" + ("" if match.matched else " (the closest version)")
            found = Official(name, match.version, mr.default_system_prompt(texts))
    ctx.cache["format_history"] = found
    return found


def _nine_character_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with every tool-call id replaced by one in Mistral's format (9 letters and digits), the same
    id for the same call: mistral-common refuses others, and where an id is written does not decide where the
    history changes."""
    ids: dict[str, str] = {}

    def nine(old: Any) -> Any:
        return ids.setdefault(old, f"id{len(ids):07d}") if isinstance(old, str) else old

    out = copy.deepcopy(messages)
    for m in out:
        for call in m.get("tool_calls") or []:
            if isinstance(call, dict) and "id" in call:
                call["id"] = nine(call["id"])
        if "tool_call_id" in m:
            m["tool_call_id"] = nine(m["tool_call_id"])
    return out


def _tools_moved(version: str, asked: list[int], whole: list[int]) -> bool:
    """Whether the request (`asked`) is not a prefix of the conversation's rendering (`whole`) only because the
    `[AVAILABLE_TOOLS]`…`[/AVAILABLE_TOOLS]` block stands elsewhere: without that block on both sides it is one. The
    block's own text may differ between a template and its official renderer (a space in the tool list); any other
    change to the history may not."""
    if whole[: len(asked)] == asked:
        return False
    asked, whole = _without_tools(version, asked), _without_tools(version, whole)
    return whole[: len(asked)] == asked


def _without_tools(version: str, ids: list[int]) -> list[int]:
    specials = mr.special_ids(version, "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]")
    if specials is None:
        return ids
    begin, end = specials
    out: list[int] = []
    inside = False
    for token in ids:
        if token == begin:
            inside = True
        elif inside and token == end:
            inside = False
        elif not inside:
            out.append(token)
    return out


def format_own(ctx: VerifyContext, probe: Probe, k: int, request: str, full: str) -> str | None:
    """Why the request before message k (`request`, the template's) not being a prefix of the conversation
    (`full`) is the format's own, or None: the official renderer's request before message k is not a prefix of its
    rendering of the conversation either, and both differ only in where the tool list stands (`_tools_moved`)."""
    official = official_format(ctx)
    if official is None:
        return None
    key = f"format_history:{probe.id}@{k}"
    if key not in ctx.cache:
        messages, tools = _nine_character_ids(probe.message_list()), probe.tool_list()
        try:
            asked = mr.reference_ids(
                official.version, mr.Case(probe.id, messages[:k], tools, True), official.default_system
            )
            whole = mr.reference_ids(
                official.version, mr.Case(probe.id, messages, tools, False), official.default_system
            )
        except mr.Unexpressible:
            ctx.cache[key] = False
        else:
            ctx.cache[key] = _tools_moved(official.version, asked, whole)
    version = official.version
    if not ctx.cache[key] or not _tools_moved(version, mr.encode_text(version, request), mr.encode_text(version, full)):
        return None
    return (
        f"the format itself: {official.name} writes [AVAILABLE_TOOLS] before the last user message, as the template "
        "does; train per turn (prepare --per-turn) to match inference"
    )
