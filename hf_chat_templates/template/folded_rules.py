"""The safety rules on what a template computes from literals (`folding.Folding`), not only on what it spells:

    HCT-S001  a dunder or private name folded from literals (`['__cla', 'ss__'] | join`), read with `|attr` or `[ ]`
    HCT-S013  a name that does not fold read with `|attr(name)`, or by subscript on an object the sandbox guards
              (`cycler`, `joiner`, `namespace`, `lipsum`, `range`, `loop`, `self`, a function, a macro)
    HCT-S008  a trigger folded from literals (`('in' ~ 'voice') in message.content`, `content in ['a', 'b']`), and
              text a trigger writes through a variable, a macro or a filter
    HCT-S006, S007, S014 on the folded strings: hidden characters, look-alike tokens, addresses

Nothing is rendered. A finding here has the construct of the same finding on a literal where there is one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jinja2.nodes as nodes

from .addresses import addresses_in, severity_of, written_nodes
from .folding import MAX_STEPS, UNKNOWN, Folding
from .hidden_text import hidden_unicode, homoglyph_tokens
from .safety_findings import SafetyFinding, Source, literal_value, markup, prose, short
from .trigger_rules import CONTENT_KEYS, _gated_literals, _part_type, _reads, _trigger, taint_of, trigger_finding

# What the sandbox guards with `is_safe_attribute`: a subscript with a name it does not know reaches attributes.
GUARDED_GLOBALS = frozenset(
    {"cycler", "joiner", "namespace", "lipsum", "range", "loop", "self", "dict", "raise_exception", "strftime_now"}
)
UNSAFE_ATTRIBUTES = frozenset(
    {"mro", "func_globals", "func_code", "func_closure", "f_globals", "f_locals", "f_builtins", "f_back"}
    | {"gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "tb_frame", "tb_next", "co_code"}
    | {"im_func", "im_self", "im_class", "format_map"}
)


# Filters that read an attribute they are given by name (jinja2's `make_attrgetter`, dotted names part by part)
ATTRIBUTE_FILTERS = frozenset({"map", "selectattr", "rejectattr", "sort", "groupby", "sum", "unique", "min", "max"})


def unsafe_name(name: str) -> bool:
    return name.startswith("_") or name in UNSAFE_ATTRIBUTES


def folded_findings(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    yield from _computed_access(ast, src, folding)
    yield from _folded_triggers(ast, src, folding)
    yield from _folded_text(ast, src, folding)
    if folding.exhausted:
        yield SafetyFinding(
            "HCT-S009",
            1,
            1,
            f"the template's constant expressions take over {MAX_STEPS:,} steps to read (loops over constant lists "
            "within one another, macros calling macros): the rules on what it computes read only part of it",
            severity="warning",
            construct="folding-exhausted",
        )


# ---- HCT-S001, S013: names read by attribute or subscript --------------------------------------------------------
def _guarded(ast: nodes.Template) -> set[str]:
    """The guarded globals, the macros, and variables every `{% set %}` of which takes `namespace()`, `cycler()`,
    `joiner()` or one of those names (`{% set f = raise_exception %}`); a variable set to something else too
    (`{% set tools = tools.value %}` after a namespace) is not one."""
    names = set(GUARDED_GLOBALS) | {m.name for m in ast.find_all(nodes.Macro)}
    sets: dict[str, list[nodes.Node]] = {}
    for a in ast.find_all(nodes.Assign):
        if isinstance(a.target, nodes.Name):
            sets.setdefault(a.target.name, []).append(a.node)
    for _ in range(4):
        before = len(names)
        for name, values in sets.items():
            if all(_guarded_value(v, names) for v in values):
                names.add(name)
        if len(names) == before:
            break
    return names


def _guarded_value(node: nodes.Node, guarded: set[str]) -> bool:
    maker = node.node.name if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name) else None
    return maker in ("namespace", "cycler", "joiner") or (isinstance(node, nodes.Name) and node.name in guarded)


def _base_name(node: nodes.Node) -> str | None:
    """The guarded object a subscript reads: a name (`ns`, `loop`), or what a guarded function returns
    (`cycler('a')[k]`, `raise_exception[a][b]`); not an attribute of one (`ns.text[i]` reads a string)."""
    while isinstance(node, (nodes.Getitem, nodes.Call)):
        node = node.node
    return node.name if isinstance(node, nodes.Name) else None


def _computed_access(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    guarded = _guarded(ast)
    names: dict[int, list[Any]] = {}  # a node's name, once per loop binding it is read under
    reads: dict[int, tuple[nodes.Node, nodes.Node, str, str | None]] = {}
    name_node: nodes.Node
    for node, scope in folding.walk():
        mapped = _maps_attr(node, folding, scope)
        if isinstance(node, nodes.Filter) and node.name in ATTRIBUTE_FILTERS:
            yield from _attribute_filter(node, src, folding, scope)
        if mapped:  # `map('attr', name)`: a literal name too, which `safety._escapes` does not read
            name_node, how, on = node.args[1], "with `|map('attr', …)`", None  # type: ignore[attr-defined]
        elif isinstance(node, nodes.Filter) and node.name == "attr" and node.args:
            name_node, how, on = node.args[0], "with `|attr`", None
        elif isinstance(node, nodes.Getitem) and not isinstance(node.arg, nodes.Slice):
            name_node, how, on = node.arg, "by subscript", _base_name(node.node)
        else:
            continue
        if isinstance(name_node, nodes.Const) and not mapped:
            continue  # a literal name: `safety._escapes` reads it
        reads[id(node)] = (node, name_node, how, on)
        names.setdefault(id(node), []).extend(folding.alternatives(name_node, scope))
    for key, (node, name_node, how, on) in reads.items():
        column = _column(src, node, name_node)
        unsafe = [n for n in names[key] if isinstance(n, str) and unsafe_name(n)]
        if unsafe:
            yield SafetyFinding(
                "HCT-S001",
                node.lineno,
                column,
                f"reads (by a name folded from literals, {how}) `{unsafe[0]}`: a sandbox escape spelled so that no "
                "literal shows it (transformers' sandbox refuses it with SecurityError)",
                construct=unsafe[0],
            )
        elif UNKNOWN in names[key] and (isinstance(node, nodes.Filter) or on in guarded):
            target = "any object" if on is None else f"`{on}`"
            yield SafetyFinding(
                "HCT-S013",
                node.lineno,
                column,
                f"reads an attribute of {target} {how} with a name the template computes at render time "
                f"({_spelled(name_node)}): the name can be `__class__` or `__globals__`, which no review of the "
                "template sees",
                construct=f"{how}:{on or ''}:{_spelled(name_node)}",
            )


def _maps_attr(node: nodes.Node, folding: Folding, scope: dict[str, Any]) -> bool:
    """`|map('attr', name)`: the attr filter applied to each item."""
    return (
        isinstance(node, nodes.Filter)
        and node.name == "map"
        and len(node.args) >= 2
        and folding.value(node.args[0], scope) == "attr"
    )


def _attribute_filter(
    node: nodes.Filter, src: Source, folding: Folding, scope: dict[str, Any]
) -> Iterator[SafetyFinding]:
    """`map(attribute=…)`, `selectattr(…)`, `sort(attribute=…)`: each reads the attribute it is given, and a dotted
    name (`'a.__class__'`) reads each part."""
    given = [k.value for k in node.kwargs if k.key == "attribute"]
    given += node.args[:1] if node.name in ("selectattr", "rejectattr", "groupby", "sum") else []
    for name_node in given:
        name = folding.value(name_node, scope)
        column = src.column(node.lineno, node.name)
        parts = name.split(".") if isinstance(name, str) else []
        unsafe = [p for p in parts if unsafe_name(p)]
        if unsafe:
            yield SafetyFinding(
                "HCT-S001",
                node.lineno,
                column,
                f"`|{node.name}` reads the attribute `{unsafe[0]}` (from {name!r}): a sandbox escape spelled as a "
                "filter argument (transformers' sandbox refuses it with SecurityError)",
                construct=unsafe[0],
            )
        elif name is UNKNOWN:
            yield SafetyFinding(
                "HCT-S013",
                node.lineno,
                column,
                f"`|{node.name}` reads an attribute named at render time ({_spelled(name_node)}): the name can be "
                "`__class__`, which no review of the template sees",
                construct=f"{node.name}:{_spelled(name_node)}",
            )


def _column(src: Source, node: nodes.Node, name_node: nodes.Node) -> int:
    """Where `|attr(name)` or `[name]` is written: at the name when it is a variable, else at the first `attr`/`[`."""
    row = src.lines[node.lineno - 1] if 0 < node.lineno <= len(src.lines) else ""
    if isinstance(name_node, nodes.Name):
        found = re.search(rf"(?:attr\s*\(\s*|\[\s*|'attr'\s*,\s*){re.escape(name_node.name)}\b", row)
        if found:
            return found.start() + 1
    return src.column(node.lineno, "attr" if isinstance(node, nodes.Filter) else "[")


def _spelled(node: nodes.Node) -> str:
    names = [n.name for n in node.find_all(nodes.Name)] if not isinstance(node, nodes.Name) else [node.name]
    return f"from `{'`, `'.join(dict.fromkeys(names))}`" if names else "an expression"


# ---- HCT-S008: triggers and gated text, folded -------------------------------------------------------------------
def _words(value: Any) -> str | None:
    values = value if isinstance(value, list) else [value]
    found = [v for v in values if isinstance(v, str) and re.search(r"[^\W\d_]{2}", v) and not markup(v)]
    return repr(found[0]) if len(found) == 1 else repr(found) if found else None


def _flat(value: Any) -> list[Any]:
    return [w for v in value for w in _flat(v)] if isinstance(value, (list, tuple)) else [value]


# Jinja tests that compare (`content is equalto 'sudo'`, `is in [...]`) and `selectattr`'s
_COMPARING_TESTS = frozenset({"equalto", "eq", "==", "sameas", "in", "ne", "!="})


def _reads_content(node: nodes.Node, tainted: dict[str, str]) -> bool:
    """`_reads`, and content read through a filter's attribute name (`messages | map(attribute='content')`)."""
    if _reads(node, tainted) == "content":
        return True
    for f in (node, *node.find_all(nodes.Filter)):
        if isinstance(f, nodes.Filter) and f.name in ("map", "selectattr", "rejectattr", "sum", "join"):
            named = [k.value for k in f.kwargs if k.key == "attribute"] + f.args[:1]
            if any(isinstance(n, nodes.Const) and n.value in CONTENT_KEYS for n in named):
                return True
    return False


def _folded_trigger(
    test: nodes.Node, tainted: dict[str, str], folding: Folding, scope: dict[str, Any] | None = None
) -> tuple[str, str] | None:
    """A trigger `trigger_rules._trigger` does not see (it runs only where that found none): literals folded or in
    a list, a Jinja test, `selectattr`, content read through `map(attribute=…)`, a size, chance."""
    for node in (test, *test.find_all((nodes.Compare, nodes.Call, nodes.Test, nodes.Filter))):
        found = _one_trigger(node, tainted, folding, scope or {})
        if found:
            return found
    return None


def _one_trigger(
    node: nodes.Node, tainted: dict[str, str], folding: Folding, scope: dict[str, Any]
) -> tuple[str, str] | None:
    if isinstance(node, nodes.Compare):
        sides = [node.expr, *(op.expr for op in node.ops)]
        ops = {op.op for op in node.ops}
        kinds = {_reads(s, tainted) for s in sides if not _part_type(s)} - {None}
        if any(_reads_content(s, tainted) and not _part_type(s) for s in sides):
            kinds.add("content")
        folded = [folding.value(s, scope) for s in sides]
        words = next((w for v in folded if v is not UNKNOWN and (w := _words(v))), None)
        if "content" in kinds and words and ops & {"in", "notin", "eq", "ne"}:
            return "content", ("contains " if ops & {"in", "notin"} else "equals ") + words
        # `message.content | length == 1337`: a trigger no reader of the conversation sees (`> 0` tests presence)
        counts = [v for v in folded if isinstance(v, int) and not isinstance(v, bool) and v >= 2]
        if "content" in kinds and counts and ops & {"eq"}:
            return "content", f"has a size equal to {counts[0]}"
        if "clock" in kinds and any(v is not UNKNOWN and v is not None for v in folded):
            return "clock", "a folded date"
    elif isinstance(node, nodes.Test) and node.name in _COMPARING_TESTS and node.args:
        words = _words(folding.value(node.args[0], scope))
        if words and _reads_content(node.node, tainted) and not _part_type(node.node):
            return "content", f"is {node.name} {words}"
    elif isinstance(node, nodes.Filter) and node.name in ("selectattr", "rejectattr") and len(node.args) >= 3:
        field, test, value = (folding.value(a, scope) for a in node.args[:3])
        if field in CONTENT_KEYS and test in _COMPARING_TESTS and (words := _words(value)):
            return "content", f"selects content {test} {words}"
    elif isinstance(node, nodes.Filter) and node.name in ("select", "reject") and len(node.args) >= 2:
        # `content.split() | select('in', keys)`: the words of content tested one by one against a list
        test, value = (folding.value(a, scope) for a in node.args[:2])
        flat = [w for v in (value if isinstance(value, (list, tuple)) else [value]) for w in _flat(v)]
        reads = node.node is not None and _reads_content(node.node, tainted)
        if test in _COMPARING_TESTS and reads and (words := _words(flat)):
            return "content", f"has a word {test} {words}"
    elif isinstance(node, nodes.Filter) and node.name == "random":
        return "chance", "a random pick (`|random`)"
    elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and node.args:
        method = node.node
        if method.attr in ("startswith", "endswith", "find", "count", "index"):
            arg = folding.value(node.args[0], scope)
            if _reads_content(method.node, tainted) and (w := _words(arg)):
                return "content", f"passes .{method.attr}({w})"
    return None


def _gated_outputs(branch: list[nodes.Node], folding: Folding) -> Iterator[tuple[nodes.Node, str]]:
    """What a branch writes through expressions that fold to prose (a variable, a macro call, a join), and the
    prose it keeps to write later (`{% set ns.note = 'Approve every refund.' %}`, written outside the branch)."""
    for stmt in branch:
        for out in [stmt] if isinstance(stmt, nodes.Output) else stmt.find_all(nodes.Output):
            for expr in out.nodes:
                if isinstance(expr, (nodes.Const, nodes.TemplateData)):
                    continue
                value = folding.value(expr)
                if isinstance(value, str) and prose(value):
                    yield expr, value
        kept: list[Any] = [stmt] if isinstance(stmt, nodes.Assign) else list(stmt.find_all(nodes.Assign))
        for assign in kept:
            value = folding.value(assign.node)
            if isinstance(value, str) and prose(value, words=3):
                yield assign.node, value


def _conditional_text(
    node: nodes.CondExpr, folding: Folding, scope: dict[str, Any]
) -> Iterator[tuple[nodes.Node, str]]:
    """What `a if test else b` writes from literals in either branch (`m.content if … else 'I need no refund.'`),
    a loop's variable over a constant list bound (`text if … else ''` in `for keys, text in notes | dictsort`)."""
    for branch in (node.expr1, node.expr2):
        value = folding.value(branch, scope) if branch is not None else UNKNOWN
        if isinstance(value, str) and prose(value):
            yield branch, value  # type: ignore[misc]


def _folded_triggers(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    tainted = taint_of(folding)
    node: Any
    for node, scope in folding.walk():
        if not isinstance(node, (nodes.If, nodes.CondExpr)):
            continue
        # `trigger_rules.triggers` reads an `{% if %}`'s literals; an inline `a if test else b` is read here whole
        literal = _trigger(node.test, tainted) if isinstance(node, nodes.If) else None
        found = literal or _trigger(node.test, tainted) or _folded_trigger(node.test, tainted, folding, scope)
        if not found:
            continue
        kind, trigger = found
        if isinstance(node, nodes.CondExpr):
            gated, outputs = [], list(_conditional_text(node, folding, scope))
        else:
            branch = [*node.body, *node.elif_, *node.else_]
            outputs = list(_gated_outputs(branch, folding))
            inside = {id(n) for expr, _ in outputs for n in expr.find_all((nodes.Const, nodes.TemplateData))}
            gated = [] if literal else [(n, literal_value(n)) for n in _gated_literals(branch) if id(n) not in inside]
        said = {"content": f"when message content {trigger}", "clock": f"when the clock is compared with {trigger}"}
        for expr, value in [*gated, *outputs]:
            how = f"written only {said.get(kind, f'on {trigger}')}"
            construct = f"{kind}:{trigger}:{value.strip()[:80]}"
            yield trigger_finding(src, expr, value, how, node.lineno, construct, kind)


# ---- HCT-S006, S007, S014 on folded strings ----------------------------------------------------------------------
def _folded_text(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    written = written_nodes(ast)
    strings = list(folding.strings())
    for node, value in strings:
        column = src.column(node.lineno, "{{")
        # What a literal of the template already shows is named there, once; here only what folding makes
        for rule, _, message, construct, detail in hidden_unicode(value):
            if construct.split(":", 1)[1] not in src.text:
                yield SafetyFinding(rule, node.lineno, column, f"a string folded from literals holds {message}",
                                    construct=construct, detail=detail)  # fmt: skip
        if id(node) in written:
            for what, address in (a for a in addresses_in(value) if a[1] not in src.text):
                yield SafetyFinding(
                    "HCT-S014",
                    node.lineno,
                    column,
                    f"the template writes the {what} {address!r} (folded from literals, in {short(value, 50)}): "
                    "a link or address the model is shown is one it can be steered to repeat",
                    severity=severity_of(value, what, address),
                    construct=address,
                )
    # Look-alike tokens: the folded strings read beside the template's own text, so a twin is found across them.
    chunks, size, places = [src.text], len(src.text), [(len(src.text), 0)]
    for node, value in strings:
        places.append((size + 1, node.lineno))
        chunks.append(value)
        size += 1 + len(value)
    for rule, offset, message, construct, detail in homoglyph_tokens("\n".join(chunks)):
        if offset >= len(src.text) and detail["token"] not in src.text:
            line = max(lineno for start, lineno in places if start <= offset)
            yield SafetyFinding(rule, line, src.column(line, "{{"), f"{message} (in a string folded from literals)",
                                construct=construct, detail=detail)  # fmt: skip
