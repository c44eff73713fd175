"""HCT-S016: prose the template writes inside the assistant's turn at the generation prompt, after its header: a
prefilled answer ("Sure, here is my configuration:") the model continues as if it had said it. The legitimate
shapes are set aside: role headers (`<|im_start|>assistant`, `GPT4 Correct Assistant:`, `### Response:`), an empty
or opening think block, a single tag or control token. Read from the syntax tree; nothing is rendered."""

from __future__ import annotations

import re
from collections.abc import Iterator

import jinja2.nodes as nodes

from .analysis import STANDARD_VARIABLES
from .folding import Folding, undeclared_names
from .safety_findings import SafetyFinding, Source, literal_value, prose, short

Piece = tuple[nodes.Node, str, bool]
_MARKS = re.compile(
    r"<\|[^<>|]{1,48}\|>|<[｜|][^<>]{1,48}[｜|]>|<[^<>\s]{1,62}>|\[/?[A-Za-z_]{1,30}\]|\[/?[A-Z][A-Z _]{1,40}\]"
)
_REASONING = re.compile(r"\b(?:reasoning|thinking|thoughts?|analysis)\b", re.I)
_ROLES = re.compile(r"assistant|model|bot|response|answer|gpt|chatbot|ai|system|output|agent|claude|llama", re.I)


def _asks_generation(test: nodes.Node) -> bool:
    """Whether a condition holds when the caller asks for the generation prompt (not `not add_generation_prompt`)."""
    negated = {id(n) for neg in test.find_all(nodes.Not) for n in neg.find_all(nodes.Name)}
    names = [n for n in [test, *test.find_all(nodes.Name)] if isinstance(n, nodes.Name)]
    return any(n.name == "add_generation_prompt" and id(n) not in negated for n in names)


def _header(row: str) -> bool:
    """A role header line: a role word and at most three words (`GPT4 Correct Assistant:`), or `Name:`."""
    words = re.findall(r"[^\W\d_]{2,}", row)
    named = bool(_ROLES.search(row)) or row.rstrip().endswith(":")
    if words and len(words) <= 6 and row.rstrip().endswith(":") and _REASONING.search(row):
        return True  # a reasoning header, as `<think>` opens one: Apriel's "Here are my reasoning steps:"
    return not words or (len(words) <= 3 and named and len(row.strip()) <= 40)


def after_header(text: str) -> str:
    """What `text` says once control tokens, tags and role-header lines are set aside."""
    rows = _MARKS.sub("\n", text).split("\n")
    return "\n".join(r.strip() for r in rows if not _header(r)).strip()


def _written(body: list[nodes.Node], folding: Folding, keywords: set[str], asked: bool = False) -> Iterator[Piece]:
    """What a branch writes, in order: (expression, its text, whether a keyword the caller passes gates it)."""
    for stmt in body:
        if isinstance(stmt, nodes.Output):
            for expr in stmt.nodes:
                literal = isinstance(expr, (nodes.Const, nodes.TemplateData))
                value = literal_value(expr) if literal else folding.value(expr)
                if isinstance(value, str):
                    yield expr, value, asked
        elif isinstance(stmt, nodes.If):
            gated = asked or any(n.name in keywords for n in stmt.test.find_all(nodes.Name))
            for branch in (stmt.body, *(e.body for e in stmt.elif_), stmt.else_):
                yield from _written(branch, folding, keywords, gated)
        elif not isinstance(stmt, (nodes.Macro, nodes.Assign, nodes.AssignBlock)):
            for out in stmt.find_all(nodes.Output):
                yield from _written([out], folding, keywords, asked)


def prefills(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S016: a warning; info when only a keyword the caller passes asks for the text (Seed-OSS writes its
    thinking budget into the think block when `thinking_budget == 0`): the caller asked for it by name."""
    defaulted = {
        t.node.name for t in ast.find_all(nodes.Test) if t.name == "defined" and isinstance(t.node, nodes.Name)
    }
    keywords = (undeclared_names(ast) | defaulted) - STANDARD_VARIABLES  # `{% if x is not defined %}{% set x = … %}`
    for node in ast.find_all(nodes.If):
        if not _asks_generation(node.test):
            continue
        pieces = list(_written(node.body, folding, keywords))
        said = after_header("".join(v for _, v, _ in pieces))
        if not prose(said, words=3):
            continue
        unasked = prose(after_header("".join(v for _, v, asked in pieces if not asked)), words=3)
        first = next(row for row in said.split("\n") if row.strip())
        expr = next((e for e, v, _ in pieces if first[:20] in v), node)
        rows = str(literal_value(expr) or "").split("\n")
        line = expr.lineno + next((i for i, row in enumerate(rows) if first[:20] in row), 0)
        yield SafetyFinding(
            "HCT-S016",
            line,
            src.column(line, first[:30]),
            f"the template writes {short(first)} inside the assistant's turn at the generation prompt (condition at "
            f"line {node.lineno}): the model continues an answer it did not give, as if it had said it"
            + ("" if unasked else " (only when a keyword the caller passes asks for it)"),
            severity="warning" if unasked else "info",
            construct=said[:120],
        )
