"""A probe rendered with its None contents kept, as OpenAI sends a tool-call turn (`"content": None`) and as TGI and
transformers.js hand it to the template. transformers drops the key, so what the template does with None is hidden
from every check that reads transformers' renderings; two rules read the rendering with the None kept:

- `renders`: the template renders a probe in transformers but raises once content None reaches it
  (`message['content'] | length`, `message['content'][0]`): the conversation cannot be served by a stack that
  passes messages as given;
- `assistant-mask`: a probe transformers cannot render (the template tests `content is none`, so the dropped key
  sends it down the wrong branch) renders with the None kept, and a call turn there is never closed: no stop token
  between the turn's call and the next message (DeepSeek V2.5 closes the calls only after a second one).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...conversations.probes import Probe
from ...template.rendering import Rendered
from ..context import VerifyContext
from ..results import Finding, around
from .nulls import as_given
from .refusals import NO_TOOL_FORMAT, has_no_tool_format

NONE_CONTENT_HINT = (
    "test content before using it: `{% if message.content %}` (or `message.content or ''`), so that content None "
    "(OpenAI's shape beside tool calls) and a missing content key render the same"
)
CLOSE_HINT = "close every assistant turn with its stop token, whether it holds text, one tool call or several"


def _nulls(probe: Probe) -> list[tuple[int, str]]:
    """(message index, key) of each None field the probe's messages carry: content None beside tool calls, and the
    `"tool_calls": null` OpenAI exports write on plain answers."""
    return [(i, k) for i, m in enumerate(probe.messages) for k in ("content", "tool_calls") if k in m and m[k] is None]


def _empty(probe: Probe) -> list[int]:
    return sorted({i for i, _ in _nulls(probe)})


def _field(probe: Probe, index: int) -> str:
    return next((k for i, k in _nulls(probe) if i == index), "content")


def kept(ctx: VerifyContext, probe: Probe, *, none: bool = True) -> Rendered:
    """The probe rendered as given with its None content and tool_calls kept (every other None dropped, as
    transformers drops it); with `none=False`, with them dropped too: what transformers renders, by the same path."""
    return as_given(ctx, probe, set(_nulls(probe)) if none else set())


def _with_none(ctx: VerifyContext, *, applicable: bool = True) -> Iterator[tuple[Probe, list[int]]]:
    """Probes with a content None (and, with `applicable`, that carry only what the template supports)."""
    for probe in ctx.probes:
        empty = _empty(probe)
        if empty and (not applicable or ctx.applicable(probe)):
            yield probe, empty


def raises_on_none(ctx: VerifyContext) -> list[Finding]:
    """Probes transformers renders that raise once their content None reaches the template (not a refusal by the
    template's own raise_exception: that states a limit)."""
    findings = []
    for probe, empty in _with_none(ctx):
        if not ctx.rendered[probe.id].ok:
            continue
        given = kept(ctx, probe)
        if given.ok or given.refused or not kept(ctx, probe, none=False).ok:
            continue  # (the last: rendering as given fails without the None too, so the None is not why)
        field = _field(probe, empty[0])
        finding = Finding(
            probe.id,
            f"probe {probe.id} ({probe.description}) renders in transformers only because it drops "
            f"{field} None: with message {empty[0]}'s {field} None kept, as OpenAI sends it and TGI and "
            f"transformers.js pass it, the template raises {given.error}; such requests cannot be served",
            {"error": given.error, "message_index": empty[0], field: None},
            hint=NONE_CONTENT_HINT,
        )
        if has_no_tool_format(ctx) and probe.messages[empty[0]].get("tool_calls"):  # a tool-call turn: no format
            finding.text += f"; {NO_TOOL_FORMAT}: it does not support tool calling"
            finding.severity, finding.hint = "info", None
        findings.append(finding)
    return findings


def _sentinel_span(probe: Probe, index: int, text: str) -> tuple[int, int] | None:
    """Where message `index`'s sentinels stand in `text`: (first start, last end)."""
    found = [
        (pos, pos + len(s.text))
        for s in probe.sentinels
        if s.message == index and (pos := text.find(s.text)) >= 0 and s.kind != "tool_name"
    ]
    return (min(a for a, _ in found), max(b for _, b in found)) if found else None


def unclosed_calls(ctx: VerifyContext) -> list[Finding]:
    """In probes transformers cannot render but that render with content None kept: a call turn with no stop token
    between its calls and the next message's text. Each probe once. (Capabilities are not asked: they are read
    from transformers' renderings, where no such call renders; the call's own text in the rendering is.)"""
    findings = []
    for probe, _ in _with_none(ctx, applicable=False):
        if ctx.rendered[probe.id].ok or not ctx.stop_tokens:
            continue
        given = kept(ctx, probe)
        text = given.text or ""
        for index, m in enumerate(probe.messages[:-1]):
            here, after = _sentinel_span(probe, index, text), _sentinel_span(probe, index + 1, text)
            if m["role"] != "assistant" or not m.get("tool_calls") or here is None or after is None:
                continue
            between = text[here[1] : after[0]]
            if here[1] > after[0] or any(t in between for t in ctx.stop_tokens):
                continue
            findings.append(
                Finding(
                    probe.id,
                    f"probe {probe.id}: message {index}'s tool-call turn is never closed: no stop token "
                    f"({', '.join(ctx.stop_tokens)}) between its call and message {index + 1} when the probe is "
                    f"rendered with content None kept ({around(text, here[1], ctx.control_tokens)}), as TGI and "
                    f"transformers.js pass it (transformers drops the key and the template raises: "
                    f"{ctx.rendered[probe.id].error}); the model would never learn to end a turn after the call",
                    {"message_index": index, "char_position": here[1], "content": None},
                    severity="error",
                    hint=CLOSE_HINT,
                )
            )
            break
    return findings
