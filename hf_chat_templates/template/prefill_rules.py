"""HCT-S016: prose the template writes inside the assistant's turn at the generation prompt, after its header: a
prefilled answer ("Sure, here is my configuration:") the model continues as if it had said it. The legitimate
shapes are set aside: role headers (`<|im_start|>assistant`, `GPT4 Correct Assistant:`, `### Response:`), an empty
or opening think block, a single tag or control token. A prefill on a content or clock trigger is an error wherever
the branch is: inside the generation prompt's, joined to it (`add_generation_prompt and 'x' in content`), after it at
the template's end, or in a macro it calls. Read from the syntax tree; nothing is rendered."""

from __future__ import annotations

import re
from collections.abc import Iterator

import jinja2.nodes as nodes

from .analysis import STANDARD_VARIABLES
from .flag_rules import conditions_of
from .folding import Folding
from .safety_findings import SafetyFinding, Source, literal_value, prose, short
from .trigger_rules import _trigger, given_of, taint_of

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


def _opens_turn(full: str, said: str) -> bool:
    """Whether text a branch writes opens the assistant's turn (a role header) before its prose."""
    before = full[: full.find(said.split("\n")[0][:20])] if said else full
    return bool(re.search(r"assistant|\bmodel\b|\bbot\b|### Response|GPT4", before, re.I))


def _in_turn(ast: nodes.Template) -> list[nodes.If]:
    """The branches that write inside the assistant's turn the generation prompt opened without asking for it: a
    branch after the generation prompt's at the template's end, and one in a macro called there or inside it."""
    opened = [i for i, stmt in enumerate(ast.body) if isinstance(stmt, nodes.If) and _asks_generation(stmt.test)]
    there: list[nodes.Node] = [i for i in ast.find_all(nodes.If) if _asks_generation(i.test)]
    there += [stmt for stmt in ast.body[opened[0] :] if not isinstance(stmt, nodes.Macro)] if opened else []
    there += [b for stmt in there for b in stmt.find_all(nodes.If)]
    branches = [stmt for stmt in there if isinstance(stmt, nodes.If)]
    called = {c.node.name for b in there for c in b.find_all(nodes.Call) if isinstance(c.node, nodes.Name)}
    macros = [m for m in ast.find_all(nodes.Macro) if m.name in called]
    return branches + [b for m in macros for b in m.find_all(nodes.If)]


# What ends the user's turn and opens the assistant's: text written after it at the prompt's end is the answer's start
_OPENS_ANSWER = re.compile(
    r"(?:\[/INST\]|<\|im_start\|>assistant|<\|assistant\|>|<start_of_turn>model|assistant<\|end_header_id\|>"
    r"|<\|Assistant\|>|<｜Assistant｜>|Assistant:)\s*$"
)


def _closes_user_turn(stmt: nodes.Node, folding: Folding) -> bool:
    """Whether a statement writes, at its end or at the end of one of its outputs, the mark that opens the assistant's
    turn (`[/INST]`, `<|im_start|>assistant`)."""
    for out in [stmt] if isinstance(stmt, nodes.Output) else list(stmt.find_all(nodes.Output)):
        for expr in out.nodes:
            value = literal_value(expr) if isinstance(expr, (nodes.Const, nodes.TemplateData)) else None
            parts = [expr, *expr.find_all(nodes.Const)] if value is None else []
            texts = [value] if value is not None else [literal_value(p) for p in parts if isinstance(p, nodes.Const)]
            if any(isinstance(t, str) and _OPENS_ANSWER.search(t) for t in texts):
                return True
    return False


def _after_close(ast: nodes.Template, folding: Folding) -> list[nodes.If]:
    """The branches written right after the mark that opens the assistant's turn: a later `{% if %}` beside an output
    that ends with `[/INST]` (Mistral's prompt ends there: no generation prompt), or after a loop that writes one in
    a template with no `add_generation_prompt`."""
    prompts = "add_generation_prompt" in {n.name for n in ast.find_all(nodes.Name)}
    found: list[nodes.If] = []
    bodies = [ast.body, *(b for n in ast.find_all((nodes.If, nodes.For, nodes.Macro)) for b in _bodies(n))]
    for body in bodies:
        opened = False
        for stmt in body:
            if opened and isinstance(stmt, nodes.If):
                found += [stmt, *stmt.find_all(nodes.If)]
            direct = isinstance(stmt, nodes.Output) or (isinstance(stmt, nodes.For) and not prompts)
            opened = (opened and not isinstance(stmt, nodes.Output)) or (direct and _closes_user_turn(stmt, folding))
    return found


def _bodies(node: nodes.Node) -> list[list[nodes.Node]]:
    return [getattr(node, "body", []), getattr(node, "else_", [])]


def _inner_trigger(
    node: nodes.If, folding: Folding, keywords: set[str], tainted: dict[str, str]
) -> tuple[str, str] | None:
    """A content or clock trigger on a branch inside the generation prompt's that writes prose there."""
    for inner in (i for stmt in node.body for i in [stmt, *stmt.find_all(nodes.If)] if isinstance(i, nodes.If)):
        found = _trigger(inner.test, tainted)
        written = "".join(v for _, v, _ in _written(inner.body, folding, keywords))
        if found and prose(after_header(written), words=3):
            return found
    return None


def _said(trigger: tuple[str, str]) -> str:
    kind, what = trigger
    said = {"content": f"message content {what}", "clock": f"the clock is compared with {what}"}
    return said.get(kind, what)


def prefills(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S016: a warning; info when only a keyword the caller passes asks for the text (Seed-OSS writes its
    thinking budget into the think block when `thinking_budget == 0`): the caller asked for it by name. An error
    when a content or clock trigger gates it: a branch on what the last message says that opens the assistant's
    turn with prose, or a triggered branch inside the generation prompt's."""
    defaulted = {
        t.node.name for t in ast.find_all(nodes.Test) if t.name == "defined" and isinstance(t.node, nodes.Name)
    }
    keywords = (given_of(folding) | defaulted) - STANDARD_VARIABLES  # `{% if x is not defined %}{% set x = … %}`
    tainted = taint_of(folding)
    after = _in_turn(ast) + _after_close(ast, folding)
    cond = conditions_of(folding)
    for node in ast.find_all(nodes.If):
        trigger = _trigger(node.test, tainted)
        gate = cond.gate(node.test) if trigger is None else None
        if gate is not None and gate.kind == "content":  # a flag set from content, words tested one by one
            trigger = ("flag", gate.said)
        asked_for = _asks_generation(node.test)
        if not asked_for and trigger is None:
            continue
        pieces = list(_written(node.body, folding, keywords))
        full = "".join(v for _, v, _ in pieces)
        said = after_header(full)
        if not prose(said, words=3) or not (asked_for or _opens_turn(full, said) or node in after):
            continue
        unasked = prose(after_header("".join(v for _, v, asked in pieces if not asked)), words=3)
        trigger = trigger or _inner_trigger(node, folding, keywords, tainted)
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
            + (f", and only when {_said(trigger)}" if trigger else "")
            + ("" if unasked or trigger else " (only when a keyword the caller passes asks for it)"),
            severity="error" if trigger else "warning" if unasked else "info",
            construct=said[:120],
        )
