"""Checks on what a rendering keeps: it renders, drops nothing, trains exactly content + stop, and each turn's
ids extend the previous ones."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ...conversations.normalize import REASONING_FIELDS
from ...conversations.probes import Probe, Sentinel
from ...template.analysis import reads_content_parts
from ...template.engines.base import joined_text_parts, text_of_media_messages
from ..content_none import ContentNoneEffect, content_none_effect
from ..context import RecordContext, VerifyContext
from ..history_reasoning import think_tags
from ..results import CheckResult, Finding, verdict
from .call_turns import beside_calls, call_turn_hint
from .content_kept import raises_on_none
from .refusals import refusal_beneath, renders_without_empty_calls

_KIND_NAMES = {
    "content": "content",
    "system": "system content",
    "part": "content part",
    "tool_name": "tool-call name",
    "argument": "tool-call argument value",
    "tool_result": "tool result",
    "reasoning": "reasoning",
    "tool_schema": "tool definition",
}


# What each capability is, in words: a refusal names the one the template lacks.
CAPABILITY_NAMES = {
    "system": "system messages",
    "tools": "tool definitions",
    "tool_calls": "tool calls",
    "parallel_calls": "parallel tool calls (several in one turn)",
    "tool_results": "tool results",
    "content_parts": "content given as a list of parts",
    "reasoning": "reasoning (reasoning_content)",
}


def lacking(ctx: VerifyContext, probe: Probe) -> list[str]:
    """The capabilities a probe carries that the template shows nowhere: what its refusal of the probe refuses."""
    carried = set(probe.requires) | {s.needs for s in probe.sentinels if s.needs is not None}
    return [c for c in CAPABILITY_NAMES if c in carried and ctx.capabilities.get(c) != "yes"]


def refusal_severity(ctx: VerifyContext, capabilities: list[str]) -> str:
    """A template's refusal of input it does not support is a stated limit (info); a risk (warning) when the
    template will be trained on data that has it (`--conversations` says which fields the data has; `--training`
    without data: it may have it)."""
    if ctx.data_fields is not None:
        return "warning" if any(ctx.data_fields.get(c) for c in capabilities) else "info"
    return "warning" if ctx.training else "info"


def _refusal(ctx: VerifyContext, probe: Probe, reason: str, error: str | None) -> Finding:
    """A probe the template's raise_exception refuses: info naming the capability it lacks (or the shape it does
    not accept), a warning when the data to train on has it."""
    missing = lacking(ctx, probe)
    if missing:
        what = ", ".join(CAPABILITY_NAMES[c] for c in missing)
        text = (
            f"probe {probe.id} ({probe.description}): the template refuses {what} (raise_exception: {reason}): "
            f"it does not support {'tool calling' if set(missing) & {'tools', 'tool_calls'} else what}"
        )
    else:
        text = (
            f"probe {probe.id} ({probe.description}): the template refuses this conversation shape "
            f"(raise_exception: {reason}): it does not accept {probe.description}"
        )
    severity = refusal_severity(ctx, missing) if missing else ("warning" if ctx.training else "info")
    if severity == "warning":
        text += _unrenderable(ctx)
    return Finding(probe.id, text, {"error": error, "lacks": missing}, severity=severity)


# What in a template's text says it reads a capability: a crash on input it never reads is a limit of its format
# (a string-only template concatenating a list of parts), a crash on input it reads is an error.
_CLAIMS = {
    "system": re.compile(r"""['"]system['"]"""),
    "tools": re.compile(r"\btools\b"),
    "tool_calls": re.compile(r"\btool_calls\b|\bfunction_call\b"),
    "parallel_calls": re.compile(r"\btool_calls\b"),
    "tool_results": re.compile(r"""['"](?:tool|ipython|function|observation|tool_results?)['"]"""),
    "reasoning": re.compile(r"reasoning_content|\bthinking\b|</think>|\[/THINK\]"),
}


def _raised_on(ctx: VerifyContext, probe: Probe, unclaimed: list[str]) -> bool:
    """Whether the crash is on what the template does not support: for content parts alone, the probe renders once
    each message's parts are one string (as llama.cpp and vLLM send them); a probe that still crashes crashes on
    something else, which the template claims."""
    if unclaimed != ["content_parts"]:
        return True
    messages, tools = text_of_media_messages(*joined_text_parts(probe.message_list(), probe.tool_list()))
    joined = ctx.renderer.render(
        messages,
        tools,
        add_generation_prompt=probe.add_generation_prompt,
        continue_final_message=probe.continue_final_message,
    )
    return joined.ok


def _names(ctx: VerifyContext, capability: str) -> bool:
    """Whether the template's text names a capability (`_CLAIMS`); for content parts, whether its syntax tree reads
    them (`reads_content_parts`: a loop over content, a type test of content, a part's text)."""
    if capability == "content_parts":
        return any(reads_content_parts(t) for t in (ctx.template, ctx.tool_template) if t)
    return bool(_CLAIMS[capability].search(ctx.template + (ctx.tool_template or "")))


def _unclaimed(ctx: VerifyContext, probe: Probe) -> list[str]:
    """The capabilities the probe carries that the template shows nowhere and never names: what a crash on it says
    the template does not support (empty when it names one of them: a crash on what it reads is an error). Parts
    the template never reads are lacking even when a rendering shows their text (a list written whole, `| trim`)."""
    missing = lacking(ctx, probe)
    if "content_parts" in probe.requires and "content_parts" not in missing and not _names(ctx, "content_parts"):
        missing.append("content_parts")
    return [] if any(_names(ctx, c) for c in missing) else missing


def _unsupported(ctx: VerifyContext, probe: Probe, missing: list[str], error: str | None) -> Finding:
    """A probe that crashes on input the template never reads: its format's limit, info (a warning when the data to
    train on has it), like a refusal, but said as a crash."""
    what = ", ".join(CAPABILITY_NAMES[c] for c in missing)
    severity = refusal_severity(ctx, missing)
    text = (
        f"probe {probe.id} ({probe.description}): the template never reads {what} and raises on them ({error}): "
        f"it does not support {what}"
    )
    hint = None
    if missing == ["content_parts"]:
        text += f"; it takes string content only, and {STRING_CONTENT_SERVED}"
        hint = STRING_CONTENT_HINT
    if severity == "warning":
        text += _unrenderable(ctx)
    return Finding(probe.id, text, {"error": error, "lacks": missing}, severity=severity, hint=hint)


# How engines serve a template that takes string content only, and what training does about it.
STRING_CONTENT_SERVED = (
    "llama.cpp and vLLM join a message's text parts into one string (with newlines) before rendering such a template"
)
STRING_CONTENT_HINT = (
    "pass content as one string in training (text parts joined with newlines, as llama.cpp and vLLM join them "
    "when serving), or train a template that reads content parts"
)


def _unrenderable(ctx: VerifyContext) -> str:
    """Why a limit is a warning: the data to train on has what the template does not support."""
    if ctx.data_fields is not None:
        return "; the data to train on has it: its records that carry it cannot be rendered"
    return "; the template is to be trained on: records that carry it cannot be rendered"


def renders(ctx: VerifyContext) -> CheckResult:
    findings = []
    for probe in ctx.probes:
        r = ctx.rendered[probe.id]
        if r.ok:
            continue
        reason = (r.error or "").split(": ", 1)[-1]
        if r.refused and probe.must_render and renders_without_empty_calls(ctx, probe):
            finding = Finding(
                probe.id,
                f"probe {probe.id} ({probe.description}) is refused by the template's raise_exception: "
                f"{reason}; serving stacks send this shape as it is",
                {"error": r.error},
                hint="accept `tool_calls: []` as no tool calls: test `message.tool_calls` (empty is false), "
                "not `'tool_calls' in message` or `is defined`",
            )
        elif r.refused:
            finding = _refusal(ctx, probe, reason, r.error)
        elif (beneath := refusal_beneath(ctx, probe)) is not None:  # its refusal's own message raised
            said = (beneath.error or "").split(": ", 1)[-1]
            finding = _refusal(ctx, probe, f"{said}; building that message raised {r.error}", r.error)
        elif not probe.must_render and (unclaimed := _unclaimed(ctx, probe)) and _raised_on(ctx, probe, unclaimed):
            finding = _unsupported(ctx, probe, unclaimed, r.error)
        else:
            finding = Finding(
                probe.id,
                f"probe {probe.id} ({probe.description}) does not render in transformers' sandbox: {r.error}",
                {"error": r.error},
            )
        _explain_content_none(finding, content_none_effect(ctx, probe))
        findings.append(finding)
    findings += raises_on_none(ctx)
    for finding in findings:
        if finding.severity is not None and finding.severity != "error" and finding.hint is None:
            finding.hint = (
                "the template states what it does not support; convert such inputs before rendering, or train a "
                "template that supports them"
            )
    return verdict(
        "renders",
        findings,
        f"all {len(ctx.probes)} probes render in transformers' sandbox",
        "make the template accept OpenAI-format messages: tool_calls[].function.{name,arguments} with arguments "
        "as dict or JSON string, content None, content as a list of parts",
    )


def _required(ctx: VerifyContext, capability: str | None) -> bool:
    if capability is None:
        return True
    if capability == "parallel_calls":  # a template that renders one call must render every call
        return ctx.capabilities.get("tool_calls") == "yes"
    return ctx.capabilities.get(capability) == "yes"


def _explain_content_none(finding: Finding, effect: ContentNoneEffect | None) -> None:
    """Add to `finding` why its probe renders as it does, when the template's `content is none` test is the cause."""
    if effect is not None:
        finding.text += f"; {effect.explanation}"
        finding.detail["content_none_test"] = [t.expression for t in effect.tests]


def _where(s: Sentinel) -> str:
    return "the tool definitions" if s.message is None else f"message {s.message}"


def _missing(ctx: VerifyContext, probe: Probe, text: str, kept: str | None) -> list[Finding]:
    """The probe's sentinels missing from its training rendering `text`: those the template reads, and those it
    renders when the None contents are kept (`kept`), which only transformers' dropping of None hides. A sentinel
    the template may leave out by design (`may_drop`) is an info finding; any other is data loss."""
    findings = []
    for s in probe.sentinels:
        if s.text in text or not (_required(ctx, s.capability) or (kept is not None and s.text in kept)):
            continue
        if probe.continue_final_message and s.message == len(probe.messages) - 1:
            continue
        what = f"the {_KIND_NAMES[s.kind]} of {_where(s)} ({s.text!r})"
        detail = {"message_index": s.message, "sentinel": s.text, "kind": s.kind}
        if s.may_drop is not None:
            findings.append(
                Finding(probe.id, f"probe {probe.id}: {what} is not rendered: {s.may_drop}", detail, severity="info")
            )
            continue
        if s.kind == "reasoning" and s.message is not None and s.message < len(probe.messages) - 1:
            # An earlier turn's reasoning, dropped once a later answer follows (Harmony's analysis drop): what each
            # turn was generated from is rewritten, which prefix-stable reports; training per turn keeps it.
            findings.append(
                Finding(
                    probe.id,
                    f"probe {probe.id}: {what} is dropped once a later answer follows: training on the whole "
                    f"conversation loses it; train one sample per turn to keep it (prepare --per-turn)",
                    detail,
                    severity="warning",
                )
            )
            continue
        said = f"probe {probe.id}: {what} is dropped{_context(ctx, probe, s)}{beside_calls(probe, s)}"
        findings.append(Finding(probe.id, said, detail, hint=call_turn_hint(probe, s)))
    return findings


def _context(ctx: VerifyContext, probe: Probe, s: Sentinel) -> str:
    """Where else the template keeps what this probe's training rendering drops, and what the loss means."""
    points = [k for k in probe.generation_points if s.message is None or s.message < k]
    kept = [k for k in points if (snapshot := ctx.snapshot(probe, k)).ok and s.text in (snapshot.text or "")]
    if kept:  # dropped only from the training rendering, or once later messages follow
        return (
            f" when the conversation ends with an assistant turn, though the request before message {kept[0]} (with "
            "a generation prompt) keeps it: every training sample loses it"
            if kept[-1] == points[-1]
            else f" once later messages follow: the request before message {kept[0]} keeps it, the request before "
            f"message {points[-1]} does not: later turns are answered, and trained, without it"
        )
    capability = s.needs
    if capability is not None and ctx.capabilities.get(capability) == "yes":
        keeper = next((p for p in ctx.probes if p.id != probe.id and _keeps(ctx, p, capability)), None)
        if keeper is not None:
            return f" ({probe.description}), though probe {keeper.id} ({keeper.description}) renders it"
    return f" ({probe.description})"


def _keeps(ctx: VerifyContext, probe: Probe, capability: str) -> bool:
    r = ctx.rendered[probe.id]
    return r.ok and any(
        s.text in (r.text or "") for s in probe.sentinels if s.needs == capability and s.may_drop is None
    )


def _request_losses(ctx: VerifyContext, probe: Probe) -> list[Finding]:
    """What an agent's requests drop: at each generation point, the sentinels of earlier messages (and the tool
    definitions) the template reads, missing from the request the model answers."""
    for k in probe.generation_points:
        snapshot = ctx.snapshot(probe, k)
        if not snapshot.ok:
            continue
        text = snapshot.text or ""
        for s in probe.sentinels:
            if s.may_drop is not None or (s.message is not None and s.message >= k) or s.text in text:
                continue
            if not _required(ctx, s.capability):
                continue
            if s.kind == "reasoning":
                continue  # reasoning of past turns: what thinking models keep in a request is the template's design
            return [
                Finding(
                    probe.id,
                    f"probe {probe.id}: the {_KIND_NAMES[s.kind]} of {_where(s)} ({s.text!r}) is dropped from the "
                    f"request before message {k} (what an agent sends for the model to answer): the model answers "
                    f"without it",
                    {"message_index": s.message, "sentinel": s.text, "kind": s.kind, "generation_point": k},
                )
            ]
    return []


# What a capability the template never reads loses, in words.
_LOSSES = {
    "system": "system prompts are never rendered: every sample's system prompt is lost",
    "tools": "tool definitions are never rendered: the model never sees the tools it is given",
    "tool_calls": "tool calls are never rendered: assistant turns that call tools train nothing of the call",
    "tool_results": "tool results are never rendered: the model answers without what its tools returned",
    "reasoning": "reasoning (reasoning_content) is never rendered: reasoning data trains nothing",
}
# A template that speaks of reasoning: thinking switches, reasoning fields, think tags it strips.
_THINKING = re.compile(r"enable_thinking|reasoning_content|\bthinking\b|</think>|reasoning_mode|thought")


def _never_read(ctx: VerifyContext) -> list[Finding]:
    """Fields the probes carry that no rendering shows. Data loss whenever the data has them: a warning, a
    failure when the template is trained on (`training`), and a failure when the template reads related fields
    (tools without their calls, calls without their results) or is a thinking model's that drops reasoning."""
    caps = ctx.capabilities
    findings = []
    for capability, loss in _LOSSES.items():
        if caps.get(capability) != "no":
            continue
        probe = next((p for p in ctx.probes if any(s.needs == capability for s in p.sentinels)), None)
        severity = "error" if ctx.training else "warning"
        why = ""
        if capability != "system" and not ctx.training and not _claims(ctx, capability):
            # The template neither renders nor names it: a limit of its format, said; a loss once data has it
            severity, why = "info", f"; the template has no {_CAPABILITY_NAMES[capability]} support"
        if capability == "tool_calls" and _reads(ctx, "tools"):
            severity, why = "error", " although the template renders the tool definitions"
        elif capability == "tool_results" and _reads(ctx, "tool_calls"):
            severity, why = "error", " although the template renders the tool calls they answer"
        elif capability == "tool_calls" and _reads(ctx, "tool_results"):
            severity, why = "error", " although the template renders their results"
        elif capability == "reasoning" and _THINKING.search(ctx.template):
            severity, why = "error", " although the template is a thinking model's (it speaks of thinking)"
            if (inline := _reasoning_in_content(ctx)) is not None:
                # Reasoning inside content is the format (QwQ-style): the data's separate field is what is lost
                severity, why = "warning", f"; the format keeps reasoning inside content by design ({inline})"
        if ctx.data_fields is not None and not ctx.data_fields.get(capability):
            severity, why = "info", f"{why}; the data has none: nothing of it is lost"
        elif ctx.data_fields is not None and severity == "info":
            severity, why = "warning", f"{why}, and the data has it: it is lost"
        inline_fix = "by design" in why and severity != "info"
        findings.append(
            Finding(
                probe.id if probe else None,
                f"{loss}{why}"
                + ("" if severity == "error" or ctx.training or inline_fix else " (with --training: a failure)"),
                {"capability": capability},
                severity=severity,
                hint=_INLINE_REASONING_FIX if inline_fix else _LOSS_FIXES[capability],
            )
        )
    return findings


# Think tags a format writes reasoning between, inside an answer's content.


_CAPABILITY_NAMES = {
    "tools": "tool",
    "tool_calls": "tool-call",
    "tool_results": "tool-result",
    "reasoning": "reasoning",
}


# Tool definitions, calls and results are one capability: a template with a tool format of its own (a `functions`
# kwarg, a tool role) that ignores the `tools` it is given drops them.
_TOOL_GROUP = ("tools", "tool_calls", "tool_results")


def _claims(ctx: VerifyContext, capability: str) -> bool:
    """Whether the template names a capability (see `_names`), or for tools any of the tool group or a `functions`
    list of its own."""
    if capability in _TOOL_GROUP:
        text = ctx.template + (ctx.tool_template or "")
        return any(_names(ctx, c) for c in _TOOL_GROUP) or bool(re.search(r"\bfunctions\b", text))
    return _names(ctx, capability)


def _reads(ctx: VerifyContext, capability: str) -> bool:
    """Whether the template renders a capability and names it: a template that writes every role the same way shows
    a tool result as it shows any message, which says nothing of tool support."""
    return ctx.capabilities.get(capability) == "yes" and _names(ctx, capability)


def _reasoning_in_content(ctx: VerifyContext) -> str | None:
    """How the format keeps reasoning, when it keeps it inside content by design: the template names a pair of think
    tags, and the reasoning probe's thought written between them in its answer's content survives the rendering.
    None otherwise (a template that cuts content at </think> drops it; one that never names think tags has no place
    for reasoning at all)."""
    tags = think_tags(ctx.template)
    probe = next((p for p in ctx.probes if p.id == "reasoning"), None)
    if tags is None or probe is None:
        return None
    messages = probe.message_list()
    answer = messages[-1]
    thought = answer.pop("reasoning_content", None)
    if not isinstance(thought, str):
        return None
    answer["content"] = f"{tags[0]}{thought}{tags[1]}{answer.get('content') or ''}"
    r = ctx.renderer.render(messages, probe.tool_list())
    kept = r.ok and thought in (r.text or "")
    return f"{tags[0]}…{tags[1]} written in the answer's content is rendered" if kept else None


_INLINE_REASONING_FIX = (
    "write the data's reasoning into the answer's content as <think>…</think> before training (the format's own "
    "place for it), or accept that the separate reasoning field trains nothing"
)
_LOSS_FIXES = {
    "system": "render messages[0] when its role is system, in every conversation shape",
    "tools": "render the tools list (transformers passes it as `tools`)",
    "tool_calls": "render every message.tool_calls[i].function (name and arguments)",
    "tool_results": "render messages with role tool (their content, and tool_call_id where the format has ids)",
    "reasoning": "render message.reasoning_content (or message.thinking) of the assistant turn being trained",
}


def nothing_dropped(ctx: VerifyContext) -> CheckResult:
    findings = []
    for probe in ctx.probes:
        r = ctx.rendered[probe.id]
        if not r.ok:
            continue
        effect = content_none_effect(ctx, probe)
        missing = _missing(ctx, probe, r.text or "", effect.kept.text if effect else None)
        if missing:
            _explain_content_none(missing[0], effect)
        findings += missing
        if ctx.applicable(probe):
            findings += _request_losses(ctx, probe)
    findings += _never_read(ctx)
    return verdict(
        "nothing-dropped",
        findings,
        "every content string, part, tool call, argument, tool result and "
        "reasoning the data carries is in the rendering",
        "render every field in every conversation shape: the system prompt whatever the last message, content next "
        "to tool_calls, every element of message.tool_calls, every text part, the last turn's reasoning",
    )


# ---- the same check on one dataset record (verify --conversations) ------------------------------------------------


def _record_fields(record: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, string) for what a record's rendering must show besides its content: the tools' descriptions, every
    tool call's string argument values, and the last assistant turn's reasoning (earlier turns' reasoning is
    dropped by design in many formats: verify's probes judge that, not a record)."""
    for n, tool in enumerate(record.get("tools") or ()):
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(fn.get("description"), str) and fn["description"].strip():  # the name is in the calls too
            yield f"tool {n} (its description)", fn["description"].strip()
    messages = record["messages"]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    for i, m in enumerate(messages):
        for call in m.get("tool_calls") or ():
            fn = call.get("function", call) if isinstance(call, dict) else {}
            args = fn.get("arguments")
            for key, value in args.items() if isinstance(args, dict) else ():
                if isinstance(value, str) and value.strip():
                    yield f"message {i} (argument {key} of a tool call)", value.strip()
        if i == last:
            for name in REASONING_FIELDS:
                if isinstance(m.get(name), str) and m[name].strip():
                    yield f"message {i} ({name})", m[name].strip()


def _shown(value: str, text: str) -> bool:
    """In the rendering as written, or as JSON writes it inside a string (a template that dumps the arguments)."""
    return value in text or json.dumps(value)[1:-1] in text or json.dumps(value, ensure_ascii=False)[1:-1] in text


def nothing_dropped_record(rc: RecordContext) -> str | None:
    missing = [(f"message {i}", s) for i, s in rc.strings() if s not in rc.text]
    missing += [(where, s) for where, s in _record_fields(rc.record) if not _shown(s, rc.text)]
    if not missing:
        return None
    where, s = missing[0]
    return f"{where}: {s[:40]!r} is not in the rendering"
