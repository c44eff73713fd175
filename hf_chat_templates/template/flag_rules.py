"""HCT-S008 through a flag and on the conversation's length or position: text written only once a variable, set
where the conversation's content was tested, says so; or only in a long conversation. Read from the syntax tree;
nothing is rendered.

A trigger need not stand in the condition around the text it gates:

    {% for m in messages %}{% for k in ['pi' ~ 'p '] %}{% if k in m.content | lower %}{% set ns.hit = true %}
    {% endif %}{% endfor %}{% endfor %} … {% if ns.hit %}{% set system_message = system_message ~ note %}{% endif %}

`ns.hit` is a *flag*: assigned under a condition that tests message content against words (`in`, `==`,
`startswith`, a search, a size), or from another flag (`{% set x = 'a' if ns.hit else '' %}`, a macro's parameter),
followed through `MAX_FLAG_STEPS` steps. Text written, or kept in a variable, under a test of a flag is trigger-gated
and both places are named. The same holds for a *position*: the conversation's length, `loop.index`, or a count the
template keeps (`{% set ns.turns = ns.turns + 1 %}`) compared with a constant of at least `MIN_POSITION`: prose of
three words or more written only there is a warning.

Tests against markup are the template's own format, not a trigger: reasoning split on `</think>`, a tool result
recognised by `<tool_response>`, a system prompt by `<<SYS>>`, a control token (`<|tool_call|>`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jinja2.nodes as nodes

from .folded_rules import _folded_trigger, _reads_content
from .folding import UNKNOWN, Folding, variable_key
from .safety_findings import SafetyFinding, Source, literal_value, markup, prose
from .trigger_rules import TOLD, _gated_literals, _part_type, _trigger, taint_of, trigger_finding

MAX_FLAG_STEPS = 6  # flag -> flag -> ... followed this far
MIN_POSITION = 3  # `messages | length > 2` is a template's own shape; past that, a gate on how long the chat is
_SEARCHES = frozenset({"startswith", "endswith", "find", "rfind", "index", "count", "search", "match", "fullmatch"})
_TEXT_TESTS = frozenset({"equalto", "eq", "==", "sameas", "in", "search", "match", "regex_search", "startingwith"})
_SIZES = frozenset({"length", "count", "wordcount"})
_POSITION_ATTRS = frozenset({"index", "index0", "length"})
_ORDER_TESTS = frozenset({"gt", "ge", "greaterthan", "lt", "le", "lessthan", "eq", "equalto", "==", ">", ">=", "<"})
_ORDER_TESTS |= {"<=", "divisibleby"}


@dataclass(frozen=True)
class Gate:
    """What a condition tests: `kind` is 'content' or 'position'; `said` completes "written only when …"."""

    kind: str
    said: str
    line: int
    what: str = ""  # the trigger without line numbers: the finding's construct
    depth: int = 0  # flags between the trigger and this test


class Conditions:
    """Which conditions of one template are triggers: content tested against words, a position compared with a
    constant, a flag read (`flags`, once `find_flags` has run)."""

    def __init__(self, ast: nodes.Template, folding: Folding) -> None:
        self.folding = folding
        self.tainted = taint_of(folding)
        self.loops = {
            loop.target.name: values
            for loop in ast.find_all(nodes.For)
            if isinstance(loop.target, nodes.Name) and isinstance(values := folding.loop_values(loop), list)
        }
        self.counters = _counters(ast)
        self.positions: set[str] = set()  # `{% set ns.turn = loop.index %}`: a position kept
        assigns = [(variable_key(a.target), a.node) for a in ast.find_all(nodes.Assign)]
        for _ in range(MAX_FLAG_STEPS):
            found = {key for key, value in assigns if key and self._position(value)} - self.positions
            if not found:
                break
            self.positions |= found
        self.flags: dict[str, Gate] = {}

    def words(self, node: nodes.Node) -> list[str]:
        """The words `node` stands for: a folded string or list, or a loop variable over a constant list."""
        if isinstance(node, nodes.Name) and node.name in self.loops:
            value: Any = self.loops[node.name]
        else:
            value = self.folding.value(node)
        values = value if isinstance(value, list) else [value]
        return [v for v in values if isinstance(v, str) and re.search(r"[^\W\d_]{2}", v) and not markup(v)]

    def content_test(self, test: nodes.Node) -> str | None:
        """How `test` tests message content against words or a size, or None."""
        for node in (test, *test.find_all((nodes.Compare, nodes.Call, nodes.Test, nodes.Filter))):
            found = self._one(node)
            if found:
                return found
        return None

    def _content(self, node: nodes.Node) -> bool:
        return _reads_content(node, self.tainted) and not _part_type(node)

    def _one(self, node: nodes.Node) -> str | None:
        if isinstance(node, nodes.Compare):
            sides = [node.expr, *(op.expr for op in node.ops)]
            ops = {op.op for op in node.ops}
            content = [s for s in sides if self._content(s)]
            others = [s for s in sides if not self._content(s)]
            if not content:
                return None
            words = [w for s in others for w in self.words(s)]
            if words and ops & {"in", "notin", "eq", "ne"}:
                return ("contains " if ops & {"in", "notin"} else "equals ") + repr(words[0])
            for side in content:  # `(m.content.split('pip ') | length) > 1`: a search spelled as a split
                for call in side.find_all(nodes.Call):
                    method = call.node
                    splits = isinstance(method, nodes.Getattr) and method.attr in ("split", "rsplit") and call.args
                    if splits and (said := self.words(call.args[0])):
                        return f"contains {said[0]!r}"
            numbers = [v for v in (self.folding.value(s) for s in others) if _count(v)]
            if numbers and any(_measures(s) for s in content):
                return f"has a size compared with {numbers[0]}"
        elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and node.args:
            method = node.node
            said = self.words(node.args[0]) if method.attr in _SEARCHES and self._content(method.node) else []
            return f"passes .{method.attr}({said[0]!r})" if said else None
        elif isinstance(node, nodes.Test) and node.name in _TEXT_TESTS and node.args:
            said = self.words(node.args[0]) if self._content(node.node) else []
            return f"is {node.name} {said[0]!r}" if said else None
        elif isinstance(node, nodes.Filter) and node.name in ("select", "reject") and len(node.args) >= 2:
            # `content.split() | select('in', ['urgent', 'refund'])`: the words of content tested one by one
            test = self.folding.value(node.args[0])
            said = self.words(node.args[1]) if test in _TEXT_TESTS and node.node and self._content(node.node) else []
            return f"has a word {test} {said[:3]!r}" if said else None
        return None

    def position_test(self, test: nodes.Node) -> str | None:
        """How `test` compares the conversation's length or a position with a constant of MIN_POSITION or more."""
        for node in (test, *test.find_all((nodes.Compare, nodes.Test))):
            if isinstance(node, nodes.Test) and node.name in _ORDER_TESTS and node.args:
                sides = [node.node, node.args[0]]  # `messages | length is gt(10)`, `loop.index is divisibleby 7`
            elif isinstance(node, nodes.Compare) and not {op.op for op in node.ops} & {"in", "notin", "ne"}:
                sides = [node.expr, *(op.expr for op in node.ops)]
            else:
                continue
            where = next((w for s in sides if (w := self._position(s))), None)
            numbers = [v for v in (self.folding.value(s) for s in sides) if _count(v) and v >= MIN_POSITION]
            # `messages | length % 3 == 0`: a rotation through three or more texts, whatever it is compared with
            numbers += [m for s in sides if isinstance(s, nodes.Mod) and self._position(s.left)
                        and _count(m := self.folding.value(s.right)) and m >= MIN_POSITION]  # fmt: skip
            if where and numbers:
                return f"{where} is compared with {numbers[0]}"
        return None

    def _position(self, node: nodes.Node) -> str | None:
        if isinstance(node, nodes.Mod):  # `loop.index0 % 3`
            return self._position(node.left)
        if isinstance(node, (nodes.Add, nodes.Sub)):  # `loop.index + 1`
            return self._position(node.left) or self._position(node.right)
        if (
            isinstance(node, nodes.Getattr)
            and node.attr in _POSITION_ATTRS
            and getattr(node.node, "name", "") == "loop"
        ):
            return f"`loop.{node.attr}`"
        if isinstance(node, nodes.Filter) and node.name in ("length", "count") and node.node is not None:
            base = node.node  # `messages[1:] | selectattr('role', 'equalto', 'user') | list | length`
            while isinstance(base, (nodes.Filter, nodes.Getitem)) and base.node is not None:
                base = base.node
            if isinstance(base, nodes.Name) and "message" in base.name:
                return f"the length of `{base.name}`"
        key = variable_key(node)
        return f"the count `{key}`" if key in self.counters or key in self.positions else None

    def gate(self, test: nodes.Node, value: bool = False) -> Gate | None:
        """The trigger `test` is, if it is one: content, a flag it reads, or a position. A `value` assigned is one
        only as a test (`{% set hit = 'pip' in m.content %}`) or by the flag it reads: `'Today is ' + today` reads
        the clock without testing it."""
        said = self.content_test(test)
        if said:
            return Gate("content", f"message content {said}", test.lineno, said)
        probe = test.test if isinstance(test, nodes.CondExpr) else test  # `x = 'a' if … else ''`: its test
        tests = not value or isinstance(probe, (nodes.Compare, nodes.Test, nodes.And, nodes.Or, nodes.Not))
        other = _trigger(probe, self.tainted) or _folded_trigger(probe, self.tainted, self.folding) if tests else None
        if other is not None and other[0] in ("content", "clock"):  # `selectattr('content', …)`, the clock
            kind, what = other
            said = f"message content {what}" if kind == "content" else f"the clock is compared with {what}"
            return Gate("content", said, test.lineno, what)
        for sub in (test, *test.find_all((nodes.Name, nodes.Getattr))):
            key = variable_key(sub)
            if key in self.flags and not (isinstance(sub, nodes.Name) and sub.ctx != "load"):
                flag = self.flags[key]
                said = f"the flag `{key}` is set (line {flag.line}, where {flag.said})"
                return Gate(flag.kind, said, test.lineno, f"{key}<-{flag.what}", flag.depth + 1)
        said = self.position_test(test)
        return Gate("position", said, test.lineno, said) if said else None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 2


def _measures(node: nodes.Node) -> bool:
    """`content | length`, `content | wordcount`, `len(content)`: a size, not the text."""
    sized = any(isinstance(f, nodes.Filter) and f.name in _SIZES for f in (node, *node.find_all(nodes.Filter)))
    return sized or any(getattr(c.node, "name", None) == "len" for c in node.find_all(nodes.Call))


def _counters(ast: nodes.Template) -> set[str]:
    """Names and namespace attributes a template counts with: `{% set ns.n = ns.n + 1 %}`."""
    found = set()
    for assign in ast.find_all(nodes.Assign):
        key = variable_key(assign.target)
        value = assign.node
        if (
            key
            and isinstance(value, (nodes.Add, nodes.Sub))
            and key in (variable_key(value.left), variable_key(value.right))
        ):
            found.add(key)
    return found


# ---- the walk: each statement with the conditions around it ------------------------------------------------------
def guarded(node: nodes.Node, conds: tuple[nodes.Node, ...] = ()) -> Iterator[tuple[nodes.Node, tuple[Any, ...]]]:
    """Every node under `node` with the conditions (`{% if %}` and `{% elif %}` tests, a loop's `if`) it runs
    under."""
    for child in node.iter_child_nodes():
        yield child, conds
        yield from _within(child, conds)


def _within(node: nodes.Node, conds: tuple[nodes.Node, ...]) -> Iterator[tuple[nodes.Node, tuple[Any, ...]]]:
    """The nodes under `node`, itself run under `conds`."""
    if isinstance(node, nodes.If):  # an `{% elif %}` is an If in `elif_`: its own test is added there
        yield from guarded(node.test, conds)
        for stmt in [*node.body, *node.elif_, *node.else_]:
            yield stmt, (*conds, node.test)
            yield from _within(stmt, (*conds, node.test))
    elif isinstance(node, nodes.For) and node.test is not None:
        yield from guarded(node.iter, conds)
        for stmt in [*node.body, *node.else_]:
            yield stmt, (*conds, node.test)
            yield from _within(stmt, (*conds, node.test))
    else:
        yield from guarded(node, conds)


def find_flags(ast: nodes.Template, cond: Conditions) -> None:
    """Fill `cond.flags`: what is assigned under a trigger, or from a flag, to a fixed point (MAX_FLAG_STEPS)."""
    assigns = [(n, c) for n, c in guarded(ast) if isinstance(n, nodes.Assign) and variable_key(n.target)]
    macros = {m.name: m for m in ast.find_all(nodes.Macro)}
    calls = [c for c in ast.find_all(nodes.Call) if getattr(c.node, "name", None) in macros]
    for _ in range(MAX_FLAG_STEPS + 1):
        before = len(cond.flags)
        for assign, conds in assigns:
            key = variable_key(assign.target)
            if key is None or key in cond.flags:  # a count kept under a trigger is a flag too
                continue
            gates = [g for c in conds if (g := cond.gate(c))]
            gates.sort(key=lambda g: g.kind != "content")
            # `{% set hit = 'pip' in m.content %}`, `{% set x = 'a' if ns.hit else '' %}`, or under a trigger
            gate = cond.gate(assign.node, value=True) or (gates[0] if gates else None)
            if gate is not None and gate.depth <= MAX_FLAG_STEPS:
                cond.flags[key] = Gate(gate.kind, gate.said, assign.lineno, gate.what, gate.depth)
        for call in calls:  # a macro's parameter given a flag
            macro = macros[call.node.name]  # type: ignore[attr-defined]
            given = [
                *zip(macro.args, call.args),
                *((a, k.value) for a in macro.args for k in call.kwargs if k.key == a.name),
            ]
            for param, value in given:
                gate = cond.gate(value, value=True)
                if gate is not None and gate.depth <= MAX_FLAG_STEPS and param.name not in cond.flags:
                    cond.flags[param.name] = Gate(gate.kind, gate.said, call.lineno, gate.what, gate.depth)
        if len(cond.flags) == before:
            break


# ---- what a gated branch writes or keeps ------------------------------------------------------------------------
def _parts(node: nodes.Node) -> list[nodes.Node]:
    """The pieces of a concatenation (`a ~ b ~ c`, `a + b`), or the node."""
    if isinstance(node, nodes.Concat):
        return [p for n in node.nodes for p in _parts(n)]
    if isinstance(node, nodes.Add):
        return [*_parts(node.left), *_parts(node.right)]
    return [node]


def gated_text(branch: list[nodes.Node], folding: Folding, words: int) -> Iterator[tuple[nodes.Node, str]]:
    """The prose a branch writes or keeps in a variable: literals, and pieces of what it writes or assigns that fold
    to prose (`{% set system_message = system_message ~ note %}`)."""
    for literal in _gated_literals(branch):
        value = literal_value(literal)
        if prose(value, words=words):
            yield literal, value
    for stmt in branch:
        for node in [stmt, *stmt.find_all((nodes.Output, nodes.Assign))]:
            exprs = (
                node.nodes if isinstance(node, nodes.Output) else [node.node] if isinstance(node, nodes.Assign) else []
            )
            for expr in exprs:
                for part in _parts(expr):
                    if isinstance(part, (nodes.Const, nodes.TemplateData)):
                        continue
                    for value in _texts(folding.value(part)):
                        if prose(value, words=words):
                            yield part, value


def _texts(value: Any) -> Iterator[str]:
    """The strings of a folded value: itself, or those of a list or a dict (a message added to `messages`)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _texts(item)


def _choices(node: nodes.CondExpr, folding: Folding, words: int) -> Iterator[tuple[nodes.Node, str]]:
    for branch in (node.expr1, node.expr2):
        for value in _texts(folding.value(branch) if branch is not None else UNKNOWN):
            if prose(value, words=words):
                yield branch, value  # type: ignore[misc]


def conditions_of(folding: Folding) -> Conditions:
    """The template's `Conditions` with its flags found, computed once per scan."""
    if "conditions" not in folding.cache:
        cond = folding.cache["conditions"] = Conditions(folding.ast, folding)
        find_flags(folding.ast, cond)
    return folding.cache["conditions"]


def flagged(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S008 for text gated on a flag or a position (text gated on content itself is `trigger_rules`')."""
    cond = conditions_of(folding)
    node: Any
    for node in ast.find_all((nodes.If, nodes.CondExpr, nodes.For)):
        if node.test is None:
            continue  # a loop without `if`
        direct = _trigger(node.test, cond.tainted) or _folded_trigger(node.test, cond.tainted, folding)
        if direct:
            continue  # the trigger stands in the condition: `trigger_rules` and `folded_rules` name it
        gate = cond.gate(node.test)
        if gate is None:
            continue
        words = 2 if gate.kind == "content" else 3
        if isinstance(node, nodes.If):
            found = list(gated_text([*node.body, *node.elif_, *node.else_], folding, words))
        elif isinstance(node, nodes.For):  # `{% for x in xs if ns.hit %}`
            found = list(gated_text(node.body, folding, words))
        else:
            found = list(_choices(node, folding, words))
        for expr, value in found:
            if not _echoed(gate, value):
                yield _finding(src, node, gate, expr, value)


def _echoed(gate: Gate, value: str) -> bool:
    """Whether the text is the very string the content was tested for (`content.endswith(tag)`, then `tag` written
    after the tool calls): the template moves the speaker's own words, as for a continue-final-message marker."""
    return gate.kind == "content" and gate.what.endswith((f"({value!r})", f" {value!r}"))


def _finding(src: Source, node: nodes.Node, gate: Gate, expr: nodes.Node, value: str) -> SafetyFinding:
    column = src.column(expr.lineno, expr.name) if isinstance(expr, nodes.Name) else None  # `x = x ~ note`: at `note`
    if gate.kind == "content":
        where = TOLD
    else:
        where = "the model is told something only once the conversation is long, which a short test never shows"
    construct = f"{gate.kind}:{gate.what}:{value.strip()[:80]}"
    severity = "error" if gate.kind == "content" else "warning"
    how = f"written only when {gate.said}"
    return trigger_finding(
        src, expr, value, how, node.lineno, construct, gate.kind, column=column, severity=severity, consequence=where
    )
