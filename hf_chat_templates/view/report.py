"""Verification reports for people: one report and the families × checks matrix as text, and the `verify --html`
page (the matrix, then for every failure the tokens around it, both sides aligned where a check compares two)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from ..template.engines.registry import engine_profiles
from ..template.rendering import frozen_clock
from ..verification.checks import CHECK_ORDER
from ..verification.checks.engines import label_of, reference, render_in
from ..verification.context import CLOCKS, VerifyContext
from ..verification.mistral_reference import describe_case
from ..verification.references import REFERENCES, mistral_sides, reference_ids
from ..verification.results import CheckResult, VerificationReport
from .page import aligned_html, html_page, to_html
from .tokens import Aligned, Tok, TokenView, context_view, diff_views, ids_view, token_view

MARKS = {"pass": "ok", "fail": "FAIL", "warn": "warn", "info": "info", "skip": "-"}


def _check_lines(check: CheckResult, verbose: bool, all_flag: str | None) -> list[str]:
    """One check's lines: its mark, id and message, then its fix. With more than one finding, `verbose` lists
    every finding with its own fix; otherwise the message says how many more and `all_flag` how to see them."""
    pad = " " * 35
    message, more = check.message, len(check.findings) - 1
    suffix = f" (+{more} more)"
    if more > 0 and message.endswith(suffix):
        message = message[: -len(suffix)]
        if not verbose:
            message += f" (+{more} more; {all_flag} shows all)" if all_flag else suffix
    lines = [f"  {MARKS[check.status]:<4} {check.id:<27} {message}"]
    if check.status in ("fail", "warn") and check.hint:
        lines.append(f"{pad}fix ({check.cause}): {check.hint}")
    if verbose and more > 0:
        previous = (check.cause, check.hint)
        for number, finding in enumerate(check.findings[1:], start=2):
            lines.append(f"{pad}{number}/{more + 1} {finding.severity}: {finding.text}")
            fix = (finding.cause or check.cause, finding.hint)
            if finding.hint:
                lines.append(
                    f"{pad}    fix: the same as above" if fix == previous else f"{pad}    fix ({fix[0]}): {fix[1]}"
                )
            previous = fix
    return lines


def format_report(report: VerificationReport, *, verbose: bool = False, all_flag: str | None = "-v") -> str:
    """The report as text. `verbose`: every finding of a check with its own fix, not only the first; otherwise
    "(+N more; {all_flag} shows all)" (just "(+N more)" when `all_flag` is None)."""
    title = f"{report.family}/{report.variant}" if report.family else "template"
    lines = [f"verify {title} on {report.tokenizer}"]
    caps = ", ".join(f"{k}={v if v in ('yes', 'no', 'untested') else 'error'}" for k, v in report.capabilities.items())
    lines.append(f"  reads: {caps or 'not probed (the checks run render no probe)'}")
    if report.tokens:
        stops = " ".join(report.tokens["stop_tokens"]) or "none"
        lines.append(f"  stop tokens: {stops} ({report.tokens['tokens_from']})")
        lines += [f"  note: {n}" for n in report.tokens["token_notes"]]
        if report.tokens.get("tool_call_ids") == "mistral":
            lines.append("  note: probe tool-call ids have 9 letters and digits: the template tests for that length")
    for check in report.checks:
        lines += _check_lines(check, verbose, all_flag)
    s = report.summary
    lines.append(
        f"{s['passed']} passed, {s['failed']} failed, {s['warned']} warned, {s['info']} info, {s['skipped']} skipped"
    )
    return "\n".join(lines)


def format_matrix(reports: Iterable[VerificationReport]) -> str:
    reports = list(reports)
    if not reports:
        return "no families"
    check_ids = [c.id for c in reports[0].checks]
    names = [f"{r.family}/{r.variant}" for r in reports]
    width = max(len(n) for n in names) + 2
    header = " " * width + " ".join(f"{i + 1:>4}" for i in range(len(check_ids)))
    lines = [header]
    for name, report in zip(names, reports):
        marks = " ".join(f"{MARKS[c.status]:>4}" for c in report.checks)
        lines.append(f"{name:<{width}}{marks}")
    lines.append("")
    lines += [f"{i + 1:>4} {cid}" for i, cid in enumerate(check_ids)]
    lines.append("")
    # each failed and warned cell explained, by its first (most severe) finding
    for status, label in (("fail", ""), ("warn", "warning: ")):
        for name, report in zip(names, reports):
            lines += [f"{name}: {c.id}: {label}{c.message}" for c in report.checks if c.status == status]
    total = {key: sum(r.summary[key] for r in reports) for key in ("passed", "failed", "warned")}
    lines.append(
        f"{total['passed']} passed, {total['failed']} failed, {total['warned']} warned across {len(reports)} "
        "family variants"
    )
    return "\n".join(lines)


# ---- verify --html ----------------------------------------------------------------------------------------------

ALIGNED_CHECKS = ("reference-parity", "engine-parity", "completion-matches-content")


def anchor_for(report: VerificationReport, check_id: str) -> str:
    name = f"{report.family}-{report.variant}" if report.family else "template"
    return f"fail-{name}-{check_id}"


def _pieces_view(title: str, toks: list[tuple[int, str, bool]]) -> TokenView:
    tokens, pos = [], 0
    for i, (token_id, text, special) in enumerate(toks):
        tokens.append(Tok(i, token_id, text, pos, pos + len(text), special, False, None))
        pos += len(text)
    return TokenView(title, tokens, "".join(t.text for t in tokens))


def _mistral_sides(ctx: VerifyContext, check: CheckResult) -> Aligned:
    """A Mistral template's difference from mistral-common: both sides on mistral-common's vocabulary."""
    version, case = check.detail["reference_version"], check.detail["case"]
    ours, theirs = mistral_sides(ctx, case, version)
    title = f"template, {describe_case(case)} (on mistral-common {version}'s vocabulary)"
    return diff_views(_pieces_view(title, ours), _pieces_view(f"mistral-common {version}", theirs))


def _failure_sides(ctx: VerifyContext, check: CheckResult) -> Aligned | None:
    """For the checks that compare two renderings, both sides of the failing probe as token views."""
    if check.probe is None or check.probe not in ctx.rendered:
        return None
    if check.id == "reference-parity" and "case" in check.detail:
        return _mistral_sides(ctx, check)
    probe = ctx.probe(check.probe)
    ours = context_view(ctx, probe.id)
    ours.title = f"template, probe {probe.id}"
    if check.id in ("reference-parity", "engine-parity"):  # both compare against the frozen clock's rendering
        with frozen_clock(CLOCKS[0]):
            text = (
                ctx.renderer.render(
                    probe.message_list(),
                    probe.tool_list(),
                    cache=False,
                    add_generation_prompt=probe.add_generation_prompt,
                ).text
                or ""
            )
    if check.id == "reference-parity":
        name = REFERENCES[ctx.variant.family][0] if ctx.variant else "reference"
        ours = token_view(ctx.tokenizer, text, title=f"template, probe {probe.id}", control_tokens=ctx.control_tokens)
        other = ids_view(
            ctx.tokenizer,
            reference_ids(ctx, probe),
            title=f"{name}, probe {probe.id}",
            control_tokens=ctx.control_tokens,
        )
    elif check.id == "engine-parity":  # the first engine that differs, at its own clock
        engine = next((e for e in engine_profiles(ctx.engines) if e.name == check.detail.get("engine")), None)
        if engine is None:
            return None
        rendered = render_in(ctx, engine, [probe])[probe.id]
        if not rendered.ok:
            return None
        text = reference(ctx, engine, probe).text or ""
        ours = token_view(
            ctx.tokenizer, text, title=f"transformers, probe {probe.id}", control_tokens=ctx.control_tokens
        )
        other = token_view(
            ctx.tokenizer,
            rendered.text or "",
            title=f"{label_of(engine)}, probe {probe.id}",
            control_tokens=ctx.control_tokens,
        )
    else:  # completion-matches-content: the rendering vs generation prompt + content + stop token
        messages = probe.message_list()
        prompt = ctx.renderer.render(messages[:-1], probe.tool_list(), add_generation_prompt=True)
        if not prompt.ok or not ctx.stop_tokens:
            return None
        expected = (prompt.text or "") + str(messages[-1]["content"]) + ctx.stop_tokens[0]
        full = ctx.rendered[probe.id].text or ""
        other = token_view(
            ctx.tokenizer, expected, title=f"prompt + content + {ctx.stop_tokens[0]}", control_tokens=ctx.control_tokens
        )
        ours = token_view(
            ctx.tokenizer,
            full[: len(expected) + 40],
            title=f"template, probe {probe.id}",
            control_tokens=ctx.control_tokens,
        )
    return diff_views(ours, other)


def failure_html(ctx: VerifyContext, report: VerificationReport, check: CheckResult) -> str:
    anchor = anchor_for(report, check.id)
    parts = [f'<h3>{html.escape(check.id)}</h3><div class="msg">{html.escape(check.message)}</div>']
    if check.hint:
        parts.append(f'<div class="note">fix: {html.escape(check.hint)}</div>')
    aligned = None
    if check.id in ALIGNED_CHECKS:
        try:
            aligned = _failure_sides(ctx, check)
        except Exception as err:  # the report still shows the message when a side cannot be drawn
            parts.append(f'<div class="note">could not draw both sides: {html.escape(str(err))}</div>')
    if aligned is not None:
        parts.append(aligned_html(aligned, anchor=anchor))
    elif check.probe is not None and check.probe in ctx.rendered and ctx.rendered[check.probe].ok:
        view = context_view(ctx, check.probe)
        here = check.detail.get("token_position")
        if here is None and check.detail.get("char_position") is not None:
            here = view.token_at_char(int(check.detail["char_position"]))
        if here is None and check.detail.get("message_index") is not None:
            here = next((t.index for t in view.tokens if t.message == check.detail["message_index"]), None)
        here = 0 if here is None and view.tokens else here
        window = (max(0, here - 60), min(len(view.tokens), here + 60)) if here is not None else None
        parts.append(to_html(view, here=here, window=window, anchor=anchor))
    else:
        parts.append(f'<span id="{html.escape(anchor)}"></span>')
    return f'<section class="failure">{"".join(parts)}</section>'


def verification_html(
    results: Sequence[tuple[VerificationReport, VerifyContext]], *, title: str = "hf-chat-templates verify"
) -> str:
    """The report: a matrix of variants × checks (each failure links to its section), then each variant's
    failures with the tokens around them, and one probe's full view with its assistant mask."""
    names = [f"{r.family}/{r.variant}" if r.family else r.source for r, _ in results]
    checks = [c for c in CHECK_ORDER if any(c in {x.id for x in r.checks} for r, _ in results)]
    head = "".join(f'<th title="{html.escape(c)}">{i + 1}</th>' for i, c in enumerate(checks))
    rows = []
    for name, (report, _) in zip(names, results):
        cells = []
        for check_id in checks:
            found = next((c for c in report.checks if c.id == check_id), None)
            if found is None:
                cells.append("<td></td>")
                continue
            mark = {**MARKS, "skip": "–"}[found.status]
            inner = f'<a href="#{anchor_for(report, check_id)}">{mark}</a>' if found.status == "fail" else mark
            cells.append(f'<td class="{found.status}" title="{html.escape(found.message)}">{inner}</td>')
        rows.append(f'<tr><td class="name">{html.escape(name)}</td>{"".join(cells)}</tr>')
    key = " ".join(f"{i + 1} {html.escape(c)}" + ("," if i + 1 < len(checks) else "") for i, c in enumerate(checks))
    body = [
        f'<table class="matrix"><tr><th class="name">variant</th>{head}</tr>{"".join(rows)}</table>',
        f'<div class="note">{key}</div>',
    ]
    for name, (report, ctx) in zip(names, results):
        s = report.summary
        body.append(
            f'<h2 id="{html.escape(name)}">{html.escape(name)} — {s["passed"]} passed, {s["failed"]} failed, '
            f"{s['warned']} warned</h2>"
        )
        failures = [c for c in report.checks if c.status == "fail"]
        for check in failures:
            body.append(failure_html(ctx, report, check))
        sample = next(
            (p for p in ("multi-turn", "tool-call", "plain") if p in ctx.rendered and ctx.rendered[p].ok), None
        )
        if sample:
            body.append(
                f"<h3>probe {sample}: the tokens, with the assistant mask</h3>" + to_html(context_view(ctx, sample))
            )
    return html_page(title, "".join(body))
