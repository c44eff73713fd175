"""What a crash says when the template was stating a limit: the crash came from building the message of its own
`raise_exception(...)` (a refusal whose text concatenates what it refuses: `"Invalid content " + message.content`),
or from a tool-call turn reaching a template that has no tool-call format at all, or content parts reaching one that
writes them as data."""

from __future__ import annotations

import re

from ...conversations.probes import Probe
from ...template.rendering import Rendered, Renderer
from ..context import VerifyContext

_RAISE = re.compile(r"\braise_exception\s*\(")
_TOOL_FORMAT = re.compile(r"\btool_calls\b|\bfunction_call\b|\btools\b")
NO_TOOL_FORMAT = "the template has no tool-call format (it never reads tools or tool_calls)"
# A list of text parts written as data (`[{'type': 'text', ...}]` or its JSON).
PARTS_AS_DATA = re.compile(r"""["']type["']\s*:\s*["']text["']""")
NO_PARTS_FORMAT = (
    "the template does not read content parts: transformers writes the list itself (values-faithful reports it), "
    "so this engine failing on parts is the same defect"
)


def has_no_tool_format(ctx: VerifyContext) -> bool:
    """Whether the template never reads `tools`, `tool_calls` or `function_call`: a model without tool use."""
    return not _TOOL_FORMAT.search(ctx.template + (ctx.tool_template or ""))


def parts_written_as_data(ctx: VerifyContext, probe: Probe) -> bool:
    """Whether the probe holds content parts and transformers writes a list of them as data rather than the parts'
    text, where values-faithful reports it (a probe of what the template reads)."""
    r = ctx.rendered.get(probe.id)
    carries = any(isinstance(m.get("content"), list) for m in probe.messages)
    shown = carries and r is not None and r.ok and bool(PARTS_AS_DATA.search(r.text or ""))
    return shown and ctx.applicable(probe)


def carries_calls(probe: Probe) -> bool:
    """Whether a message of the probe holds tool calls."""
    return any(m.get("tool_calls") for m in probe.messages)


def _stringified(template: str) -> str:
    """The template with every `+` inside a `raise_exception(...)` argument (outside string literals) written `~`,
    which concatenates any value as a string: the refusal's message can no longer raise."""
    out, i = [], 0
    for match in _RAISE.finditer(template):
        if match.start() < i:
            continue
        out.append(template[i : match.end()])
        depth, quote, j = 1, "", match.end()
        while j < len(template) and depth:
            c = template[j]
            if quote:
                if c == "\\":
                    out.append(template[j : j + 2])
                    j += 2
                    continue
                quote = "" if c == quote else quote
            elif c in "'\"":
                quote = c
            elif c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            out.append("~" if c == "+" and not quote else c)
            j += 1
        i = j
    out.append(template[i:])
    return "".join(out)


def refusal_beneath(ctx: VerifyContext, probe: Probe) -> Rendered | None:
    """The refusal a crash hid: when the probe's crash came from inside a `raise_exception(...)` argument (the
    template was refusing it, and building the message raised), the refusal the template renders once that message
    cannot raise; None when the crash is elsewhere."""
    template, tool_template = ctx.template, ctx.tool_template
    if not _RAISE.search(template + (tool_template or "")):
        return None
    rewritten = _stringified(template)
    rewritten_tools = _stringified(tool_template) if tool_template else None
    if rewritten == template and rewritten_tools == tool_template:
        return None
    base = ctx.renderer
    renderer = Renderer(
        base.tokenizer,
        rewritten,
        base.kwargs,
        base.limits,
        tool_template=rewritten_tools,
        budget=base.budget,
        clock=base.clock,
    )
    r = renderer.render(
        probe.message_list(),
        probe.tool_list(),
        add_generation_prompt=probe.add_generation_prompt,
        continue_final_message=probe.continue_final_message,
    )
    return r if r.refused else None


def renders_without_empty_calls(ctx: VerifyContext, probe: Probe) -> bool:
    """Whether the probe renders once its `tool_calls: []` keys are gone: the empty list alone was refused."""
    messages = [{k: v for k, v in m.items() if not (k == "tool_calls" and not v)} for m in probe.message_list()]
    return ctx.renderer.render(messages, probe.tool_list()).ok
