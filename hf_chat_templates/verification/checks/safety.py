"""`template-safety`: what a template reaches for, hides or says on a trigger, read from its syntax tree and text
(`template.safety`, nothing rendered), then the prose it adds to the model's view, found by rendering conversations
shaped to take its branches under a strict budget (`safety_prose`, HCT-S011: a warning for an instruction of a
backdoor's kind, else info for a human to judge). The probe suite is never rendered here, so `verify --only
template-safety` stays fast on a template that loops for minutes. A template the static rules distrust (an error or
a warning) is not rendered here at all: the result says the prose scan was skipped and why."""

from __future__ import annotations

import dataclasses
from typing import Any

from ...errors import TemplateError
from ...template.safety import SafetyFinding, scan_template
from ..context import VerifyContext
from ..results import CheckResult, Finding, verdict
from .safety_prose import cut_finding, prose_scan

PASSED = "no sandbox escape, file access, hidden text, look-alike token, trigger-gated text or unbounded work"
HINT = "see each finding's fix; accept a finding you have reviewed with verify --baseline FILE and a reason"


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
        scan = prose_scan(ctx)
        found += scan.findings + ([cut_finding(scan)] if scan.cut else [])
        note = scan.note
    return safety_result(found, {"prose_scan": note})
