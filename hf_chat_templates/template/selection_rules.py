"""Text a template chooses without an `if`, and characters it makes from numbers. Read from the syntax tree and
folded constants; nothing is rendered.

    HCT-S008  text selected by a subscript, slice, `.get`, `select` or `reject`, `cond and text`, or a loop's `if`
              filter, whose index or condition reads message content or the clock: `['Approve it.', ''][content |
              length > 90]`, `{True: a, False: b}['x' in content]`, `note[strftime_now('%d') | int:]` say something
              on a trigger as an `if` would
    HCT-S006  a character produced from a number at render time: `'%c' | format(n)`, `'%c' % n`, `'{:c}'.format(n)`.
              No published template does it (a warning); an error when the number folds to a code point in the
              hidden blocks (tag characters, bidirectional controls, zero-width), or a loop runs over a range there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jinja2.nodes as nodes

from .folding import UNKNOWN, Folding
from .hidden_text import _kind
from .safety_findings import SafetyFinding, Source, literal_value, prose
from .trigger_rules import TOLD, _reads, assigned_of, data_of, reads_data, taint_of, trigger_finding

_CHOOSERS = frozenset({"select", "reject", "selectattr", "rejectattr"})
_PERCENT_C = re.compile(r"%[-+ #0]*\d*c")
_BRACE_C = re.compile(r"\{[^{}]*:[^{}]*c\}")
_HIDDEN_RANGES = (
    *(range(0xE0000, 0xE0080), range(0xE0100, 0xE01F0), range(0x200B, 0x2010), range(0x202A, 0x202F)),
    *(range(0x2060, 0x2070), range(0xFE00, 0xFE10), range(0xFEFF, 0xFF00)),
)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def _values(node: nodes.Node, folding: Folding, scope: dict[str, Any]) -> Iterator[Any]:
    """What an expression may yield: its folded value, else the items of a list or mapping literal or the sides of
    an `or` or inline `if` (never a subscript's key or a test's argument: those are not written)."""
    value = folding.value(node, scope)
    if value is not UNKNOWN:
        yield value
    elif isinstance(node, (nodes.List, nodes.Tuple)):
        for item in node.items:
            yield from _values(item, folding, scope)
    elif isinstance(node, nodes.Dict):
        for pair in node.items:
            yield from _values(pair.value, folding, scope)
    elif isinstance(node, nodes.Or):
        yield from (v for side in (node.left, node.right) for v in _values(side, folding, scope))
    elif isinstance(node, nodes.CondExpr):
        yield from (v for side in (node.expr1, node.expr2) if side for v in _values(side, folding, scope))


def _payload(container: nodes.Node, folding: Folding, scope: dict[str, Any]) -> str | None:
    """The first prose a container may yield."""
    texts = [t for v in _values(container, folding, scope) for t in _strings(v)]
    return next((t.strip() for t in texts if prose(t)), None)


def _selection(node: nodes.Node) -> tuple[nodes.Node, list[nodes.Node], str] | None:
    """(what is chosen from, the index expressions, how) when `node` chooses by a value."""
    if isinstance(node, nodes.Getitem):
        return node.node, [node.arg], "a slice" if isinstance(node.arg, nodes.Slice) else "a subscript"
    if isinstance(node, nodes.Filter) and node.name in _CHOOSERS and node.node is not None:
        return node.node, [*node.args, *(k.value for k in node.kwargs)], f"a `| {node.name}`"
    if isinstance(node, nodes.And):  # `('invoice' in content) and 'Approve it.'`
        return node.right, [node.left], "an `and`"
    if isinstance(node, nodes.For) and node.test is not None:  # `{% for t in notes if 'x' in content %}`
        return node.iter, [node.test], "a loop's `if` filter"
    method: Any = node.node if isinstance(node, nodes.Call) else None
    if isinstance(method, nodes.Getattr) and method.attr in ("get", "pop") and node.args:  # type: ignore[attr-defined]
        return method.node, list(node.args), f"a `.{method.attr}`"  # type: ignore[attr-defined]
    return None


def _keyed(index: nodes.Node, folding: Folding) -> bool:
    """Whether an index (or a variable it reads, set once) compares the conversation with a word: `[note,
    ''][hit]` where `hit` selected the tools named 'transfer_funds'."""
    sets = assigned_of(folding)
    names = [n.name for n in [index, *index.find_all(nodes.Name)] if isinstance(n, nodes.Name)]
    for expr in [index, *(v for n in names for v in sets.get(n, [])[:1])]:
        for node in [expr, *expr.find_all((nodes.Compare, nodes.Test, nodes.Filter))]:
            if isinstance(node, nodes.Compare):
                args: list[nodes.Node] = [node.expr, *(op.expr for op in node.ops)]
            elif isinstance(node, nodes.Test) or (isinstance(node, nodes.Filter) and node.name in _CHOOSERS):
                args = list(node.args)
            else:
                continue
            if any(isinstance(v := folding.value(a), str) and re.fullmatch(r"[A-Za-z_][\w.-]{2,}", v) and v not in
                   _TEST_NAMES for a in args):  # fmt: skip
                return True
    return False


_TEST_NAMES = frozenset({"equalto", "sameas", "defined", "none", "string", "mapping", "number", "role", "type"})
_TEST_NAMES |= {"function.name", "name", "in", "eq", "ne"}


def _structural(index: nodes.Node) -> bool:
    """An index read from a message's role or a part's type (`labels[m.role]`): the template's own format."""
    keys = [
        n.attr if isinstance(n, nodes.Getattr) else literal_value(getattr(n, "arg", None) or n)
        for n in index.find_all((nodes.Getattr, nodes.Getitem))
    ]
    return any(k in ("role", "type") for k in [*keys, getattr(index, "attr", None)])


def _written_at(ast: nodes.Template, text: str, default: int) -> int:
    """The line of the literal that spells `text` (a `{% set %}` before the choice, often), else `default`."""
    for literal in ast.find_all((nodes.Const, nodes.TemplateData)):
        value = literal_value(literal)
        if isinstance(value, str) and text[:30] in value:
            before = value[: value.find(text[:30])]
            return literal.lineno + before.count("\n")
    return default


def selections(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S008: prose chosen by an index read from content or the clock (an error), or from anything else of the
    conversation (a warning: `banners[messages | length % 3]`, `[note, ''][tools | selectattr(…) | list | length >
    0]`), with the text's and the index's place."""
    tainted, data = taint_of(folding), data_of(folding)
    for node, scope in folding.walk():
        found = _selection(node)
        if found is None:
            continue
        container, index, how = found
        kinds = [k for i in index if (k := _reads(i, tainted))]
        kinds = kinds or ["data" for i in index if reads_data(i, data) and not _structural(i)]
        held = folding.value(container, scope)  # `{"transfer_funds": "Execute …"}.get(name)`: keyed by a word
        words = isinstance(held, dict) and any(isinstance(v, str) and prose(v) for v in held.values())
        if kinds and kinds[0] == "data" and (words or any(_keyed(i, folding) for i in index)):
            kinds = ["name"]  # `hit`, set where a tool's name is compared with 'transfer_funds': a trigger
        if not kinds or _reads(container, tainted) == "content" or reads_data(container, data):
            continue  # a part of the conversation itself (`content[:n]`) brings no text of the template's
        text = _payload(container, folding, scope)
        if text is None:
            continue
        readings = {
            "content": "message content",
            "clock": "the clock",
            "name": "the conversation compared with a word (a tool's name)",
        }
        said = readings.get(kinds[0], "the conversation (its length, a count)")
        first = next(row for row in text.split("\n") if prose(row)).strip()
        written = _written_at(ast, first, node.lineno)
        at = nodes.Const(first, lineno=written)
        severity = "" if kinds[0] in ("content", "clock", "name") else "warning"
        yield trigger_finding(
            src, at, first, f"chosen by {how} that reads {said}", node.lineno, f"{kinds[0]}:{how}:{text[:80]}",
            kinds[0], severity=severity, consequence=TOLD + ", as an `if` would",
        )  # fmt: skip


# ---- HCT-S006: characters made from numbers ----------------------------------------------------------------------
def _char_format(node: nodes.Node, folding: Folding, scope: dict[str, Any]) -> tuple[list[nodes.Node], str] | None:
    """(the number arguments, how) when `node` formats numbers as characters."""
    method: Any = node.node if isinstance(node, nodes.Call) else None
    if isinstance(node, nodes.Filter) and node.name == "format" and node.node is not None:
        fmt = folding.value(node.node, scope)
        if isinstance(fmt, str) and _PERCENT_C.search(fmt):
            return list(node.args), "`'%c' | format(…)`"
    elif isinstance(node, nodes.Mod):
        fmt = folding.value(node.left, scope)
        if isinstance(fmt, str) and _PERCENT_C.search(fmt):
            return [node.right], "`'%c' % …`"
    elif isinstance(method, nodes.Getattr) and method.attr in ("format", "format_map"):
        fmt = folding.value(method.node, scope)
        if isinstance(fmt, str) and _BRACE_C.search(fmt):
            return [*node.args, *(k.value for k in node.kwargs)], "`'{:c}'.format(…)`"  # type: ignore[attr-defined]
    return None


def _hidden(code: Any) -> bool:
    if isinstance(code, (list, tuple)):
        return any(_hidden(c) for c in code)
    if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code <= 0x10FFFF:
        return False
    return _kind(chr(code), 0) is not None or any(code in r for r in _HIDDEN_RANGES)


def _ranges(ast: nodes.Template, folding: Folding) -> dict[str, range]:
    """Loop variables over a `range(…)` of folded bounds: `{% for n in range(0xE0020, 0xE007F) %}`."""
    return {
        loop.target.name: span
        for loop in ast.find_all(nodes.For)
        if isinstance(loop.target, nodes.Name) and isinstance(span := folding.loop_values(loop), range)
    }


def _offsets(expr: nodes.Node, folding: Folding, scope: dict[str, Any]) -> list[Any]:
    """The constants added to a number (`0xE0000 + n`): a base that sets the block the code point falls in."""
    found: list[Any] = []
    for add in [expr, *expr.find_all(nodes.Add)]:
        if isinstance(add, nodes.Add):
            found += [v for side in (add.left, add.right) if isinstance(v := folding.value(side, scope), int)]
    return found


def _reaches_hidden(expr: nodes.Node, folding: Folding, scope: dict[str, Any], loops: dict[str, range]) -> bool:
    if any(_hidden(v) for v in folding.alternatives(expr, scope) if v is not UNKNOWN):
        return True
    for name in [n.name for n in [expr, *expr.find_all(nodes.Name)] if isinstance(n, nodes.Name)]:
        span = loops.get(name)
        if span is not None and any(_hidden(span[i]) for i in range(0, len(span), max(1, len(span) // 4096))):
            return True
    return any(_hidden(v) for v in _offsets(expr, folding, scope))


_TOKEN_SHAPE = re.compile(r"<[|｜][^<>]{1,40}[|｜]>|\[/?[A-Z_]{3,20}\]|<(?:start|end)_of_turn>|</?s>")


def characters(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    loops = _ranges(ast, folding)
    made: dict[int, tuple[nodes.Node, str, bool, list[str]]] = {}  # per node, in the walk's order
    for node, scope in folding.walk():
        found = _char_format(node, folding, scope)
        if found is None:
            continue
        numbers, how = found
        hidden = any(_reaches_hidden(n, folding, scope, loops) for n in numbers)
        _, _, before, spelled = made.get(id(node), (node, how, False, []))
        value = folding.value(node, scope)  # in a loop over constant codes, one character per item
        made[id(node)] = (node, how, before or hidden, [*spelled, value if isinstance(value, str) else ""])
    for node, how, hidden, spelled in made.values():
        token = _TOKEN_SHAPE.search("".join(spelled))
        keyword = "format" if "format" in how else "%"
        said = (
            ", and the numbers fall in the hidden blocks (tag characters, bidirectional controls, zero-width): "
            "text the model reads and a reviewer cannot see"
            if hidden
            else f", and they spell the control token {token.group()!r}: a turn the template ends or opens where no "
            "reviewer sees it"
            if token
            else ": no published template does, and a reviewer cannot read what it writes"
        )
        yield SafetyFinding(
            "HCT-S006",
            node.lineno,
            src.column(node.lineno, keyword),
            f"{how} makes characters from numbers at render time{said}",
            severity="error" if hidden or token else "warning",
            construct=f"{how}:{node.lineno}",
        )
