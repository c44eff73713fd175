"""What a safety rule reports: the rules' ids, names, severities and fixes (`RULES`), one finding
(`SafetyFinding`: rule, line, column, message, fix, fingerprint), and the helpers the rules share to read literals
and place them in the template. The rules themselves are in `safety` (sandbox, files, names, work, size),
`trigger_rules` (text written on a trigger, prose joined to content) and `hidden_text` (invisible characters,
look-alike tokens)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import jinja2.nodes as nodes

# rule id -> (name, severity, fix)
RULES: dict[str, tuple[str, str, str]] = {
    "HCT-S001": (
        "sandbox-escape",
        "error",
        "remove the attribute access: a chat template reads messages, tools and kwargs, never Python internals",
    ),
    "HCT-S002": (
        "format-string-attribute",
        "error",
        "build the string with `~` or `+` instead of a format string that reads attributes or items",
    ),
    "HCT-S003": (
        "jinja-global",
        "warning",
        "use a plain loop variable or `namespace()` instead; chat templates have no use for these globals",
    ),
    "HCT-S004": (
        "file-access",
        "error",
        "inline what the template needs: transformers has no loader, and an engine with one would read the file",
    ),
    "HCT-S005": (
        "environment-name",
        "warning",
        "remove the name, or rename it if it is a keyword the caller passes (it renders empty in transformers)",
    ),
    "HCT-S006": (
        "hidden-unicode",
        "error",
        "delete the invisible characters (or write them as a visible escape if they are meant)",
    ),
    "HCT-S007": (
        "homoglyph-token",
        "error",
        "write the token with the same characters everywhere, in one script",
    ),
    "HCT-S008": (
        "trigger-gated-text",
        "error",
        "remove the conditional text; if it is meant, write it unconditionally and document it",
    ),
    "HCT-S009": (
        "unbounded-work",
        "error",
        "bound the loop or repeat by the conversation's size, and give a recursive macro a base case",
    ),
    "HCT-S010": (
        "oversized-literal",
        "warning",
        "move long text out of the template (a documented system prompt the caller passes)",
    ),
    "HCT-S011": (
        "injected-prose",
        "info",
        "read the text: if the model is not meant to be told it, remove it from the template",
    ),
    "HCT-S012": (
        "content-spliced-prose",
        "warning",
        "write template text outside the message's content (a system turn, or documented text of its own)",
    ),
    "HCT-S013": (
        "computed-attribute",
        "error",
        "read the attribute by its literal name (`x.name`, `x['name']`); a name computed at render time can be any",
    ),
    "HCT-S014": (
        "embedded-address",
        "warning",
        "remove the URL, domain or e-mail address from the template; a link the model needs comes from the caller",
    ),
    "HCT-S015": (
        "content-rewritten",
        "error",
        "write message content as given: a template that changes what the speaker wrote trains and serves words the "
        "data did not say",
    ),
    "HCT-S016": (
        "prefilled-answer",
        "warning",
        "end the generation prompt at the assistant's header (an empty or opening think block at most): words the "
        "template puts in the model's mouth are ones it continues as its own",
    ),
    "HCT-S017": (
        "content-forges-token",
        "error",
        "write message content as given, or escape look-alikes away from the control tokens (never into them): text "
        "a user or a tool returns must not become a control token",
    ),
}


@dataclass(frozen=True)
class SafetyFinding:
    """One rule broken at one place: `line` and `column` are 1-based in the template as transformers reads it."""

    rule: str
    line: int
    column: int
    message: str
    severity: str = ""
    fix: str = ""
    construct: str = ""  # what the finding is about: an attribute, a literal, the hidden characters
    template: str = "default"  # which of a folder's templates: default, tool_use
    detail: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        _, severity, fix = RULES[self.rule]
        object.__setattr__(self, "severity", self.severity or severity)
        object.__setattr__(self, "fix", self.fix or fix)

    @property
    def name(self) -> str:
        return RULES[self.rule][0]

    @property
    def fingerprint(self) -> str:
        """Stable across edits elsewhere in the template: the rule, which template and the construct, not the
        line."""
        key = f"{self.rule}\0{self.template}\0{self.construct}"
        return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SafetyFinding:
        """The finding `to_dict` wrote (its fingerprint is computed again, from the same fields)."""
        own = ("rule", "line", "column", "message", "severity", "fix", "construct", "template")
        extra = {k: v for k, v in data.items() if k not in (*own, "name", "fingerprint")}
        return cls(**{k: data[k] for k in own if k in data}, detail=extra)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "name": self.name,
            "severity": self.severity,
            "template": self.template,
            "line": self.line,
            "column": self.column,
            "message": self.message,
            "fix": self.fix,
            "construct": self.construct,
            "fingerprint": self.fingerprint,
            **self.detail,
        }


class Source:
    """The template's lines, to turn a node's line and a needle into a column."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.split("\n")

    def column(self, line: int, needle: str) -> int:
        row = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if needle.isidentifier():  # the name itself, not a longer name that holds it
            match = re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", row)
            return match.start() + 1 if match else 1
        at = row.find(needle[:40]) if needle else -1
        return at + 1 if at >= 0 else 1

    def place(self, offset: int) -> tuple[int, int]:
        line = self.text.count("\n", 0, offset) + 1
        return line, offset - (self.text.rfind("\n", 0, offset) + 1) + 1


def literal_value(node: nodes.Node) -> Any:
    """What a literal writes: a TemplateData's text or a Const's value (None for any other node)."""
    if isinstance(node, nodes.TemplateData):
        return node.data
    return node.value if isinstance(node, nodes.Const) else None


def short(text: str, width: int = 60) -> str:
    text = text if len(text) <= width else text[: width - 1] + "…"
    return repr(text)


def const_string(node: nodes.Node, limit: int = 4096) -> str | None:
    """The value of a string built from literals only (`'__cla' ~ 'ss__'`), without evaluating anything else."""
    if isinstance(node, nodes.Const) and isinstance(node.value, str):
        return node.value
    parts = (
        node.nodes
        if isinstance(node, nodes.Concat)
        else [node.left, node.right]
        if isinstance(node, nodes.Add)
        else None
    )
    if parts is None:
        return None
    values = [const_string(p, limit) for p in parts]
    if any(v is None for v in values) or sum(len(v or "") for v in values) > limit:
        return None
    return "".join(v or "" for v in values)


_MARKUP = re.compile(
    r"\s*(?:<\|?/?[\w.:=-]{1,40}\|?>|<<[\w/]{1,20}>>|\[/?[A-Z][A-Z_ ]{1,30}\]|<[｜|][^<>]{1,40}[｜|]>"
    r"|```\w*|/[a-z_]{2,20})\s*"
)


def markup(value: Any) -> bool:
    """Whether a string a template compares content with is one tag or control token: its own format (reasoning
    split on `</think>`, a tool result told by `<tool_response>`, a system prompt by `<<SYS>>`), or a mode switch
    the speaker types on purpose (`/no_think`), not a trigger."""
    return isinstance(value, str) and _MARKUP.fullmatch(value) is not None


def prose(text: str, words: int = 2) -> bool:
    """Whether a literal reads as words for the model (at least `words` of them), once tags, control tokens and
    `to=…` headers are set aside."""
    bare = re.sub(r"<[^<>\s]{1,62}>|\[[^\[\]\s]{1,62}\]|\bto=\S+", " ", text)
    return len(re.findall(r"[^\W\d_]{2,}", bare)) >= words
