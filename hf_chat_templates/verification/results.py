"""Check results and verification reports: frozen values, with the helpers checks use to word their findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STATUSES = ("pass", "fail", "warn", "skip")
# What to do when no token is known to end a turn (a template no family declares, whose turns end with no token).
STOP_TOKEN_HINT = (
    "declare it: --stop-token TOKEN on the command line, stop_tokens=[...] from Python, or stop_tokens in a family.toml"
)


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict. On failure `message` names the probe, message, position and tokens; `hint` the fix."""

    id: str
    status: str
    message: str
    probe: str | None = None
    detail: dict[str, Any] = field(default_factory=dict, hash=False)
    hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "probe": self.probe,
            "message": self.message,
            "detail": self.detail,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class VerificationReport:
    source: str
    family: str | None
    variant: str | None
    tokenizer: str
    versions: dict[str, str]
    capabilities: dict[str, str]
    checks: tuple[CheckResult, ...]

    @property
    def summary(self) -> dict[str, int]:
        counts = {"passed": 0, "failed": 0, "warned": 0, "skipped": 0}
        names = {"pass": "passed", "fail": "failed", "warn": "warned", "skip": "skipped"}
        for check in self.checks:
            counts[names[check.status]] += 1
        return counts

    @property
    def ok(self) -> bool:
        return not any(c.status == "fail" for c in self.checks)

    def check(self, check_id: str) -> CheckResult:
        return next(c for c in self.checks if c.id == check_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "family": self.family,
            "variant": self.variant,
            "tokenizer": self.tokenizer,
            "versions": self.versions,
            "capabilities": self.capabilities,
            "checks": [c.to_dict() for c in self.checks],
            "summary": self.summary,
        }


def visible(text: str) -> str:
    """Whitespace made visible, on one line."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r").replace(" ", "·")


def around(text: str, pos: int, width: int = 24) -> str:
    """`text` near `pos`, whitespace visible, the position marked with ⟨here⟩."""
    start, end = max(0, pos - width), min(len(text), pos + width)
    return (
        ("…" if start else "")
        + visible(text[start:pos])
        + "⟨here⟩"
        + visible(text[pos:end])
        + ("…" if end < len(text) else "")
    )


def first_difference(a: str | list[Any], b: str | list[Any]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


@dataclass
class Finding:
    """One place where a check fails, before it becomes a CheckResult."""

    probe: str | None
    text: str
    detail: dict[str, Any] = field(default_factory=dict)


def verdict(check_id: str, findings: list[Finding], passed: str, hint: str, *, status: str = "fail") -> CheckResult:
    """Turn findings into a result: the first is the message, the first few go in the detail."""
    if not findings:
        return CheckResult(check_id, "pass", passed)
    first = findings[0]
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    detail = {
        **first.detail,
        "failures": len(findings),
        "examples": [{"probe": f.probe, "message": f.text, **f.detail} for f in findings[:5]],
    }
    return CheckResult(check_id, status, first.text + more, first.probe, detail, hint)
