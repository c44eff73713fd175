"""`boundary-merge`: no token spans two messages. A merge changes what the model learns or sees only where it
crosses a cut point (a trained span's start or end, the end of a generation prompt): there it is an error; in text
that is never trained and that a request tokenizes the same way it is info."""

from __future__ import annotations

import contextlib

from ...conversations.probes import Probe
from ..context import VerifyContext
from ..results import CheckResult, Finding, around, verdict
from .tokens import _rendered_probes


def _cut_points(ctx: VerifyContext, probe: Probe, text: str) -> set[int]:
    """Where what is trained or served is cut: each trained span's start and end, and the end of each generation
    prompt before an answer. A token across one of them is trained or served otherwise than the other way."""
    cuts: set[int] = set()
    with contextlib.suppress(ValueError):  # a template that raises has no spans; renders reports it
        cuts |= {edge for span in ctx.spans(probe).spans for edge in (span.start, span.end)}
    for k, message in enumerate(probe.messages):
        if k and message.get("role") == "assistant":
            prompt = ctx.snapshot(probe, k)
            if prompt.ok and text.startswith(prompt.text or ""):
                cuts.add(len(prompt.text or ""))
    return cuts


def _merge_finding(
    ctx: VerifyContext, probe: Probe, text: str, token: tuple[int, str, int, int], b_index: int, cuts: set[int]
) -> Finding:
    """A token across the end of message `b_index` (`token`: its position, its piece, its start and end char): an
    error where it also crosses a cut point, info where it lies in text tokenized the same in training and at
    inference, or where the cut falls in the next message's own leading whitespace (the data's)."""
    t_index, piece, start, end = token
    boundary = ctx.message_boundaries(probe)[b_index]  # type: ignore[index]
    where = (
        f"probe {probe.id}: token {t_index} {piece} spans the boundary "
        f"between message {b_index} and {b_index + 1} at char {boundary}: {around(text, boundary, ctx.control_tokens)}"
    )
    detail = {"token_position": t_index, "char_position": boundary, "message_index": b_index + 1}
    cut = next((c for c in sorted(cuts) if start < c < end), None)
    if cut is None:
        return Finding(
            probe.id,
            f"{where}; it lies in text that is not trained and that a request tokenizes the same way, so the model "
            "sees at inference the tokens it was trained on",
            detail,
            severity="info",
            hint="nothing to change; a control token or a newline the pre-tokenizer splits on would keep messages "
            "apart",
        )
    marker = next((t for t in ctx.role_markers if _overlaps(text, t, start, end)), None)
    if marker is not None:
        return Finding(
            probe.id,
            f"{where}; the token joins {marker}, which the template builds from the role "
            f"{ctx.role_markers[marker]!r}, a role the format does not have (control-tokens-atomic says so): a "
            "conversation in that role is input the model was not trained on",
            detail | {"cut": cut, "token": marker},
            severity="info",
            cause="input normalization",
            hint=f"send no {ctx.role_markers[marker]!r} messages, or map them to a role the format has",
        )
    following = probe.messages[b_index + 1].get("content") if b_index + 1 < len(probe.messages) else None
    if isinstance(following, str) and following[:1].isspace() and text.startswith(following, cut):
        return Finding(
            probe.id,
            f"{where}; message {b_index + 1} starts with whitespace, which the tokenizer joins to the text before it "
            f"at char {cut}, where the trained part or the generation prompt is cut",
            detail | {"cut": cut},
            severity="info",  # the data's whitespace, not the template's: completion-matches-content notes it too
            cause="input normalization",
            hint="strip leading whitespace from answers in the data",
        )
    return Finding(
        probe.id,
        f"{where}; the token crosses char {cut}, where the trained part or the generation prompt is cut, so the "
        "model is trained or served other tokens than the other side of the cut gives",
        detail | {"cut": cut},
    )


def _overlaps(text: str, token: str, start: int, end: int) -> bool:
    """Whether an occurrence of `token` in `text` overlaps text[start:end]."""
    at = text.find(token, max(start - len(token) + 1, 0))
    return 0 <= at < end


def boundary_merge(ctx: VerifyContext) -> CheckResult:
    findings = []
    checked = 0
    for probe, text in _rendered_probes(ctx):
        bounds = ctx.message_boundaries(probe)
        if not bounds:
            continue
        checked += 1
        ids, offsets = ctx.renderer.encode_with_offsets(text)
        cuts: set[int] | None = None
        for b_index, boundary in enumerate(bounds[:-1]):
            for t_index, (start, end) in enumerate(offsets):
                if start < boundary < end:
                    cuts = _cut_points(ctx, probe, text) if cuts is None else cuts
                    findings.append(
                        _merge_finding(
                            ctx, probe, text, (t_index, str(ctx.pieces([ids[t_index]])), start, end), b_index, cuts
                        )
                    )
                    break
    if not checked:
        return CheckResult("boundary-merge", "skip", "no probe renders its messages as string prefixes")
    return verdict(
        "boundary-merge",
        findings,
        f"no token spans a message boundary ({checked} probes)",
        "end each turn with a control token or a newline the pre-tokenizer always splits on",
    )
