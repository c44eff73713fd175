"""`completion-matches-content`: the trained completion of an answer is exactly its content and the stop token,
after a generation prompt that is its prefix. The format's own whitespace between the role header and the answer
(`[/INST] answer`, `ASSISTANT: answer`, SentencePiece's word-start ▁) is a stated limit, not a mistrained answer."""

from __future__ import annotations

import functools
from typing import Any

from jinja2 import nodes

from ...conversations.probes import Probe
from ...template.safety_findings import literal_value
from ...template.syntax import parse_environment
from ..context import VerifyContext
from ..results import CheckResult, Finding, around, first_difference, turn_end_hint, verdict, visible
from .completion_calls import call_turn_endings


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
    if header.isspace():  # the format's whitespace after the role header (` [/INST] `, `ASSISTANT: `)
        return header
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
    tail = full[len(prompt) : _turn_end(ctx, probe, index, len(prompt))]
    header = _generated_header(ctx, tail, answer)
    prefix = _format_prefix(ctx, probe, prompt, full, tail[: tail.find(answer)]) if header is None else None
    if prefix is not None:  # the format's own text the model writes first (functionary's recipient `all\n`)
        header = prefix
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
    if header is not None and header.isspace() and len(header) > 1:
        return _layout_whitespace(ctx, probe, index, (prompt, header, tail[len(header) + len(answer) :]))
    if not ctx.stop_tokens:  # the content is the answer's text; what ends the turn is stop-token-registered's
        return None
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
            severity="info" if own else None,  # the data's whitespace, not the template's: assistant-mask notes it
            cause="input normalization" if own else None,
            hint="strip leading whitespace from answers in the data" if own else None,
        )
    found = _decoded_finding(ctx, probe, index, (prompt, header, answer, stop), full_ids, len(prompt_ids))
    if found is None and prefix is not None:
        return _prefix_finding(ctx, probe, index, prefix, prompt)
    return found


def _turn_end(ctx: VerifyContext, probe: Probe, index: int, start: int) -> int | None:
    """Where the answer's turn ends when no stop token is known: where the next message's text begins (None: the
    rendering's end). With a stop token the completion runs on through it."""
    bounds = ctx.message_boundaries(probe) if not ctx.stop_tokens else None
    return bounds[index] if bounds and bounds[index] >= start else None


def _decoded_finding(
    ctx: VerifyContext, probe: Probe, index: int, parts: tuple[str, str, str, str], ids: list[int], start: int
) -> Finding | None:
    """Whether the completion tokens (`ids` from `start`, the prompt's length in tokens) decode to the header, the
    content, then the stop token (`parts`: the prompt, the header, the content, the stop token)."""
    prompt, header, answer, stop = parts
    completion = ids[start:]
    stop_id = ctx.token_id(stop)
    decoded = ctx.tokenizer.decode(completion[: completion.index(stop_id)]) if stop_id in completion else None
    if decoded == header + answer:
        return _leading_space(ctx, probe, index, header, prompt) if header.isspace() else None
    pieces = ctx.tokenizer.convert_ids_to_tokens(completion[:1])
    word_start = bool(pieces) and str(pieces[0]).startswith("\u2581")
    # The decoder drops the word-start space of SentencePiece's first piece (` answer` decodes as `answer`), or
    # adds one the text does not have (`[/INST]answer` trains `▁answer`): the model generates a leading space
    if (header.isspace() and decoded == header[1:] + answer) or (
        header == "" and word_start and decoded == " " + answer
    ):
        return _leading_space(ctx, probe, index, header or "\u2581", prompt)
    return Finding(
        probe.id,
        f"probe {probe.id}: message {index}: the completion tokens "
        f"{ctx.pieces(completion[:8])} do not decode to the content then "
        f"{stop}",
        {"message_index": index, "token_position": start},
    )


def _format_prefix(ctx: VerifyContext, probe: Probe, prompt: str, full: str, prefix: str) -> str | None:
    """`prefix`, the text between the generation prompt and the answer, when it is the format's own: a constant of
    the template (a string literal that holds it right after text the generation prompt ends with: functionary's
    `'>>>all\n'` after a prompt ending `>>>`), no data of the probe's, and written before every plain assistant
    answer of the probe, where a tool-call turn writes something else after the same prompt (`_turns_diverge`).
    Else None: text that comes from the data, that only some turns have, or that every turn has (the prompt could
    hold it) is no format's. Whether every probe's answer has the same prefix is `completion_matches_content`'s."""
    if not prefix or prefix.isspace() or any(s.text in prefix for s in probe.sentinels):
        return None
    if not any(
        prompt.endswith(text[: text.find(prefix)]) for text in template_literals(ctx.template) if prefix in text
    ):
        return None
    answers = [
        m["content"]
        for m in probe.messages
        if m.get("role") == "assistant"
        and isinstance(m.get("content"), str)
        and m["content"]
        and not m.get("tool_calls")
    ]
    if not all(prefix + answer in full for answer in answers):
        return None
    return prefix if _turns_diverge(ctx, prefix) else None


def _turns_diverge(ctx: VerifyContext, prefix: str) -> bool:
    """Whether the generation prompt ends where the model chooses what comes next: a tool-call turn continues the
    same prompt with other text than `prefix` (functionary: `>>>` then `all\n` before an answer, the tool's name
    before a call). A prefix every kind of turn writes is text the generation prompt could have held: no format's,
    and the model is trained to write what the data never said. Computed once per prefix."""
    key = f"completion-prefix:{prefix}"
    if key not in ctx.cache:
        ctx.cache[key] = any(_call_turn_continues(ctx, p, prefix) for p in ctx.probes)
    return bool(ctx.cache[key])


def _call_turn_continues(ctx: VerifyContext, probe: Probe, prefix: str) -> bool:
    """Whether one of the probe's tool-call turns (no content) follows its generation prompt with text that does
    not start with `prefix`."""
    if probe.continue_final_message or not ctx.applicable(probe) or not ctx.rendered[probe.id].ok:
        return False
    for k in probe.generation_points:
        turn = probe.messages[k]
        if not turn.get("tool_calls") or turn.get("content"):
            continue
        request = ctx.snapshot(probe, k)
        rendered = ctx.renderer.render(probe.message_list()[: k + 1], probe.tool_list())
        text, whole = request.text or "", rendered.text or ""
        if request.ok and rendered.ok and whole.startswith(text) and len(whole) > len(text):
            return not whole[len(text) :].startswith(prefix)
    return False


@functools.lru_cache(maxsize=8)
def template_literals(template: str) -> tuple[str, ...]:
    """Every string the template writes or builds from a literal: its text between tags and its string constants."""
    try:
        tree = parse_environment().parse(template)
    except Exception:  # a template that does not parse has no literals; `renders` reports it
        return ()
    found = {literal_value(node) for node in tree.find_all((nodes.TemplateData, nodes.Const))}
    return tuple(text for text in found if isinstance(text, str) and text)


def _prefix_finding(ctx: VerifyContext, probe: Probe, index: int, prefix: str, prompt: str) -> Finding:
    """The format's own text between the generation prompt and the answer, a constant the template writes in every
    assistant turn (functionary's recipient: the prompt ends `>>>`, the model writes `all\n` then the answer): the
    model is trained to generate it, as it must at inference. A stated limit of the format: serving parses it off."""
    return Finding(
        probe.id,
        f"probe {probe.id}: message {index}: the trained answer starts with '{visible(prefix)}', which the template "
        f"writes from a constant before every answer, after the generation prompt "
        f"({around(prompt, len(prompt), ctx.control_tokens)}) where a tool call writes its own text instead: the "
        "format's own prefix, which the model generates to choose an answer; serving should parse it off the reply",
        {"message_index": index, "char_position": len(prompt), "prefix": prefix},
        severity="info",
        hint="parse the format's prefix off generated replies when serving; keep the generation prompt as it is",
    )


def _layout_whitespace(ctx: VerifyContext, probe: Probe, index: int, parts: tuple[str, str, str]) -> Finding:
    """More than one whitespace character between the generation prompt and the content (`parts`: the prompt, that
    whitespace, what follows the content): the template's own layout (indentation and line breaks around its
    tags, written where no whitespace control trims them), not the format's one separator (` [/INST] answer`)."""
    prompt, lead, after = parts
    trailing = f" and '{visible(after)}' after it" if not ctx.stop_tokens and after.isspace() else ""
    return Finding(
        probe.id,
        f"probe {probe.id}: message {index}: the trained completion starts with '{visible(lead)}' ({len(lead)} "
        f"whitespace characters the template writes after the generation prompt, before the content){trailing}: "
        f"the model is trained to write whitespace the data never said; "
        f"{around(prompt + lead, len(prompt), ctx.control_tokens)}",
        {"message_index": index, "char_position": len(prompt), "lead": lead},
        hint="write the content right after the generation prompt: trim the template's indentation and line breaks "
        "around its tags with whitespace control (`{{- … -}}`, `{%- … -%}`), or end the generation prompt with "
        "the separator the answer follows",
    )


def _leading_space(ctx: VerifyContext, probe: Probe, index: int, lead: str, prompt: str) -> Finding:
    """The format's whitespace between the role header and the answer, which the generation prompt does not end
    with (`[/INST]` then ` answer`, `ASSISTANT:` then ` answer`, or SentencePiece's word-start ▁ on the first
    answer token): the model is trained to generate it. A stated limit of the format, not a mistrained answer:
    moving the space into the prompt would leave prompts ending in a lone space token the model never saw."""
    return Finding(
        probe.id,
        f"probe {probe.id}: message {index}: the trained answer starts with '{visible(lead)}', which the "
        f"generation prompt ({around(prompt, len(prompt), ctx.control_tokens)}) does not end with: the model "
        "generates a leading space before each answer; serving should strip it from the reply",
        {"message_index": index, "char_position": len(prompt), "lead": lead},
        severity="info",
        hint="strip the leading whitespace from generated replies when serving; keep the generation prompt as it "
        "is (a prompt ending in the space would end in a lone space token, which training never shows)",
    )


def _trimmed(ctx: VerifyContext, probe: Probe, index: int, answer: str, tail: str) -> Finding | None:
    """When the template trims the content (`| trim`, `.lstrip('\\n')`): the model is trained on other text than
    the data's. None when the rendering holds the content's text with all its whitespace, or not at all."""
    core = answer.strip()
    at = tail.find(core) if core else -1
    if at < 0:
        return None
    lead = answer[: answer.find(core)]
    kept_lead = next(lead[i:] for i in range(len(lead) + 1) if tail[:at].endswith(lead[i:]))
    if _generated_header(ctx, tail[: at - len(kept_lead)] + answer, answer) is None:
        return None
    lost = _lost(answer, tail[:at], tail[at + len(core) :])
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


def _lost(content: str, before: str, after: str) -> list[str]:
    """The content's leading and trailing whitespace the rendering does not show around its text (`before` and
    `after` it), each as `leading '…'`."""
    core = content.strip()
    lead, trail = content[: content.find(core)], content[content.find(core) + len(core) :]
    kept_lead = next(lead[i:] for i in range(len(lead) + 1) if before.endswith(lead[i:]))
    kept_trail = next(trail[:i] for i in range(len(trail), -1, -1) if after.startswith(trail[:i]))
    return [
        f"{side} '{visible(ws)}'"
        for side, ws in (("leading", lead[: len(lead) - len(kept_lead)]), ("trailing", trail[len(kept_trail) :]))
        if ws
    ]


def _trimmed_beside_calls(ctx: VerifyContext) -> list[Finding]:
    """The content of a tool-call turn written trimmed (`'\n' + content | trim`): the text the model is trained to
    write beside its calls is not the data's. Each probe once; content not written at all is nothing-dropped's."""
    findings = []
    for probe in ctx.probes:
        text = ctx.rendered[probe.id].text or ""
        if not ctx.applicable(probe) or not text:
            continue
        for index, m in enumerate(probe.messages):
            content = m.get("content")
            if not m.get("tool_calls") or not isinstance(content, str) or content.strip() in ("", content):
                continue
            at = text.find(content.strip())
            if content in text or at < 0 or not (lost := _lost(content, text[:at], text[at + len(content.strip()) :])):
                continue
            findings.append(
                Finding(
                    probe.id,
                    f"probe {probe.id}: message {index}: the content beside the tool calls is written trimmed: its "
                    f"{' and '.join(lost)} whitespace is not trained (the template strips the content of a call "
                    f"turn), so the model learns other text than the data says; "
                    f"{around(text, at + len(content.strip()), ctx.control_tokens)}",
                    {"message_index": index, "char_position": at, "lost": lost},
                    hint="write a call turn's content as given (drop `| trim`, `.strip()`), or strip the dataset's "
                    "content before training so the data and the rendering agree",
                )
            )
            break
    return findings


def completion_matches_content(ctx: VerifyContext) -> CheckResult:
    # With no stop token the answer's text is still compared with the content, up to where the next turn begins:
    # a trimmed or rewritten answer is trained on text the data did not say (the missing stop is reported apart)
    if ctx.stop_tokens and (missing := ctx.missing_turn_end()) is not None:
        return CheckResult("completion-matches-content", "fail", missing, "plain", hint=turn_end_hint(missing))
    findings = []
    probes = _completion_probes(ctx)
    for probe in probes:
        finding = _completion_finding(ctx, probe)
        if finding is not None:
            findings.append(finding)
    prefixes = {f.detail["prefix"] for f in findings if "prefix" in f.detail}
    if prefixes and (len(prefixes) > 1 or len([f for f in findings if "prefix" in f.detail]) < len(probes)):
        # Not the same text before every answer: it depends on the turn, not the format
        for f in findings:
            if "prefix" in f.detail:
                f.severity = None
                f.text = f.text.split(", which the template")[0] + ": other answers start otherwise; the model is "
                "trained on it"
    leads = [f for f in findings if "lead" in f.detail]
    if leads and len(leads) + sum(1 for f in findings if "lead" not in f.detail) < len(probes):
        # Some answers start with the whitespace and some do not: it depends on the content, not the format
        for f in leads:
            f.severity = None
            f.text = f.text.split(": the model generates")[0] + ": other answers do not; the model is trained on it"
    findings += _trimmed_beside_calls(ctx) + call_turn_endings(ctx)
    if not probes:
        return CheckResult("completion-matches-content", "skip", "no probe ends with a plain assistant answer")
    return verdict(
        "completion-matches-content",
        findings,
        f"the trained completion is exactly content + {ctx.stop_tokens[0]} ({len(probes)} probes)"
        if ctx.stop_tokens
        else f"the trained completion starts with exactly the content ({len(probes)} probes; no stop token is known)",
        "write the stop token right after the content, and let the generation prompt end where the answer begins",
    )
