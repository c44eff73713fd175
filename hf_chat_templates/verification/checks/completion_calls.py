"""What `completion-matches-content` says of a tool-call turn: the trained turn, the calls then the stop token,
holds no whitespace between its last call and the stop (`'</tool_call> <|im_end|>'` trains the model to write a
space before it stops, which the data never said)."""

from __future__ import annotations

from ...conversations.probes import Probe
from ..context import VerifyContext
from ..results import Finding, around, visible


def _call_turn_finding(ctx: VerifyContext, probe: Probe, k: int) -> Finding | None:
    """Whitespace the template writes between the end of tool-call turn `k` (its last call, or its content when
    that comes last) and the stop token that ends it; None when the turn ends as the data does."""
    messages = probe.message_list()
    request = ctx.snapshot(probe, k)
    rendered = ctx.renderer.render(messages[: k + 1], probe.tool_list())
    prompt, whole = request.text or "", rendered.text or ""
    if not (request.ok and rendered.ok and whole.startswith(prompt)):
        return None  # the turn cannot be told apart from its prompt: prefix-stable and assistant-mask report it
    tail = whole[len(prompt) :]
    ends = [(at, stop) for stop in ctx.stop_tokens if (at := tail.find(stop)) > 0]
    if not ends:
        return None  # a call turn with no stop token: stop-token-registered and structure report it
    at, stop = min(ends)
    trained = tail[:at]
    space = trained[len(trained.rstrip()) :]
    content = messages[k].get("content")
    if not space or not trained.strip() or (isinstance(content, str) and content and content.endswith(space)):
        return None
    if _separates_content(ctx, space, stop):
        return None  # the format's separator between the calls and the text after them, written with no text too
    pos = len(prompt) + at - len(space)
    return Finding(
        probe.id,
        f"probe {probe.id}: message {k} (a tool-call turn): after its calls comes '{visible(space)}' before the stop "
        f"token {stop} at char {pos}: the model is trained to write it before it stops, which the data never said; "
        f"{around(whole, pos, ctx.control_tokens)}",
        {"message_index": k, "char_position": pos, "extra": space},
        hint=f"write {stop} right after a call turn's last call: drop the whitespace the template writes after each "
        "call (or write it between calls only)",
    )


def _separates_content(ctx: VerifyContext, space: str, stop: str) -> bool:
    """Whether `space` is what a call turn writes between its calls and its content when the content comes after
    them (MiniCPM's `<|tool_call_end|>\n` + content + `<|im_end|>`): in some probe, a call turn's content follows
    it right before the stop token. Computed once per whitespace and stop."""
    key = f"call-turn-separator:{space}:{stop}"
    if key not in ctx.cache:
        ctx.cache[key] = any(
            isinstance(c := m.get("content"), str) and c.strip() and f"{space}{c}{stop}" in text
            for p in ctx.probes
            if ctx.rendered[p.id].ok and (text := ctx.rendered[p.id].text or "")
            for m in p.messages
            if m.get("role") == "assistant" and m.get("tool_calls")
        )
    return bool(ctx.cache[key])


def call_turn_endings(ctx: VerifyContext) -> list[Finding]:
    """Each probe's first tool-call turn that ends with whitespace before its stop token (needs a stop token)."""
    if not ctx.stop_tokens:
        return []
    findings = []
    for probe in ctx.probes:
        if probe.continue_final_message or not ctx.applicable(probe) or not ctx.rendered[probe.id].ok:
            continue
        for k in probe.generation_points:
            if probe.messages[k].get("tool_calls") and (found := _call_turn_finding(ctx, probe, k)) is not None:
                findings.append(found)
                break
    return findings
