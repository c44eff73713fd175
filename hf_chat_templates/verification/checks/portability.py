"""Checks on whether the rendering is the same elsewhere: at another moment (`deterministic`) and in the model's
official renderer (`reference-parity`); in other engines (`engine-parity`) is `engines`."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from ...conversations.probes import Probe
from ...template.analysis import template_kwargs
from ...template.rendering import Rendered, frozen_clock
from .. import mistral_reference as mr
from ..context import CLOCKS, VerifyContext
from ..references import REFERENCES, Unsupported, mistral_outcomes, reference_ids, uses_mistral_common
from ..results import CheckResult, Finding, around, first_difference, verdict


def _clock_kwargs(ctx: VerifyContext) -> list[str]:
    names = [k.name for k in ctx.variant.kwargs] if ctx.variant else []
    names += [name for name in template_kwargs(ctx.template) if name not in names]
    return names


def _at_both_clocks(
    ctx: VerifyContext, probe: Probe, clocks: tuple[dt.datetime, ...] = CLOCKS, **extra: Any
) -> list[Rendered]:
    """The probe rendered (uncached) at each of the two moments of `clocks` (CLOCKS: two days apart)."""
    outs = []
    for clock in clocks:
        with frozen_clock(clock):
            outs.append(
                ctx.renderer.render(
                    probe.message_list(),
                    probe.tool_list(),
                    cache=False,
                    add_generation_prompt=probe.add_generation_prompt,
                    **extra,
                )
            )
    return outs


def deterministic(ctx: VerifyContext) -> CheckResult:
    findings = []
    probes = [p for p in ctx.probes if p.id in ("plain", "tools-declared", "generation-prompt")]
    for probe in probes:
        outs = _at_both_clocks(ctx, probe)
        if not all(o.ok for o in outs) or outs[0].text == outs[1].text:
            continue
        a, b = outs[0].text or "", outs[1].text or ""
        pos = first_difference(a, b)
        pin = None
        for name in _clock_kwargs(ctx):
            pin_kwarg: dict[str, Any] = {name: "26 Jul 2024"}
            pinned = _at_both_clocks(ctx, probe, **pin_kwarg)
            if all(o.ok for o in pinned) and pinned[0].text == pinned[1].text:
                pin = name
                break
        # The time of day (not only the date): a served prompt changes within a conversation, an error
        same_day = (CLOCKS[0], CLOCKS[0] + dt.timedelta(hours=5, minutes=7, seconds=11))
        hourly = pin is None and len({o.text for o in _at_both_clocks(ctx, probe, same_day)}) > 1
        findings.append(
            Finding(
                probe.id,
                f"probe {probe.id}: the rendering reads the clock (message "
                f"{ctx.message_at(probe, pos)}, char {pos}): {around(a, pos, ctx.control_tokens)} on "
                f"{CLOCKS[0]:%Y-%m-%d} vs {around(b, pos, ctx.control_tokens)} on {CLOCKS[1]:%Y-%m-%d}"
                + (
                    f"; the template's {pin} kwarg pins it: pass {pin} in training and serving alike"
                    if pin
                    else "; no kwarg pins it: training bakes in the day it runs, serving sees another"
                    + ("; it reads the time of day: a served prompt changes within one conversation" if hourly else "")
                ),
                {"char_position": pos, "pinned_by": pin, "time_of_day": hourly},
                # Today's date written by design (a default system prompt): a risk the user may accept, removed
                # with one kwarg where the template has one. The time of day changes what is served from one turn to
                # the next: an error.
                severity=None if hourly else "warning",
                hint=f"pass {pin} to apply_chat_template in training and serving (e.g. "
                f"apply_chat_template(..., {pin}='26 Jul 2024'), or --kwarg {pin}='26 Jul 2024')"
                if pin
                else None,
            )
        )
        break
    hint = (
        "give the date a kwarg with a fixed default ({%- if not date_string is defined %}{%- set date_string = "
        "'26 Jul 2024' %}{%- endif %}) and pass it in training and serving, or use a variant whose date is fixed"
    )
    return verdict("deterministic", findings, "the rendering does not depend on the clock", hint)


def _reference_finding(ctx: VerifyContext, probe: Any, name: str, got: list[int], expected: list[int]) -> Finding:
    i = first_difference(got, expected)
    theirs = ctx.tokenizer.decode(expected[i : i + 6])
    ours = ctx.tokenizer.decode(got[i : i + 6])
    return Finding(
        probe.id,
        f"probe {probe.id}: token {i} differs from {name}: template {ours!r} vs {name} {theirs!r}",
        {"token_position": i, "template_ids": got[i : i + 6], "reference_ids": expected[i : i + 6]},
    )


def _mistral_finding(version: str, case_id: str, diff: dict[str, Any], severity: str) -> Finding:
    probe = case_id.partition("@")[0]
    where = f"message {diff['message']}, " if diff.get("message") is not None else ""
    return Finding(
        probe,
        f"{mr.describe_case(case_id)} ({where}token {diff['at']}) differs from mistral-common {version}: template "
        f"{mr.shown(diff['template'])} vs mistral-common {mr.shown(diff['reference'])} (after "
        f"{mr.shown(diff['before'])})",
        {
            "case": case_id,
            "reference_version": version,
            "token_position": diff["at"],
            "message_index": diff.get("message"),
            "template_tokens": diff["template"],
            "reference_tokens": diff["reference"],
            "template_ids": diff["template_ids"],
            "reference_ids": diff["reference_ids"],
        },
        severity=severity,
        hint=mr.fix_for(version, diff),
    )


def mistral_parity(ctx: VerifyContext) -> CheckResult:
    """A Mistral instruct template against mistral-common: which version it follows, decided by rendering, then
    token ids on every probe that version expresses."""
    missing = mr.available()
    if missing is not None:
        return CheckResult(
            "reference-parity",
            "skip",
            f"a Mistral instruct template, and its reference mistral-common cannot run here: {missing}",
            hint="pip install 'hf-chat-templates[reference]' (mistral-common, sentencepiece)",
        )
    compared, texts, outcomes = mistral_outcomes(ctx)
    if not mr.is_mistral_template(*texts.values()) or not compared:
        return CheckResult("reference-parity", "skip", "the template's renderings write no Mistral instruct markup")
    match = mr.choose(outcomes, compared)
    found = outcomes[match.version]
    if not match.matched:
        differing = [c for c in (*match.skeleton, *found) if "at" in found.get(c, {})]
        first = _mistral_finding(match.version, differing[0], found[differing[0]], "info") if differing else None
        return CheckResult(
            "reference-parity",
            "info",
            f"a Mistral instruct template that no mistral-common version ({', '.join(mr.VERSIONS)}) renders alike; "
            f"closest: {match.version}" + (f"; first difference: {first.text}" if first else ""),
            first.probe if first else None,
            {"closest_version": match.version, **(first.detail if first else {})},
            hint=first.hint if first else None,
        )
    provenance = ctx.variant.provenance if ctx.variant else None
    severity = "error" if mr.claims_official(ctx.template, provenance) else "warning"
    findings = [_mistral_finding(match.version, c, found[c], severity) for c in found if "at" in found[c]]
    equal = sum(1 for o in found.values() if "equal" in o)
    same = f" (as close: {', '.join(match.same)})" if match.same else ""
    result = verdict(
        "reference-parity",
        findings,
        f"token ids equal mistral-common {match.version}{same} on {equal} probes",
        f"follow mistral-common {match.version}'s format",
    )
    if findings:  # which reference, and that it was found by rendering, not declared
        message = f"follows mistral-common {match.version}{same} (found by rendering); {result.message}"
        result = dataclasses.replace(result, message=message)
    result.detail["reference_version"] = match.version
    if (default := mr.default_system_prompt(texts)) is not None:  # given to mistral-common where a probe has none
        result.detail["default_system_prompt"] = default if len(default) <= 80 else default[:80] + "…"
    unsupported = [f"{c} ({o['unsupported']})" for c, o in found.items() if "unsupported" in o]
    if unsupported:
        result.detail["not_expressible"] = unsupported
    if len(texts) > len(compared):
        result.detail["not_compared"] = sorted(set(texts) - {c.id for c in compared})
    return result


def reference_parity(ctx: VerifyContext) -> CheckResult:
    if uses_mistral_common(ctx):
        return mistral_parity(ctx)
    if ctx.variant is None or ctx.variant.family not in REFERENCES:
        family = ctx.variant.family if ctx.variant else "this template"
        return CheckResult("reference-parity", "skip", f"no official renderer for {family}")
    name = REFERENCES[ctx.variant.family][0]
    findings, compared, skipped = [], 0, []
    for probe in ctx.probes:
        if not ctx.rendered[probe.id].ok:
            continue
        try:
            expected = reference_ids(ctx, probe)
        except Unsupported as why:
            skipped.append(f"{probe.id} ({why})")
            continue
        if ctx.renderer.encode(ctx.tokenizer.decode(expected)) != expected:
            # The official renderer tokenizes segments (header, content, each call) separately, and here the
            # segments tokenize differently from the joined text: no string template can give these ids.
            skipped.append(f"{probe.id} (the reference tokenizes segments separately here)")
            continue
        with frozen_clock(CLOCKS[0]):
            got = ctx.renderer.token_ids(
                probe.message_list(), probe.tool_list(), add_generation_prompt=probe.add_generation_prompt
            )
        compared += 1
        if got != expected:
            findings.append(_reference_finding(ctx, probe, name, got, expected))
    if not compared:
        return CheckResult("reference-parity", "skip", f"no probe both the template and {name} can express")
    result = verdict(
        "reference-parity",
        findings,
        f"token ids equal {name} on {compared} probes",
        f"follow the official format that {name} renders",
    )
    if skipped:
        result.detail["not_expressible"] = skipped
    return result
