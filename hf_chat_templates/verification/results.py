"""Check results and verification reports: frozen values, with the helpers checks use to word their findings."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

# How bad a finding is (docs/checks.md): an error means the model is trained or served something the data did not
# say, or cannot be served at all; a warning is a risk or a loss the user may accept; info is a stated limit (a
# template's own raise_exception refusing input it does not support) or a fact for the record.
SEVERITIES = ("error", "warning", "info")
SEVERITY_OF = {"fail": "error", "warn": "warning", "info": "info"}
STATUS_OF = {severity: status for status, severity in SEVERITY_OF.items()}
# Where a finding's fix lies: the template, the conversion of input before rendering, the tokenizer's files, or an
# engine other than transformers.
CAUSES = ("template", "input normalization", "tokenizer config", "engine")
# What to do when no token is known to end a turn (a template no family declares, whose turns end with no token).
STOP_TOKEN_HINT = (
    "declare it: --stop-token TOKEN on the command line, TemplateChoice(stop_tokens=[...]) from Python, or stop_tokens "
    "in a family.toml"
)
# What a check that needs the stop says when none is known: `stop-token-registered` is the one error about it.
NO_STOP_TOKEN = "not decided: no stop token is known (stop-token-registered reports it, and how to declare one)"
UNRENDERED_HINT = "make a plain conversation render (the renders check names the probe and why it fails)"


def turn_end_hint(missing: str) -> str:
    """The fix for `VerifyContext.missing_turn_end()`'s note: a stop to declare, or a template that does not render
    (declaring a stop would not help that)."""
    return UNRENDERED_HINT if "does not render" in missing else STOP_TOKEN_HINT


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict. On failure `message` names the probe, message, position and tokens; `hint` the fix."""

    id: str
    status: str
    message: str
    probe: str | None = None
    detail: dict[str, Any] = field(default_factory=dict, hash=False)
    hint: str | None = None
    cause: str | None = None  # one of CAUSES, for a result that is not a pass or a skip
    # Every finding, most severe first, each with its severity, cause and fix filled in (`verdict`); the message is
    # the first one's, and `detail["examples"]` the first five. What `verify -v` prints.
    findings: tuple[Finding, ...] = field(default=(), compare=False, repr=False)

    @property
    def severity(self) -> str | None:
        """error (fail), warning (warn), info; None for a pass or a skip."""
        return SEVERITY_OF.get(self.status)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "severity": self.severity,
            "cause": self.cause,
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
    # control_tokens, stop_tokens, tokens_from (declared, a bundled family, the folder's generation stops,
    # inferred) and notes (what inference chose or could not decide)
    tokens: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> dict[str, int]:
        counts = {"passed": 0, "failed": 0, "warned": 0, "info": 0, "skipped": 0}
        names = {"pass": "passed", "fail": "failed", "warn": "warned", "info": "info", "skip": "skipped"}
        for check in self.checks:
            counts[names[check.status]] += 1
        return counts

    @property
    def ok(self) -> bool:
        """No error: nothing mistrains or misserves the model."""
        return self.passes("error")

    def passes(self, fail_on: str = "error") -> bool:
        """Whether no finding is as severe as `fail_on` (error, or warning: errors and warnings)."""
        if fail_on not in ("error", "warning"):
            raise ValueError(f"fail_on is 'error' or 'warning', not {fail_on!r}")
        worst = ("error",) if fail_on == "error" else ("error", "warning")
        return not any(c.severity in worst for c in self.checks)

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
            **self.tokens,
            "checks": [c.to_dict() for c in self.checks],
            "summary": self.summary,
        }


def visible(text: str) -> str:
    """Whitespace made visible, on one line."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r").replace(" ", "·")


def around(text: str, pos: int, tokens: Iterable[str] = (), width: int = 24) -> str:
    """`text` near `pos`, whitespace visible, the position marked with ⟨here⟩.

    The excerpt's edges never cut a control token in two (one of `tokens`, or any `<…>` or `[…]` run without
    whitespace: `<|im_end|>`, `<｜end▁of▁sentence｜>`, `[INST]`), nor a character of several code points (a
    surrogate pair, a combining mark, an emoji sequence): they move outwards to its end.

    >>> around("<|im_start|>user\\nHi<|im_end|>", 18, width=8)
    '<|im_start|>user\\\\nH⟨here⟩i<|im_end|>'
    """
    pos = min(max(pos, 0), len(text))
    start, end = excerpt_bounds(text, max(0, pos - width), min(len(text), pos + width), tokens)
    return (
        ("…" if start else "")
        + visible(text[start:pos])
        + "⟨here⟩"
        + visible(text[pos:end])
        + ("…" if end < len(text) else "")
    )


# A run that reads as one control token: `<|im_end|>`, `</s>`, `<｜Assistant｜>`, `[/INST]`, `<tool_call>`. No
# whitespace, quotes, braces or commas inside, so markup, JSON and prose are not taken for tokens.
_TOKEN_SHAPED = re.compile(r"<[^\s<>\[\]{}\"',]{1,62}>|\[[^\s<>\[\]{}\"',]{1,62}\]")
_ZWJ = "\u200d"


def _is_regional(char: str) -> bool:
    return "\U0001f1e6" <= char <= "\U0001f1ff"


def _joins(text: str, i: int) -> bool:
    """Whether text[i - 1] and text[i] belong to one user-perceived character, so no edge may fall between."""
    before, char = text[i - 1], text[i]
    if before == "\r" and char == "\n":
        return True
    if "\ud800" <= before <= "\udbff" and "\udc00" <= char <= "\udfff":  # a surrogate pair kept as two
        return True
    if before == _ZWJ or unicodedata.category(char) in ("Mn", "Mc", "Me") or char == _ZWJ:
        return True
    if "\ufe00" <= char <= "\ufe0f" or "\U0001f3fb" <= char <= "\U0001f3ff" or "\U000e0020" <= char <= "\U000e007f":
        return True  # variation selectors, skin tones, emoji tag sequences
    if _is_regional(before) and _is_regional(char):  # flags: pairs of regional indicators
        run = 0
        while i - run - 1 >= 0 and _is_regional(text[i - run - 1]):
            run += 1
        return run % 2 == 1
    return False


def _units(text: str, lo: int, hi: int, tokens: tuple[str, ...]) -> list[tuple[int, int]]:
    """Where control tokens (given or token-shaped) lie across text[lo:hi]'s edges: (start, end) pairs."""
    reach = max((len(t) for t in tokens), default=0) + 64
    a, b = max(0, lo - reach), min(len(text), hi + reach)
    found = [(m.start(), m.end()) for m in _TOKEN_SHAPED.finditer(text, a, b)]
    for token in dict.fromkeys(t for t in tokens if t):
        at = text.find(token, a, b)
        while at >= 0:
            found.append((at, at + len(token)))
            at = text.find(token, at + 1, b)
    return found


def excerpt_bounds(text: str, start: int, end: int, tokens: Iterable[str] = ()) -> tuple[int, int]:
    """text[start:end] widened so that neither edge splits a control token or a user-perceived character."""
    tokens = tuple(tokens)
    units = _units(text, start, end, tokens)
    while True:
        moved = (start, end)
        start = min([start, *(s for s, e in units if s < start < e)])
        end = max([end, *(e for s, e in units if s < end < e)])
        while 0 < start < len(text) and _joins(text, start):
            start -= 1
        while 0 < end < len(text) and _joins(text, end):
            end += 1
        if (start, end) == moved:
            return start, end


def first_difference(a: str | list[Any], b: str | list[Any]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


@dataclass
class Finding:
    """One place where a check fails, before it becomes a CheckResult. `severity` (error, warning, info) defaults
    to the check's; `cause` (one of CAUSES) to the check's too; `hint` replaces the check's fix for this finding."""

    probe: str | None
    text: str
    detail: dict[str, Any] = field(default_factory=dict)
    severity: str | None = None
    cause: str | None = None
    hint: str | None = None


def verdict(
    check_id: str,
    findings: list[Finding],
    passed: str,
    hint: str,
    *,
    status: str = "fail",
    cause: str | None = None,
) -> CheckResult:
    """Turn findings into a result: the most severe first is the message, the first few go in the detail. The
    result's status is the most severe finding's (`status` is the severity of findings that do not say)."""
    if not findings:
        return CheckResult(check_id, "pass", passed)
    default = SEVERITY_OF[status]
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    ordered = sorted(findings, key=lambda f: rank[f.severity or default])
    first = ordered[0]
    severity = first.severity or default
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    resolved = tuple(
        replace(f, severity=f.severity or default, cause=f.cause or cause, hint=f.hint or hint) for f in ordered
    )
    detail = {
        **first.detail,
        "failures": len(findings),
        "examples": [
            {"probe": f.probe, "message": f.text, "severity": f.severity or default, **f.detail} for f in ordered[:5]
        ],
    }
    return CheckResult(
        check_id,
        STATUS_OF[severity],
        first.text + more,
        first.probe,
        detail,
        first.hint or hint,
        first.cause or cause,
        resolved,
    )
