"""Plain-text views of verification reports: one report, and the families × checks matrix."""

from __future__ import annotations

from typing import Iterable

from .verify import VerificationReport

MARKS = {"pass": "ok", "fail": "FAIL", "warn": "warn", "skip": "-"}


def format_report(report: VerificationReport) -> str:
    title = f"{report.family}/{report.variant}" if report.family else "template"
    lines = [f"verify {title} on {report.tokenizer}"]
    caps = ", ".join(f"{k}={v if v in ('yes', 'no', 'untested') else 'error'}" for k, v in report.capabilities.items())
    lines.append(f"  reads: {caps}")
    for check in report.checks:
        lines.append(f"  {MARKS[check.status]:<4} {check.id:<27} {check.message}")
        if check.status in ("fail", "warn") and check.hint:
            lines.append(f"       {'':<27} fix: {check.hint}")
    s = report.summary
    lines.append(f"{s['passed']} passed, {s['failed']} failed, {s['warned']} warned, {s['skipped']} skipped")
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
    for name, report in zip(names, reports):
        for check in report.checks:
            if check.status == "fail":
                lines.append(f"{name}: {check.id}: {check.message}")
    total_failed = sum(r.summary["failed"] for r in reports)
    total_passed = sum(r.summary["passed"] for r in reports)
    lines.append(f"{total_passed} passed, {total_failed} failed across {len(reports)} family variants")
    return "\n".join(lines)
