"""A verification report as SARIF 2.1.0 (what code-scanning interfaces read), and a baseline of accepted
`template-safety` findings.

Every finding of `template-safety` is one SARIF result located at its line and column in the template file; every
other check that fails, warns or informs is one result located at the template file (its findings are about the
template's renderings, not one line of it). Rules carry their fix as help text.

A baseline is a JSON file of findings a reviewer has accepted, each with the reason:

    {"accepted": [
        {"rule": "HCT-S011", "fingerprint": "3f2a…", "reason": "the documented default system prompt"},
        {"rule": "HCT-S010", "line": 12, "column": 4, "reason": "the tool prompt of the model card"}
    ]}

An entry names a rule id and the finding's `fingerprint` (stable when lines move) or its `line` (and optionally
`column`, `template`: default or tool_use). `reason` is required and not empty: an accepted finding says why.
Accepted findings leave the check's verdict and are listed in its detail as `accepted`, with their reason.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..template.safety import RULES, SafetyFinding
from ..template.syntax import read_input
from .checks.safety import safety_result
from .results import CheckResult, VerificationReport

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
TOOL_URI = "https://pypi.org/project/hf-chat-templates/"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
_ENTRY_KEYS = frozenset({"rule", "fingerprint", "line", "column", "template", "reason"})


@dataclass(frozen=True)
class BaselineEntry:
    """One accepted finding: a rule, where (a fingerprint, or a line and optionally a column) and why."""

    rule: str
    reason: str
    fingerprint: str | None = None
    line: int | None = None
    column: int | None = None
    template: str = "default"

    def matches(self, finding: dict[str, Any]) -> bool:
        if finding.get("rule") != self.rule or finding.get("template", "default") != self.template:
            return False
        if self.fingerprint is not None:
            return finding.get("fingerprint") == self.fingerprint
        return finding.get("line") == self.line and self.column in (None, finding.get("column"))


def _bad(path: Path, where: str, what: str) -> UsageError:
    return UsageError(
        f"{path}: {where}: {what}",
        hint='each accepted finding is {"rule": "HCT-S…", "fingerprint": "…" (or "line": N), "reason": "why it is '
        'accepted"}; the fingerprints are in verify --json (template-safety, detail.findings)',
        path=path,
    )


def _entry(path: Path, i: int, raw: Any) -> BaselineEntry:
    where = f"accepted entry {i + 1}"
    if not isinstance(raw, dict):
        raise _bad(path, where, f"is {type(raw).__name__}, not an object")
    if unknown := sorted(set(raw) - _ENTRY_KEYS):
        raise _bad(path, where, f"unknown key(s) {', '.join(unknown)}")
    rule, reason = raw.get("rule"), raw.get("reason")
    if rule not in RULES:
        raise _bad(path, where, f"rule {rule!r} is not a template-safety rule ({', '.join(RULES)})")
    if not isinstance(reason, str) or not reason.strip():
        raise _bad(path, where, f"({rule}) has no reason: an accepted finding must say why it is accepted")
    fingerprint, line, column = raw.get("fingerprint"), raw.get("line"), raw.get("column")
    if fingerprint is None and line is None:
        raise _bad(path, where, f"({rule}) names neither a fingerprint nor a line")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise _bad(path, where, "fingerprint is not a string")
    for key, value in (("line", line), ("column", column)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise _bad(path, where, f"{key} {value!r} is not a line or column number (1 or more)")
    template = raw.get("template", "default")
    if template not in ("default", "tool_use"):
        raise _bad(path, where, f"template {template!r} is not default or tool_use")
    return BaselineEntry(rule, reason.strip(), fingerprint, line, column, template)


MAX_BASELINE_BYTES = 64 << 20


def read_baseline(path: str | Path) -> tuple[BaselineEntry, ...]:
    """The accepted findings of a baseline file, or UsageError naming the file, the entry and what is wrong."""
    path = Path(path)
    try:
        doc = json.loads(read_input(path, MAX_BASELINE_BYTES, "baseline file", UsageError).decode("utf-8"))
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: cannot read the baseline ({err})", hint="check the file", path=path) from None
    except json.JSONDecodeError as err:
        raise _bad(path, f"line {err.lineno}, column {err.colno}", f"not JSON ({err.msg})") from None
    entries = doc.get("accepted") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise _bad(path, "top level", 'expected an object with an "accepted" list')
    return tuple(_entry(path, i, raw) for i, raw in enumerate(entries))


def apply_baseline(report: VerificationReport, entries: tuple[BaselineEntry, ...]) -> VerificationReport:
    """The report with the accepted `template-safety` findings taken out of the verdict (listed as `accepted`
    with their reasons); entries that matched nothing are listed as `baseline_unmatched`."""
    checks = []
    for result in report.checks:
        if result.id != "template-safety" or "findings" not in result.detail:
            checks.append(result)
            continue
        kept, accepted = [], []
        for finding in result.detail["findings"]:
            entry = next((e for e in entries if e.matches(finding)), None)
            if entry is None:
                kept.append(finding)
            else:
                accepted.append({**finding, "reason": entry.reason})
        unmatched = [dataclasses.asdict(e) for e in entries if not any(e.matches(f) for f in result.detail["findings"])]
        extra = {k: v for k, v in result.detail.items() if k == "prose_scan"}
        extra |= {"accepted": accepted, "baseline_unmatched": unmatched}
        checks.append(safety_result([SafetyFinding.from_dict(f) for f in kept], extra))
    return dataclasses.replace(report, checks=tuple(checks))


def _region(finding: dict[str, Any]) -> dict[str, int]:
    return {"startLine": max(1, int(finding.get("line") or 1)), "startColumn": max(1, int(finding.get("column") or 1))}


CONFIG_NAME = "tokenizer_config.json"


def _location(artifact: str, region: dict[str, int] | None = None) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": artifact}}
    if region:
        physical["region"] = region
    return {"physicalLocation": physical}


def _check_results(result: CheckResult, artifact: str, rule_index: dict[str, int]) -> list[dict[str, Any]]:
    if result.id == "template-safety":
        # a region's line and column count in the template's text: no region when the artifact is the JSON file
        # whose key holds the template (its lines are not the template's)
        in_text = not artifact.endswith(CONFIG_NAME)
        return [
            {
                "ruleId": f["rule"],
                "ruleIndex": rule_index[f["rule"]],
                "level": LEVELS[f["severity"]],
                "message": {"text": f"{f['message']} Fix: {f['fix']}"},
                "locations": [_location(artifact, _region(f) if in_text else None)],
                "partialFingerprints": {"hctFingerprint/v1": f["fingerprint"]},
            }
            for f in result.detail.get("findings", [])
        ]
    if result.severity is None:
        return []
    text = result.message + (f" Fix: {result.hint}" if result.hint else "")
    return [
        {
            "ruleId": result.id,
            "ruleIndex": rule_index[result.id],
            "level": LEVELS[result.severity],
            "message": {"text": text},
            "locations": [_location(artifact)],
        }
    ]


def sarif_document(report: VerificationReport, artifact: str) -> dict[str, Any]:
    """The report as one SARIF 2.1.0 log; `artifact` is the template file's path or URI the results point at."""
    from .checks import CHECK_ORDER

    rules: list[dict[str, Any]] = [
        {
            "id": rule,
            "name": name,
            "shortDescription": {"text": f"template-safety: {name}"},
            "help": {"text": fix},
            "defaultConfiguration": {"level": LEVELS[severity]},
        }
        for rule, (name, severity, fix) in RULES.items()
    ]
    rules += [{"id": check, "name": check, "shortDescription": {"text": f"check {check}"}} for check in CHECK_ORDER]
    rule_index = {r["id"]: i for i, r in enumerate(rules)}
    results = [r for check in report.checks for r in _check_results(check, artifact, rule_index)]
    version = report.versions.get("hf-chat-templates", "unknown")
    driver = {"name": "hf-chat-templates", "version": version, "informationUri": TOOL_URI, "rules": rules}
    run = {
        "tool": {"driver": driver},
        "artifacts": [{"location": {"uri": artifact}}],
        "results": results,
        "properties": {"source": report.source, "family": report.family, "variant": report.variant},
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def write_sarif(path: str | Path, report: VerificationReport, artifact: str) -> None:
    """Write the SARIF log whole or not at all."""
    from ..outputs import write_file

    write_file(Path(path), json.dumps(sarif_document(report, artifact), indent=2, ensure_ascii=False) + "\n")


def template_artifact(ctx: Any, template_file: str | Path | None = None) -> str:
    """Where the verified template lives, as a SARIF artifact URI: the `--template` file, else the folder's
    `chat_template.jinja` (or `tokenizer_config.json`, whose key holds it), else the bundled family's file."""
    from ..template.syntax import transformers_text

    if template_file is not None:
        return _uri(Path(template_file))
    folder_path = getattr(ctx.folder, "path", None)
    if folder_path is not None:
        jinja = Path(folder_path) / "chat_template.jinja"
        if jinja.is_file() and transformers_text(jinja.read_text(encoding="utf-8")) == ctx.template:
            return _uri(jinja)
    if ctx.variant is not None and ctx.variant.template == ctx.template:
        return _uri(ctx.variant.template_path)
    return _uri(Path(folder_path) / CONFIG_NAME) if folder_path is not None else "chat_template.jinja"


def _uri(path: Path) -> str:
    return path.as_uri() if path.is_absolute() else path.as_posix()
