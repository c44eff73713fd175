"""Stability at generation points: what an agent sends before each assistant turn is what training shows before it.

At every generation point k of a probe (messages[k] is an assistant turn), the request an agent sends (messages[:k]
with a generation prompt) must be a token prefix of the training rendering of the whole conversation. Where it is
not, the model is trained on text it never sees when it serves: a generation prompt unlike the rendered turn, or
earlier turns rewritten once the conversation goes past them (thinking models dropping earlier reasoning). Only
generation points are checked: a rendering that changes where no model writes (consecutive tool results grouped
into one turn) trains and serves the same.
"""

from __future__ import annotations

from typing import Any

from ...conversations.probes import Probe
from ..context import VerifyContext
from ..format_history import PER_TURN_HINT, format_own
from ..history_reasoning import dropped_history_reasoning, history_severity
from ..results import SEVERITIES, CheckResult, Finding, around, excerpt_bounds, first_difference, verdict

PROMPT_HINT = "make the generation prompt exactly the text that begins a rendered assistant turn"
HISTORY_HINT = (
    "render earlier turns the same way whatever follows them; or train one sample per assistant turn (each with "
    "its own request as prompt), or only the last turn"
)


def _training_text(ctx: VerifyContext, probe: Probe) -> str | None:
    """The probe's whole conversation rendered for training (no generation prompt), or None if it does not render."""
    if probe.add_generation_prompt:
        r = ctx.renderer.render(probe.message_list(), probe.tool_list())
    else:
        r = ctx.rendered[probe.id]
    return r.text if r.ok else None


def _role(probe: Probe, index: int | None) -> str:
    return f"message {index} ({probe.messages[index]['role']})" if index is not None else "an earlier message"


def _message_in_request(ctx: VerifyContext, probe: Probe, k: int, request: str, pos: int) -> int | None:
    """The message at char `pos` of the request before message k: from the training rendering's message
    boundaries, else the first j whose rendering of messages[:j + 1] reaches past `pos` and agrees with the request
    up to it."""
    found = ctx.message_at(probe, pos)
    if found is not None:
        return found
    messages, tools = probe.message_list(), probe.tool_list()
    for j in range(k):
        r = ctx.renderer.render(messages[: j + 1], tools)
        if not r.ok:
            return None
        text = r.text or ""
        if pos < len(text) and first_difference(text, request) > pos:
            return j
    return None


def _token_start(texts: tuple[str, str], pos: int, controls: tuple[str, ...]) -> int:
    """`pos` moved back to the start of a control token or tag it falls inside in either text, so an excerpt shows
    `⟨here⟩<think>` rather than `<t⟨here⟩hink>`."""
    return min(excerpt_bounds(text, pos, pos, controls)[0] for text in texts)


def _finding(ctx: VerifyContext, probe: Probe, k: int, request: str, full: str) -> Finding | None:
    """Why the request before message k is not a token prefix of the training rendering `full`, or None."""
    request_ids, full_ids = ctx.renderer.encode(request), ctx.renderer.encode(full)
    if full_ids[: len(request_ids)] == request_ids:
        return None
    token = first_difference(request_ids, full_ids)
    pos = first_difference(request, full)
    last = k == probe.generation_points[-1]
    controls = ctx.control_tokens
    shown = _token_start((request, full), pos, controls)
    detail: dict[str, Any] = {"generation_point": k, "char_position": pos, "token_position": token}
    turn = f"message {k} ({probe.messages[k]['role']})"
    consequence = (
        "the trained answer follows a prompt the model never sees at inference"
        if last
        else "training on the whole conversation trains this turn after a prompt the model never sees at inference"
    )
    if pos == len(request):
        return _merge_finding(ctx, probe, k, (request_ids, full_ids), full, detail, consequence, last)
    history = ctx.renderer.render(probe.message_list()[:k], probe.tool_list())
    history_end = len(history.text or "") if history.ok and request.startswith(history.text or "") else None
    # The official renderer the template follows renders the conversation with the same instability: the format's
    # own, a stated limit met by training per turn.
    own = format_own(ctx, probe, k, request, full)
    if own is not None:
        detail["format"] = own
    if history_end is not None and pos >= history_end:
        detail.update(message_index=k, where="generation prompt")
        return Finding(
            probe.id,
            f"probe {probe.id}: the generation prompt before {turn} differs from how the turn is rendered: the "
            f"request shows {around(request, shown, controls)}, the training rendering shows "
            f"{around(full, shown, controls)}; {own or consequence}",
            detail,
            severity="info" if own else "error" if last else "warning",
            cause="template",
            hint=PER_TURN_HINT if own else PROMPT_HINT,
        )
    index = _message_in_request(ctx, probe, k, request, pos)
    detail.update(message_index=index, where="history")
    severity = "info" if own else "warning"
    if own is None and (own := dropped_history_reasoning(ctx, probe.messages, k - 1, request, full)) is not None:
        detail["format"], severity = own, history_severity(ctx)
    return Finding(
        probe.id,
        f"probe {probe.id}: {_role(probe, index)} renders differently once the conversation goes past it: the "
        f"request before {turn} shows {around(request, shown, controls)}, the training rendering shows "
        f"{around(full, shown, controls)}; "
        + (
            own
            or "training on the whole conversation trains later turns after a history the model never saw: train "
            "one sample per turn (prepare --per-turn: each assistant turn with its own request as prompt), or only "
            "the last turn (--train-on last)"
        ),
        detail,
        severity=severity,
        cause="template",
        hint=PER_TURN_HINT if own else HISTORY_HINT,
    )


def data_whitespace_at(message: dict[str, Any], text: str, pos: int) -> bool:
    """Whether `text` shows the message's content from `pos` on, and the content starts with whitespace: what
    merges there with the token before is the data's own text, not the template's."""
    content = message.get("content")
    return isinstance(content, str) and content[:1].isspace() and text.startswith(content, pos)


def _merge_finding(
    ctx: VerifyContext,
    probe: Probe,
    k: int,
    ids: tuple[list[int], list[int]],
    full: str,
    detail: dict[str, Any],
    consequence: str,
    last: bool,
) -> Finding | None:
    """The request is a text prefix of the training rendering, but its last token merges with what follows: text
    the template writes after the prompt. When what follows is the answer's own leading whitespace, the data
    merges, not the template: `assistant-mask` notes it once, for the record."""
    request_ids, full_ids = ids
    token, pos = detail["token_position"], detail["char_position"]
    turn = f"message {k} ({probe.messages[k]['role']})"
    detail.update(message_index=k, where="generation prompt")
    merged = (
        f"token {token} {ctx.pieces(request_ids[token : token + 2])} becomes "
        f"{ctx.pieces(full_ids[token : token + 2])} ({around(full, pos, ctx.control_tokens)})"
    )
    if data_whitespace_at(probe.messages[k], full, pos):
        return None
    return Finding(
        probe.id,
        f"probe {probe.id}: the request before {turn} is a prefix of the training rendering as text but not as "
        f"tokens: {merged}: the template writes text after the generation prompt that joins its last token; "
        f"{consequence}",
        detail,
        severity="error" if last else "warning",
        cause="template",
        hint=PROMPT_HINT,
    )


def prefix_stable(ctx: VerifyContext) -> CheckResult:
    findings = []
    checked = 0
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    for probe in ctx.probes:
        if probe.continue_final_message or probe.reads_only or not probe.generation_points or not ctx.applicable(probe):
            continue
        full = _training_text(ctx, probe)
        if full is None:
            continue
        worst: Finding | None = None
        for k in probe.generation_points:
            request = ctx.snapshot(probe, k)
            if not request.ok:
                continue
            checked += 1
            finding = _finding(ctx, probe, k, request.text or "", full)
            if finding is not None and (
                worst is None or rank[finding.severity or "error"] < rank[worst.severity or "error"]
            ):
                worst = finding
        if worst is not None:
            findings.append(worst)
    if not checked:
        return CheckResult("prefix-stable", "skip", "no probe has a generation point whose request renders")
    return verdict(
        "prefix-stable",
        findings,
        f"the request at every generation point is a token prefix of the training rendering ({checked} points)",
        HISTORY_HINT,
    )
