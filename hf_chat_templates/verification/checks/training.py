"""`assistant-mask`: the mask a training variant gives is the generated part of every assistant turn, found by
rendering differences, through the stop token and not one token of the prompt before it."""

from __future__ import annotations

from typing import Any

from ...conversations.probes import Probe
from ...template.rendering import Renderer
from ...template.spans import PROMPT_NOT_PREFIX, Span, TurnSpans, token_mask
from ...template.training_variant import TRAINING_TEMPLATE_NAME, derive_training_template
from ...tokenizer.lossless import byte_level_lossless
from ..context import VerifyContext
from ..format_history import PER_TURN_HINT, format_own
from ..history_reasoning import dropped_history_reasoning, history_severity
from ..results import NO_STOP_TOKEN, CheckResult, Finding, turn_end_hint, verdict, visible
from .content_kept import unclosed_calls
from .stability import data_whitespace_at


def training_template_of(ctx: VerifyContext) -> tuple[str, str]:
    """The folder's named training template when it has one, else one derived from the template verified."""
    if ctx.folder is not None and (own := ctx.folder.named_template(TRAINING_TEMPLATE_NAME)) is not None:
        return own, "the folder's training template"
    return (derive_training_template(ctx.template, ctx.stop_tokens, ctx.control_tokens), "the derived training variant")


def _region(spans: tuple[Span, ...], pos: int) -> str:
    for span in spans:
        if span.start <= pos < span.end:
            return f"the generated part of message {span.message}"
        if pos < span.start:
            return f"the prompt before message {span.message}'s generated part (its role header)"
    return "the text after the last assistant turn"


def _span_findings(
    ctx: VerifyContext,
    probe: Probe,
    found: TurnSpans,
    ids: list[int],
    offsets: list[tuple[int, int]],
    findings: list[Finding],
    untrained: list[Finding],
) -> None:
    """Each span holds a stop token and ends with it; a span whose first token starts in the prompt is noted."""
    for span in found.spans:
        if span.closing is None:
            findings.append(
                Finding(
                    probe.id,
                    f"probe {probe.id}: the generated part of message {span.message} "
                    f"holds no stop token ({', '.join(ctx.stop_tokens)}): the model "
                    f"would never learn to end the turn",
                    {"message_index": span.message, "char_position": span.end},
                )
            )
            continue
        covered = [t for t, (a, b) in enumerate(offsets) if b > span.start and a < span.end]
        if covered and offsets[covered[0]][0] < span.start:
            untrained.append(_straddling(ctx, probe, span, covered[0], ids, offsets))
        if not covered or ids[covered[-1]] != ctx.token_id(span.closing):
            t = covered[-1] if covered else 0
            findings.append(
                Finding(
                    probe.id,
                    f"probe {probe.id}: the generated part of message {span.message} "
                    f"does not end with the token {span.closing} (ends with "
                    f"{ctx.pieces(ids[t : t + 1])} at token {t})",
                    {"message_index": span.message, "token_position": t},
                )
            )


def _straddling(
    ctx: VerifyContext, probe: Probe, span: Span, t: int, ids: list[int], offsets: list[tuple[int, int]]
) -> Finding:
    """Token t starts in the prompt and ends in the generated part. When the characters it takes from the
    generated part are the answer's own leading whitespace, the data merges with the role header's last token
    (at inference the prompt ends with that token): for the record, the one place verify says so. When they are
    text the template writes, the template makes a boundary the model never sees at inference."""
    piece = ctx.pieces(ids[t : t + 1])
    detail = {"message_index": span.message, "token_position": t, "char_position": span.start}
    text = ctx.rendered[probe.id].text or ""
    taken = text[span.start : offsets[t][1]]
    if taken.isspace() and data_whitespace_at(probe.messages[span.message], text, span.start):
        return Finding(
            probe.id,
            f"probe {probe.id}: message {span.message}'s content starts with whitespace ({visible(taken)}), which "
            f"shares token {t} {piece} with the role header's last character: the mask boundary falls inside a "
            f"token, so the request at inference (ending with the header's own token) is tokenized otherwise; "
            f"this is the data, not the template",
            detail,
            severity="info",
            cause="input normalization",
            hint="strip leading whitespace from assistant content before training, if the model should not learn it",
        )
    return Finding(
        probe.id,
        f"probe {probe.id}: token {t} {piece} starts in the prompt and ends in the generated part of message "
        f"{span.message}: the template writes {visible(taken)!r} after the role header, and it merges with the "
        f"header's last token, a tokenization the model never sees at inference",
        detail,
        cause="template",
        hint="end the role header with a token the template's next text cannot merge with",
    )


def _mask_finding(
    ctx: VerifyContext,
    probe: Probe,
    origin: str,
    found: TurnSpans,
    ids: list[int],
    offsets: list[tuple[int, int]],
    mask: list[int],
    expected: list[int],
) -> Finding:
    t = next(i for i, (a, b) in enumerate(zip(mask, expected)) if a != b)
    piece = ctx.pieces(ids[t : t + 1])
    region = _region(found.spans, offsets[t][0])
    message = ctx.message_at(probe, offsets[t][0])
    if expected[t]:
        what = "leaves out"
        if ids[t] in {ctx.token_id(s.closing) for s in found.spans if s.closing}:
            region = "the stop token of " + region
    else:
        what = "marks"
    return Finding(
        probe.id,
        f"probe {probe.id}: the mask from {origin} {what} token {t} {piece} (message {message}), which is {region}",
        {"message_index": message, "token_position": t, "char_position": offsets[t][0]},
    )


def _text_finding(
    ctx: VerifyContext, probe: Probe, training: Renderer, origin: str, text: str, flags: dict[str, Any]
) -> Finding | None:
    """Why the training template does not give the probe's text: it does not render, or renders other text."""
    other = training.render(probe.message_list(), probe.tool_list(), **flags)
    if not other.ok:
        return Finding(probe.id, f"probe {probe.id}: {origin} does not render: {other.error}")
    if other.text != text:
        return ctx.text_difference(
            probe, f"{origin} renders differently from the template", ("template", "training"), text, other.text or ""
        )
    return None


def _masked(
    ctx: VerifyContext,
    probe: Probe,
    training: Renderer,
    origin: str,
    text: str,
    ids: list[int],
    one_to_one: bool,
) -> tuple[Finding | None, tuple[list[int], list[int]] | None]:
    """The training template's (ids, mask) from apply_chat_template (None: it has no markers), or the finding that
    it does not give the template's text. Where encoding is one to one (byte-level BPE), the same ids are the same
    text, so its text is rendered only when its ids differ or no mask comes back; elsewhere two texts can give the
    same ids (a normalizer, an added token that strips), so the text is compared first."""
    flags = {"add_generation_prompt": probe.add_generation_prompt}
    if not one_to_one:
        if (finding := _text_finding(ctx, probe, training, origin, text, flags)) is not None:
            return finding, None
        return None, training.assistant_mask(probe.message_list(), probe.tool_list(), **flags)
    try:
        result = training.assistant_mask(probe.message_list(), probe.tool_list(), **flags)
    except Exception:  # the text says why when it can; otherwise the error is the check's, as it would be above
        if (finding := _text_finding(ctx, probe, training, origin, text, flags)) is not None:
            return finding, None
        raise
    differs = result is None or result[0] != ids
    if differs and (finding := _text_finding(ctx, probe, training, origin, text, flags)) is not None:
        return finding, None
    return None, result


def _untrained(ctx: VerifyContext, probe: Probe, index: int, why: str, text: str) -> Finding:
    """Message `index` has no span; info when its request is not a prefix of the conversation in the official
    renderer the template follows either (the format's own, met by training per turn), or when the difference is
    only the reasoning of turns before a later user message, which thinking models drop by design."""
    own, severity = None, "info"
    messages = probe.message_list()
    if why == PROMPT_NOT_PREFIX and (request := ctx.snapshot(probe, index)).ok:
        own = format_own(ctx, probe, index, request.text or "", text)
        if own is None:
            own = dropped_history_reasoning(ctx, messages, index - 1, request.text or "", text)
            severity = history_severity(ctx)
    elif why != PROMPT_NOT_PREFIX:
        turn = ctx.renderer.render(messages[: index + 1], probe.tool_list(), add_generation_prompt=False)
        if turn.ok:
            own = dropped_history_reasoning(ctx, messages, index, _through_last_stop(ctx, turn.text or ""), text)
            severity = history_severity(ctx)
    return Finding(
        probe.id,
        f"probe {probe.id}: message {index} is not trained: {why}" + (f"; {own}" if own else ""),
        {"message_index": index, **({"format": own} if own else {})},
        severity=severity if own else None,
        hint=PER_TURN_HINT if own else None,
    )


def _through_last_stop(ctx: VerifyContext, turn: str) -> str:
    """A turn's rendering cut after its last stop token: what a template writes after it is not the turn's."""
    cut = max((turn.rfind(s) + len(s) for s in ctx.stop_tokens if s and s in turn), default=len(turn))
    return turn[:cut]


def _check_probe(
    ctx: VerifyContext,
    probe: Probe,
    training: Renderer,
    origin: str,
    found: TurnSpans,
    findings: list[Finding],
    untrained: list[Finding],
    one_to_one: bool,
) -> None:
    """The training template renders the probe's text, and its mask is the render-difference spans."""
    text = ctx.rendered[probe.id].text or ""
    for index, why in found.untrained:
        untrained.append(_untrained(ctx, probe, index, why, text))
    ids, offsets = ctx.renderer.encode_with_offsets(text)
    finding, result = _masked(ctx, probe, training, origin, text, ids, one_to_one)
    if finding is not None:
        findings.append(finding)
        return
    expected = token_mask(offsets, found.spans)
    _span_findings(ctx, probe, found, ids, offsets, findings, untrained)
    if result is None:
        findings.append(
            Finding(
                probe.id,
                f"probe {probe.id}: {origin} has no {{% generation %}} markers: transformers returns no assistant mask",
            )
        )
        return
    got_ids, mask = result
    if got_ids != ids:
        findings.append(
            Finding(
                probe.id, f"probe {probe.id}: apply_chat_template with {origin} gives other ids than encoding its text"
            )
        )
    elif mask != expected:
        findings.append(_mask_finding(ctx, probe, origin, found, ids, offsets, mask, expected))


def assistant_mask(ctx: VerifyContext) -> CheckResult:
    if not ctx.stop_tokens:
        return CheckResult("assistant-mask", "skip", NO_STOP_TOKEN)
    if (missing := ctx.missing_turn_end()) is not None:
        return CheckResult("assistant-mask", "fail", missing, "plain", hint=turn_end_hint(missing))
    template, origin = training_template_of(ctx)
    tool_training = (
        derive_training_template(ctx.tool_template, ctx.stop_tokens, ctx.control_tokens)
        if ctx.tool_template is not None and origin == "the derived training variant"
        else None
    )
    training = Renderer(ctx.tokenizer, template, ctx.kwargs, tool_template=tool_training, clock=ctx.renderer.clock)
    one_to_one = byte_level_lossless(ctx.tokenizer)
    findings: list[Finding] = []
    untrained: list[Finding] = []
    checked = 0
    for probe in ctx.probes:
        plain = ctx.rendered[probe.id]
        if probe.continue_final_message or probe.reads_only or not plain.ok or not ctx.applicable(probe):
            continue
        if not any(m.get("role") == "assistant" for m in probe.messages):
            continue
        try:
            found = ctx.spans(probe)
        except Exception as err:
            findings.append(
                Finding(
                    probe.id,
                    f"probe {probe.id}: a shorter prefix of the conversation does not "
                    f"render, so the turns cannot be found: {err}",
                )
            )
            continue
        checked += 1
        _check_probe(ctx, probe, training, origin, found, findings, untrained, one_to_one)
    unclosed = unclosed_calls(ctx)
    findings += unclosed
    if not checked and not unclosed:
        return CheckResult("assistant-mask", "skip", "no probe with an assistant turn renders")
    hint = (
        "wrap exactly the generated part, through the stop token, in {% generation %}; or install the derived "
        f"variant with {ctx.install_command('--training')}"
    )
    if findings:
        return verdict("assistant-mask", findings + untrained, "", hint)
    return verdict(
        "assistant-mask",
        untrained,
        f"the mask of {origin} is each assistant turn's generated part through its stop token "
        f"({checked} probes), and it renders the same text",
        "see the message: a turn rendered differently in context, or content whose leading whitespace "
        "merges with the role header",
        status="warn",
    )
