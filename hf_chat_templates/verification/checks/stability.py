"""Stability at generation points: what an agent sends before each assistant turn is what training shows before it."""

from __future__ import annotations

from ..context import VerifyContext
from ..results import CheckResult, Finding, around, first_difference, verdict


def prefix_stable(ctx: VerifyContext) -> CheckResult:
    findings = []
    checked = 0
    for probe in ctx.probes:
        if len(probe.messages) < 3 or not ctx.rendered[probe.id].ok or not ctx.applicable(probe):
            continue
        messages, tools = probe.message_list(), probe.tool_list()
        for k in range(1, len(messages)):
            if messages[k - 1]["role"] == "assistant":
                continue  # a final answer may close differently from a past one (e.g. Harmony's <|return|>)
            shorter = ctx.renderer.render(messages[:k], tools)
            longer = ctx.renderer.render(messages[: k + 1], tools)
            if not (shorter.ok and longer.ok):
                continue
            checked += 1
            a, b = ctx.renderer.encode(shorter.text or ""), ctx.renderer.encode(longer.text or "")
            if b[: len(a)] != a:
                i = first_difference(a, b)
                pos = first_difference(shorter.text or "", longer.text or "")
                findings.append(
                    Finding(
                        probe.id,
                        f"probe {probe.id}: the ids of the first {k} messages are not a "
                        f"prefix of the first {k + 1}: token {i} {ctx.pieces(a[i : i + 2])} "
                        f"becomes {ctx.pieces(b[i : i + 2])} ({around(longer.text or '', pos, ctx.control_tokens)})",
                        {"message_index": k, "token_position": i, "char_position": pos},
                    )
                )
                break
    if not checked:
        return CheckResult("prefix-stable", "skip", "no multi-turn probe renders")
    return verdict(
        "prefix-stable",
        findings,
        f"each turn's ids extend the previous ones ({checked} prefixes)",
        "render earlier turns the same way whatever follows them",
    )
