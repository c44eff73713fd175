"""Assistant turns left out of training, counted and named: never a silent loss.

Rendering differences give a turn no span where the template does not let it be found (`template.spans`): the
generation prompt before it is not a prefix of the conversation (a prompt ending in `<think>\\n` that the answer
does not start with; a system prompt the template moves into the last user turn; a template that rewrites earlier
turns once more follow), or its own text changes once later turns follow. A record whose assistant turns are all
left out trains nothing: it counts toward `--max-skipped` with the cause and the fix. Turns left out of a record
that still trains are counted, with their tokens, in prepare's report.

The cause is found by rendering: where the prompt and the conversation first differ, both sides quoted; and whether
`--per-turn` (each turn trained on the conversation cut after it) would give the turn its span, by rendering that
cut conversation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ..template.spans import Span, assistant_spans

RenderFn = Callable[[list[dict[str, Any]], bool], str]
EXCERPT = 32


def assistant_indices(messages: Sequence[Any]) -> list[int]:
    return [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"]


def missing_turns(messages: Sequence[Any], spans: Sequence[Span]) -> list[int]:
    """The assistant messages without a span (none for spans of {% generation %} markers, which name no message)."""
    if any(s.message < 0 for s in spans):
        return []
    have = {s.message for s in spans}
    return [i for i in assistant_indices(messages) if i not in have]


def _first_difference(a: str, b: str) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def explain(
    render: RenderFn, messages: list[dict[str, Any]], stops: Sequence[str], controls: Sequence[str]
) -> list[tuple[int, str]]:
    """(message index, why) of each assistant turn left out, found by rendering, with the fix."""
    found = assistant_spans(render, messages, stops, controls)
    out = []
    for i, why in found.untrained:
        prompt = render(messages[:i], True)
        if not found.text.startswith(prompt):
            at = _first_difference(prompt, found.text)
            why += (
                f": at character {at} the prompt writes {prompt[at : at + EXCERPT]!r} where the conversation "
                f"writes {found.text[at : at + EXCERPT]!r}"
            )
        cut = render(messages[: i + 1], False)
        if cut.startswith(prompt) and len(cut) > len(prompt):
            why += "; --per-turn trains it (one example per assistant turn, the conversation cut after it)"
        elif not cut.startswith(prompt):
            why += (
                "; not even the conversation cut after it renders as its prompt followed by the answer (the prompt "
                f"ends {prompt[-EXCERPT:]!r}), so the model would learn an answer after a prompt it is never served: "
                "write answers as the model generates them after that prompt, pass the template keyword argument "
                "that changes the prompt (--kwarg), or fix the template (hf-chat-templates verify shows where)"
            )
        out.append((i, why))
    return out


LEFT_OUT_REASONS = ("every assistant turn is left out", "the turn of a --per-turn example is left out")


def record_reason(reasons: list[tuple[int, str]], per_turn: bool = False) -> str:
    """Why a record whose assistant turns are all left out trains nothing; with `per_turn`, why one of its
    examples (the conversation cut after that turn) does."""
    if per_turn and reasons:
        i, why = reasons[-1]
        return f"{LEFT_OUT_REASONS[1]} of training (message {i}{': ' + why if why else ''})"
    listed = "; ".join(f"message {i}: {why}" if why else f"message {i}" for i, why in reasons[:3])
    more = f"; and {len(reasons) - 3} more" if len(reasons) > 3 else ""
    if not any(why for _, why in reasons):
        listed += "; the first records' reasons say why"
    return f"every assistant turn is left out of training ({listed}{more})"


def turn_text(message: dict[str, Any]) -> str:
    """What a left-out turn would have trained, as text: its content (text parts joined) and its tool calls."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    parts = [content if isinstance(content, str) else ""]
    for call in message.get("tool_calls") or ():
        function = call.get("function", call) if isinstance(call, dict) else {}
        if isinstance(function, dict):
            arguments = function.get("arguments")
            written = (
                arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, default=str)
            )
            parts.append(f"{function.get('name', '')} {written}")
    return "\n".join(p for p in parts if p)
