"""Checks on what a rendering keeps: it renders, drops nothing, trains exactly content + stop, and each turn's
ids extend the previous ones."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ...conversations.normalize import REASONING_FIELDS
from ...conversations.probes import Probe, Sentinel
from ..content_none import ContentNoneEffect, content_none_effect
from ..context import RecordContext, VerifyContext
from ..results import CheckResult, Finding, around, first_difference, turn_end_hint, verdict, visible

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


def renders(ctx: VerifyContext) -> CheckResult:
    crashes, refusals = [], []
    for probe in ctx.probes:
        r = ctx.rendered[probe.id]
        if r.ok:
            continue
        reason = (r.error or "").split(": ", 1)[-1]
        if r.refused and probe.must_render and _renders_without_empty_calls(ctx, probe):
            finding = Finding(
                probe.id,
                f"probe {probe.id} ({probe.description}) is refused by the template's raise_exception: "
                f"{reason}; serving stacks send this shape as it is",
                {"error": r.error},
                hint="accept `tool_calls: []` as no tool calls: test `message.tool_calls` (empty is false), "
                "not `'tool_calls' in message` or `is defined`",
            )
            crashes.append(finding)
        elif r.refused:
            finding = Finding(
                probe.id,
                f"probe {probe.id} ({probe.description}) is refused by the template's raise_exception: {reason}",
                {"error": r.error},
            )
            refusals.append(finding)
        else:
            finding = Finding(
                probe.id,
                f"probe {probe.id} ({probe.description}) does not render in transformers' sandbox: {r.error}",
                {"error": r.error},
            )
            crashes.append(finding)
        _explain_content_none(finding, content_none_effect(ctx, probe))
    hint = (
        "make the template accept OpenAI-format messages: tool_calls[].function.{name,arguments} with arguments "
        "as dict or JSON string, content None, content as a list of parts"
    )
    if crashes:
        return verdict("renders", crashes + refusals, "", hint)
    return verdict(
        "renders",
        refusals,
        f"all {len(ctx.probes)} probes render in transformers' sandbox",
        "the template explains what it does not accept; convert such inputs before rendering",
        status="warn",
    )


def _renders_without_empty_calls(ctx: VerifyContext, probe: Probe) -> bool:
    """Whether the probe renders once its `tool_calls: []` keys are gone: the empty list alone was refused."""
    messages = [{k: v for k, v in m.items() if not (k == "tool_calls" and not v)} for m in probe.message_list()]
    return ctx.renderer.render(messages, probe.tool_list()).ok


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
        findings.append(Finding(probe.id, f"probe {probe.id}: {what} is dropped{_context(ctx, probe, s)}", detail))
    return findings


def _context(ctx: VerifyContext, probe: Probe, s: Sentinel) -> str:
    """Where else the template keeps what this probe's training rendering drops, and what the loss means."""
    for k in probe.generation_points:
        if s.message is not None and s.message >= k:
            continue
        snapshot = ctx.snapshot(probe, k)
        if snapshot.ok and s.text in (snapshot.text or ""):
            return (
                f" when the conversation ends with an assistant turn, though the request before message {k} (with a "
                f"generation prompt) keeps it: every training sample loses it"
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
        if capability == "tool_calls" and caps.get("tools") == "yes":
            severity, why = "error", " although the template renders the tool definitions"
        elif capability == "tool_results" and caps.get("tool_calls") == "yes":
            severity, why = "error", " although the template renders the tool calls they answer"
        elif capability == "tool_calls" and caps.get("tool_results") == "yes":
            severity, why = "error", " although the template renders their results"
        elif capability == "reasoning" and _THINKING.search(ctx.template):
            severity, why = "error", " although the template is a thinking model's (it speaks of thinking)"
        if ctx.data_fields is not None and not ctx.data_fields.get(capability):
            severity, why = "info", f"{why}; the data has none: nothing of it is lost"
        findings.append(
            Finding(
                probe.id if probe else None,
                f"{loss}{why}"
                + ("" if severity in ("error", "info") or ctx.training else " (with --training: a failure)"),
                {"capability": capability},
                severity=severity,
                hint=_LOSS_FIXES[capability],
            )
        )
    return findings


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


def _completion_probes(ctx: VerifyContext) -> list[Probe]:
    out = []
    for p in ctx.probes:
        last = p.messages[-1] if p.messages else {}
        if (
            p.ends_with_assistant
            and not p.continue_final_message
            and isinstance(last.get("content"), str)
            and last["content"].strip()
            and "tool_calls" not in last
            and "reasoning_content" not in last
            and p.messages[-2]["role"] != "assistant"
            and ctx.applicable(p)
            and ctx.rendered[p.id].ok
        ):
            out.append(p)
    return out


def _generated_header(ctx: VerifyContext, tail: str, answer: str) -> str | None:
    """What the model writes before the content: nothing, or a header that ends with a control token (Harmony's
    `<|channel|>final<|message|>`). Stray text or whitespace before the content is not a header."""
    at = tail.find(answer)
    if at == 0:
        return ""
    if at < 0:
        return None
    header = tail[:at]
    return header if any(header.endswith(t) for t in ctx.control_tokens) else None


def _prompt_not_prefix(
    ctx: VerifyContext, probe: Probe, messages: list[dict[str, Any]], prompt: str, full: str
) -> Finding:
    """The generation prompt is not a prefix of the training rendering: an error when the prompt's end differs
    from how the answer's turn opens, a warning when earlier turns change (a history rewrite, see prefix-stable)."""
    index = len(messages) - 1
    pos = first_difference(prompt, full)
    history = ctx.renderer.render(messages[:-1], probe.tool_list())
    rewritten = history.ok and pos < len(history.text or "")
    return Finding(
        probe.id,
        f"probe {probe.id}: the generation prompt is not a prefix of the "
        f"training rendering at char {pos}: prompt {around(prompt, pos, ctx.control_tokens)} vs "
        f"conversation {around(full, pos, ctx.control_tokens)}"
        + ("; earlier turns render differently once the answer follows (see prefix-stable)" if rewritten else ""),
        {"message_index": index, "char_position": pos},
        severity="warning" if rewritten else None,
    )


def _completion_finding(ctx: VerifyContext, probe: Probe) -> Finding | None:
    """Why the trained completion of the probe's last message is not exactly its content + the stop token."""
    messages = probe.message_list()
    answer = messages[-1]["content"]
    prompt_r = ctx.snapshot(probe, len(messages) - 1)
    full = ctx.rendered[probe.id].text or ""
    if not prompt_r.ok:
        return Finding(probe.id, f"probe {probe.id}: the prompt does not render ({prompt_r.error})")
    prompt = prompt_r.text or ""
    index = len(messages) - 1
    if not full.startswith(prompt):
        return _prompt_not_prefix(ctx, probe, messages, prompt, full)
    tail = full[len(prompt) :]
    header = _generated_header(ctx, tail, answer)
    if header is None and (trimmed := _trimmed(ctx, probe, index, answer, tail)) is not None:
        trimmed.detail["char_position"] += len(prompt)
        return trimmed
    if header is None:
        pos = first_difference(answer, tail)
        return Finding(
            probe.id,
            f"probe {probe.id}: the trained completion of message {index} is not "
            f"the content: expected {around(answer, pos, ctx.control_tokens)}, "
            f"got {around(tail, pos, ctx.control_tokens)}",
            {"message_index": index, "char_position": len(prompt) + pos},
        )
    rest = tail[len(header) + len(answer) :]
    stop = next((t for t in ctx.stop_tokens if rest.startswith(t)), None)
    if stop is None:
        nearest = min(((rest.find(t), t) for t in ctx.stop_tokens if t in rest), default=(-1, None))
        extra = rest[: nearest[0]] if nearest[0] > 0 else rest[:20]
        return Finding(
            probe.id,
            f"probe {probe.id}: message {index}: after the content comes "
            f"{extra!r} before the stop token {nearest[1] or ctx.stop_tokens[0]}: "
            f"the model is trained to write it; "
            f"{around(full, len(prompt) + len(header) + len(answer), ctx.control_tokens)}",
            {"message_index": index, "char_position": len(prompt) + len(header) + len(answer), "extra": extra},
        )
    after = rest[len(stop) :]
    if after.strip():
        return Finding(
            probe.id,
            f"probe {probe.id}: message {index}: text {after[:20]!r} follows the stop token {stop}",
            {"message_index": index},
        )
    prompt_ids, full_ids = ctx.renderer.encode(prompt), ctx.renderer.encode(full)
    if full_ids[: len(prompt_ids)] != prompt_ids:
        i = first_difference(prompt_ids, full_ids)
        own = header == "" and answer[:1].isspace()  # the data's leading whitespace, not the template's
        return Finding(
            probe.id,
            f"probe {probe.id}: the prompt's tokens are not a prefix of the "
            f"conversation's at token {i}: {ctx.pieces(prompt_ids[i : i + 2])} vs "
            f"{ctx.pieces(full_ids[i : i + 2])} (the answer merges into the prompt"
            + ("; it starts with whitespace, which the tokenizer joins to the prompt's last token)" if own else ")"),
            {"message_index": index, "token_position": i},
            severity="warning" if own else None,
            cause="input normalization" if own else None,
            hint="strip leading whitespace from answers in the data" if own else None,
        )
    completion = full_ids[len(prompt_ids) :]
    stop_id = ctx.token_id(stop)
    if stop_id not in completion or ctx.tokenizer.decode(completion[: completion.index(stop_id)]) != header + answer:
        return Finding(
            probe.id,
            f"probe {probe.id}: message {index}: the completion tokens "
            f"{ctx.pieces(completion[:8])} do not decode to the content then "
            f"{stop}",
            {"message_index": index, "token_position": len(prompt_ids)},
        )
    return None


def _trimmed(ctx: VerifyContext, probe: Probe, index: int, answer: str, tail: str) -> Finding | None:
    """When the template trims the content (`| trim`, `.lstrip('\\n')`): the model is trained on other text than
    the data's. None when the rendering holds the content's text with all its whitespace, or not at all."""
    core = answer.strip()
    at = tail.find(core) if core else -1
    if at < 0:
        return None
    lead, trail = answer[: answer.find(core)], answer[answer.find(core) + len(core) :]
    kept_lead = next(lead[i:] for i in range(len(lead) + 1) if tail[:at].endswith(lead[i:]))
    if _generated_header(ctx, tail[: at - len(kept_lead)] + answer, answer) is None:
        return None
    after = tail[at + len(core) :]
    kept_trail = next(trail[:i] for i in range(len(trail), -1, -1) if after.startswith(trail[:i]))
    lost = [
        f"{side} '{visible(ws)}'"
        for side, ws in (("leading", lead[: len(lead) - len(kept_lead)]), ("trailing", trail[len(kept_trail) :]))
        if ws
    ]
    if not lost:
        return None
    return Finding(
        probe.id,
        f"probe {probe.id}: message {index}: the trained completion is the content trimmed: its {' and '.join(lost)} "
        f"whitespace is not trained (the template strips content), so the model learns other text than the data says",
        {"message_index": index, "char_position": at, "lost": lost},
        hint="write message content as given (drop `| trim`, `.strip()`), or strip the dataset's content before "
        "training so the data and the rendering agree",
    )


def completion_matches_content(ctx: VerifyContext) -> CheckResult:
    if (missing := ctx.missing_turn_end()) is not None:
        return CheckResult("completion-matches-content", "fail", missing, "plain", hint=turn_end_hint(missing))
    findings = []
    probes = _completion_probes(ctx)
    for probe in probes:
        finding = _completion_finding(ctx, probe)
        if finding is not None:
            findings.append(finding)
    if not probes:
        return CheckResult("completion-matches-content", "skip", "no probe ends with a plain assistant answer")
    return verdict(
        "completion-matches-content",
        findings,
        f"the trained completion is exactly content + {ctx.stop_tokens[0]} ({len(probes)} probes)",
        "write the stop token right after the content, and let the generation prompt end where the answer begins",
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
