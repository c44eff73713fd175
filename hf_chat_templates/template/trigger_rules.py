"""HCT-S008 (literal text written only when message content holds a string, or on the clock) and HCT-S012 (prose
appended to message content in one expression): instructions a template gives the model on a trigger, or in the
speaker's name. Read from the syntax tree; nothing is rendered."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jinja2.nodes as nodes

from .analysis import STANDARD_VARIABLES
from .folding import Folding, undeclared_names, variable_key
from .names import read_before_set
from .safety_findings import SafetyFinding, Source, const_string, literal_value, markup, prose, short
from .syntax import parse_environment

CONTENT_KEYS = frozenset({"content", "text"})
DATA_NAMES = frozenset({"messages", "tools", "documents", "conversation", "loop_messages"})
CLOCK_CALLS = frozenset({"strftime_now", "now", "today", "utcnow"})
_TYPE_TESTS = frozenset({"defined", "undefined", "none", "string", "number", "mapping", "sequence", "iterable"})
STRING_TESTS = frozenset({"startswith", "endswith", "find", "rfind", "index", "count", "__contains__"})


def _reads(node: nodes.Node, tainted: dict[str, str]) -> str | None:
    """'content' when `node` reads message content, 'clock' when it reads the clock, else None."""
    for sub in (node, *node.find_all((nodes.Getattr, nodes.Getitem, nodes.Call, nodes.Name))):
        if isinstance(sub, nodes.Call):
            callee = sub.node
            name = callee.name if isinstance(callee, nodes.Name) else getattr(callee, "attr", None)
            if name in CLOCK_CALLS:
                return "clock"
        elif (isinstance(sub, nodes.Getattr) and sub.attr in CONTENT_KEYS) or (
            isinstance(sub, nodes.Getitem) and const_string(sub.arg) in CONTENT_KEYS
        ):
            return "content"
        elif isinstance(sub, nodes.Name) and sub.name in tainted and sub.ctx == "load":
            return tainted[sub.name]
        elif isinstance(sub, nodes.Getattr) and isinstance(sub.node, nodes.Name):
            kind = tainted.get(f"{sub.node.name}.{sub.attr}")  # `ns.text`, set from content
            if kind:
                return kind
    return None


def _mapping(node: nodes.Node) -> bool:
    """`x | dictsort`, `x | items`, `x.items()`: what a mapping holds, never message text."""
    if isinstance(node, nodes.Filter):
        return node.name in ("dictsort", "items")
    method = node.node if isinstance(node, nodes.Call) else None
    return isinstance(method, nodes.Getattr) and method.attr in ("items", "keys", "values")


def _taint(ast: nodes.Template) -> dict[str, str]:
    """Variables set from message content or the clock (`{% set c = message.content %}`, `{% set ns.text = … %}`,
    a macro's parameter given content), to a fixed point."""
    tainted: dict[str, str] = {"date_string": "clock"}  # the date a caller passes is the clock by another name
    macros = {m.name: m for m in ast.find_all(nodes.Macro)}
    calls = [
        (c, c.node.name) for c in ast.find_all(nodes.Call) if isinstance(c.node, nodes.Name) and c.node.name in macros
    ]
    for _ in range(4):
        before = dict(tainted)
        node: Any
        for node in ast.find_all((nodes.Assign, nodes.For)):
            source = node.node if isinstance(node, nodes.Assign) else node.iter
            if _mapping(source):
                continue  # the keys and values of a mapping (tool arguments, a response): message text is none
            kind = _reads(source, tainted)
            if kind:
                for name in node.target.find_all(nodes.Name) if not isinstance(node.target, nodes.Name) else ():
                    tainted[name.name] = kind
                if isinstance(node.target, nodes.Name):
                    tainted[node.target.name] = kind
                elif isinstance(node.target, nodes.NSRef):
                    tainted[f"{node.target.name}.{node.target.attr}"] = kind
        for call, name in calls:
            params = macros[name].args
            given = [*zip(params, call.args), *((p, k.value) for p in params for k in call.kwargs if k.key == p.name)]
            for param, arg in given:
                kind = _reads(arg, tainted)
                if kind:
                    tainted[param.name] = kind
        if tainted == before:
            break
    return tainted


def taint_of(folding: Folding) -> dict[str, str]:
    """`_taint` of the template `folding` reads, computed once per scan (every rule reads the same)."""
    if "taint" not in folding.cache:
        folding.cache["taint"] = _taint(folding.ast)
    return folding.cache["taint"]


def given_of(folding: Folding) -> set[str]:
    """`undeclared_names` of the template: the keywords and globals it reads, computed once per scan."""
    if "given" not in folding.cache:
        folding.cache["given"] = undeclared_names(folding.ast)
    return folding.cache["given"]


def keywords_of(folding: Folding) -> set[str]:
    """The names a caller passes (`chat_template_kwargs`): read and never set, or read before the template sets a
    default (`thinking_budget`); not the conversation, the tokenizer's variables or Jinja's globals. Once per scan."""
    if "keywords" not in folding.cache:
        read = given_of(folding) | read_before_set(folding.ast)
        folding.cache["keywords"] = read - DATA_NAMES - STANDARD_VARIABLES - set(parse_environment().globals)
    return folding.cache["keywords"]


def assigned_of(folding: Folding) -> dict[str, list[nodes.Node]]:
    """Each variable (`x`, `ns.attr`) and the values its `{% set %}`s give it (a `namespace(attr=…)`'s first one
    too), computed once per scan."""
    if "assigned" not in folding.cache:
        found: dict[str, list[nodes.Node]] = {}
        for a in folding.ast.find_all(nodes.Assign):
            if key := variable_key(a.target):
                found.setdefault(key, []).append(a.node)
            call = a.node
            if isinstance(call, nodes.Call) and getattr(call.node, "name", None) == "namespace" and key:
                for kw in call.kwargs:
                    found.setdefault(f"{key}.{kw.key}", []).append(kw.value)
        folding.cache["assigned"] = found
    return folding.cache["assigned"]


def data_of(folding: Folding) -> frozenset[str]:
    """The variables (`x`, `ns.attr`, a macro's parameter) set from the conversation (`messages`, `tools`,
    `documents`) or from another of them, to a fixed point; computed once per scan. A keyword the caller passes is
    not data: the caller chose it."""
    if "data" not in folding.cache:
        ast, found = folding.ast, set(DATA_NAMES)
        macros = {m.name: m for m in ast.find_all(nodes.Macro)}
        sets: list[Any] = [*ast.find_all(nodes.Assign), *ast.find_all(nodes.For)]
        calls = [c for c in ast.find_all(nodes.Call) if getattr(c.node, "name", None) in macros]
        for _ in range(6):
            before = len(found)
            for node in sets:
                if reads_data(node.node if isinstance(node, nodes.Assign) else node.iter, found):
                    found |= {k for n in [node.target, *node.target.find_all(nodes.Name)] if (k := variable_key(n))}
            for call in calls:
                params = macros[call.node.name].args  # type: ignore[attr-defined]
                given = [
                    *zip(params, call.args),
                    *((p, k.value) for p in params for k in call.kwargs if k.key == p.name),
                ]
                found |= {p.name for p, arg in given if reads_data(arg, found)}
            if len(found) == before:
                break
        folding.cache["data"] = frozenset(found)
    return folding.cache["data"]


def reads_data(node: nodes.Node, data: set[str] | frozenset[str]) -> bool:
    """Whether `node` reads the conversation: a variable of `data`, a namespace attribute set from it, or a loop's
    position (`loop.index`)."""
    for sub in (node, *node.find_all((nodes.Name, nodes.Getattr))):
        if isinstance(sub, nodes.Name) and sub.ctx == "load" and sub.name in data:
            return True
        if not (isinstance(sub, nodes.Getattr) and isinstance(sub.node, nodes.Name)):
            continue
        if f"{sub.node.name}.{sub.attr}" in data or (sub.node.name == "loop" and sub.attr != "cycle"):
            return True
    return False


TOLD = "the model is told something on a trigger the conversation does not show"


def trigger_finding(
    src: Source,
    expr: nodes.Node,
    value: str,
    how: str,
    condition: int,
    construct: str,
    kind: str,
    *,
    column: int | None = None,
    severity: str = "",
    consequence: str = TOLD,
) -> SafetyFinding:
    """The HCT-S008 finding of every rule: the text `value` (at `expr`) is `how` ("written only when message content
    contains 'x'"), the condition's line, and what it means."""
    line, needle = _prose_line(expr.lineno, value)
    if column is None:
        literal = isinstance(expr, (nodes.Const, nodes.TemplateData))
        column = src.column(line, needle[:30]) if literal or expr.lineno == line else src.column(expr.lineno, "{{")
    return SafetyFinding(
        "HCT-S008",
        line,
        column,
        f"the text {short(needle)} is {how} (condition at line {condition}): {consequence}",
        severity=severity,
        construct=construct,
        detail={"trigger": kind, "condition_line": condition},
    )


def _part_type(node: nodes.Node) -> bool:
    """Whether `node` reads a content part's `type` key (`item.type`, `content['type']`): which kind of part it is
    (text, image, ...), a structure the client chose, not text anyone wrote."""
    if isinstance(node, nodes.Getattr):
        return node.attr == "type"
    return isinstance(node, nodes.Getitem) and const_string(node.arg) == "type"


def _compared(node: nodes.Compare, tainted: dict[str, str]) -> tuple[str, str] | None:
    sides = [node.expr, *(op.expr for op in node.ops)]
    ops = {op.op for op in node.ops}
    # `content['type'] == 'text'` tells a text part from an image: not a trigger on what the content says
    kinds = {_reads(s, tainted) for s in sides if not _part_type(s)} - {None}
    literals = [s.value for s in sides if isinstance(s, nodes.Const) and s.value is not None]
    if "clock" in kinds:  # `d[5:7] == '12'`, `d[5:7] == d[8:10]`, `d[5:] > '12-24'`: the output follows the date
        return "clock", repr(literals[0]) if literals else "another part of the date"
    words = [v for v in literals if isinstance(v, str) and re.search(r"[^\W\d_]{2}", v) and not markup(v)]
    if "content" in kinds and words and ops & {"in", "notin", "eq", "ne"}:
        return "content", ("contains " if ops & {"in", "notin"} else "equals ") + repr(words[0])
    return None


def _called(node: nodes.Call, tainted: dict[str, str]) -> tuple[str, str] | None:
    method = node.node
    if isinstance(method, nodes.Getattr) and method.attr in STRING_TESTS and node.args:
        arg = const_string(node.args[0])
        if (
            _reads(method.node, tainted) == "content"
            and arg is not None
            and re.search(r"[^\W\d_]{2}", arg)
            and not markup(arg)
        ):
            return "content", f"passes .{method.attr}({arg!r})"
    if _reads(node, tainted) == "clock":
        return "clock", "the date"
    return None


def _trigger(test: nodes.Node, tainted: dict[str, str]) -> tuple[str, str] | None:
    """(what is read, the trigger) when `test` compares content with a literal, or reads the clock."""
    for node in (test, *test.find_all((nodes.Compare, nodes.Call, nodes.Test))):
        found = (
            _compared(node, tainted)
            if isinstance(node, nodes.Compare)
            else _called(node, tainted)
            if isinstance(node, nodes.Call)
            else ("clock", f"`is {node.name}`")
            if isinstance(node, nodes.Test) and node.name not in _TYPE_TESTS and _reads(node.node, tainted) == "clock"
            else None
        )
        if found:
            return found
    return None


def _gated_literals(branch: list[nodes.Node]) -> Iterator[nodes.Node]:
    """The prose literals a branch writes, or sets for a later line to write (`{% set ns.think = ns.think ~
    'Okay, …' %}`); not a `raise_exception` message: that stops the render."""
    for stmt in branch:
        outs = [stmt] if isinstance(stmt, (nodes.Output, nodes.Assign)) else []
        for out in outs + list(stmt.find_all((nodes.Output, nodes.Assign))):
            refusals = {
                id(const)
                for call in out.find_all(nodes.Call)
                if isinstance(call.node, nodes.Name) and call.node.name == "raise_exception"
                for const in call.find_all(nodes.Const)
            }
            for node in out.find_all((nodes.TemplateData, nodes.Const)):
                value = literal_value(node)
                if isinstance(value, str) and prose(value) and id(node) not in refusals:
                    yield node


def _prose_line(lineno: int, value: str) -> tuple[int, str]:
    """The line of a literal that starting at `lineno` holds its first words, and those words."""
    for i, row in enumerate(value.split("\n")):
        if prose(row):
            return lineno + i, row.strip()
    return lineno, value.strip()


def triggers(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """An `if` testing content or the clock, and a loop filtered by one (`{% for w in content.split() if w[::3] ==
    'zpy' %}`), with the prose its branches write or set."""
    tainted = taint_of(folding)
    node: Any
    for node in ast.find_all((nodes.If, nodes.For)):
        found = _trigger(node.test, tainted) if node.test is not None else None
        if not found:
            continue
        kind, trigger = found
        branches = [*node.body, *node.elif_, *node.else_] if isinstance(node, nodes.If) else [*node.body, *node.else_]
        for literal in _gated_literals(branches):
            value = literal_value(literal)
            said = "message content " + trigger if kind == "content" else f"the clock is compared with {trigger}"
            construct = f"{kind}:{trigger}:{value.strip()[:80]}"
            yield trigger_finding(src, literal, value, f"written only when {said}", node.lineno, construct, kind)


def spliced(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """Prose written right after message content in one expression (`message.content + ' Remember: …'`), spelled or
    folded from literals (`content ~ note`, `{% set note = 'Also ' ~ 'mention …' %}`). A preamble before it is not
    flagged (the speaker's own words close the turn there), nor text after a variable that holds content (Gemma
    folds the system prompt and the tools' documented text into one prefix that way)."""
    node: Any
    for node in ast.find_all((nodes.Add, nodes.Concat)):
        parts = node.nodes if isinstance(node, nodes.Concat) else [node.left, node.right]
        reads = [i for i, p in enumerate(parts) if _reads(p, {}) == "content"]
        for part in parts[reads[0] + 1 :] if reads else ():
            literal = const_string(part)
            value = literal if literal is not None else folding.value(part)
            if not (isinstance(value, str) and prose(value, words=3)):
                continue
            how = "" if literal is not None else " (folded from literals)"
            yield SafetyFinding(
                "HCT-S012",
                node.lineno,
                src.column(node.lineno, value.strip()[:30])
                if literal is not None
                else src.column(node.lineno, "~" if isinstance(node, nodes.Concat) else "+"),
                f"the text {short(value.strip())}{how} is appended to message content: the model reads it as part "
                "of what the speaker wrote",
                construct=value.strip()[:80],
            )
