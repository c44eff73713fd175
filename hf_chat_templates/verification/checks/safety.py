"""`template-safety`: what a template reaches for, hides or says on a trigger, read from its syntax tree and text
(`template.safety`, nothing rendered), then the prose it adds to the model's view, found by rendering differences
(HCT-S011, info for a human to judge; text holding a placeholder such as `{system_message}` is `structure`'s
warning instead). A template the static rules distrust (an error or a warning) is not rendered here at all: the
result says the prose scan was skipped and why."""

from __future__ import annotations

import dataclasses
from typing import Any

from ...conversations.probes import Probe
from ...errors import TemplateError
from ...template.placeholders import placeholders_written
from ...template.safety import SafetyFinding, prose, scan_template
from ..context import VerifyContext
from ..results import CheckResult, Finding, verdict

PASSED = "no sandbox escape, file access, hidden text, look-alike token, trigger-gated text or unbounded work"
HINT = "see each finding's fix; accept a finding you have reviewed with verify --baseline FILE and a reason"
# Probes whose every string is plain content: what is left of their rendering once those strings, the control
# tokens and the role names are taken out is what the template itself adds.
_ROLES = ("system", "user", "assistant", "tool", "model", "developer", "ipython")


def static_findings(ctx: VerifyContext) -> list[SafetyFinding]:
    """The static findings of the template and of the folder's `tool_use` template; a template that does not parse
    is one error (HCT-S000 is not a rule: `renders` names the syntax error)."""
    found: list[SafetyFinding] = []
    for name, text in (("default", ctx.template), ("tool_use", ctx.tool_template)):
        if text is None:
            continue
        try:
            found += scan_template(text, name=name)
        except TemplateError:
            continue  # `renders` reports the syntax error with its line
    return found


def _plain(probe: Probe) -> bool:
    return probe.tools is None and all(
        isinstance(m.get("content"), str) and set(m) <= {"role", "content"} for m in probe.messages
    )


def _strings(probe: Probe, control_tokens: tuple[str, ...]) -> set[str]:
    """What the conversation itself brings: each content, trimmed and line by line (templates trim; a short line
    such as `end` is left out, as it would cut words of the template's own text), and the control tokens."""
    found = set(t for t in control_tokens if t)
    for m in probe.messages:
        content = m["content"]
        rows = [row.strip() for row in content.split("\n")]
        found |= {content, content.strip(), *(row for row in rows if len(row) >= 12)} - {""}
    return found


def _template_place(template: str, text: str) -> tuple[int, int] | None:
    """Where the template writes `text` as a literal (its first line), 1-based, or None when it builds it."""
    first = next((row.strip() for row in text.split("\n") if row.strip()), "")[:40]
    at = template.find(first) if first else -1
    if at < 0:
        return None
    return template.count("\n", 0, at) + 1, at - (template.rfind("\n", 0, at) + 1) + 1


def added_prose(ctx: VerifyContext, limit: int = 12) -> list[SafetyFinding]:
    """HCT-S011: text in a probe's rendering that the conversation did not contain, once per distinct text."""
    seen: dict[str, SafetyFinding] = {}
    for probe in [p for p in ctx.probes if _plain(p)][:limit]:
        rendered = ctx.render(probe)
        if not rendered.ok:
            continue
        rest = rendered.text or ""
        for s in sorted(_strings(probe, ctx.control_tokens), key=len, reverse=True):
            rest = rest.replace(s, "\0")
        for piece in rest.split("\0"):
            words = "\n".join(r for r in piece.split("\n") if r.strip().lower() not in _ROLES).strip()
            if any(words in text for text in seen) or not prose(words, words=3):
                continue
            if any(placeholders_written(ctx.template, words)):
                continue  # `structure` reports the placeholder written as text, as a warning, with this text
            line, column = _template_place(ctx.template, words) or (1, 1)
            seen[words] = SafetyFinding(
                "HCT-S011",
                line,
                column,
                f"probe {probe.id}: the template adds {_quote(words)} to what the model reads; the conversation "
                "did not contain it (read it: documented system text, or an instruction the model should not get?)",
                construct=words[:200],
                detail={"probe": probe.id, "text": words[:2000]},
            )
    return list(seen.values())


def _quote(text: str, width: int = 100) -> str:
    return repr(text if len(text) <= width else text[: width - 1] + "…")


def as_finding(f: SafetyFinding) -> Finding:
    where = f"{f.template} template, " if f.template != "default" else ""
    return Finding(
        f.detail.get("probe"),
        f"{f.rule} {f.name} ({where}line {f.line}, column {f.column}): {f.message}",
        {"rule": f.rule, "line": f.line, "column": f.column, "fingerprint": f.fingerprint},
        severity=f.severity,
        hint=f.fix,
    )


def safety_result(found: list[SafetyFinding], extra: dict[str, Any]) -> CheckResult:
    """The check's result from its findings (all of them in `detail["findings"]`, for SARIF and a baseline)."""
    result = verdict("template-safety", [as_finding(f) for f in found], PASSED, HINT, cause="template")
    detail = {**result.detail, **extra, "findings": [f.to_dict() for f in found]}
    return dataclasses.replace(result, detail=detail)


def template_safety(ctx: VerifyContext) -> CheckResult:
    found = static_findings(ctx)
    distrusted = [f for f in found if f.severity in ("error", "warning")]
    if distrusted:
        note = (
            f"prose scan skipped: the static rules found {len(distrusted)} error(s) or warning(s), so nothing was "
            "rendered"
        )
    else:
        found += added_prose(ctx)
        note = "prose scan: plain probes rendered, their own text and control tokens taken out"
    return safety_result(found, {"prose_scan": note})
