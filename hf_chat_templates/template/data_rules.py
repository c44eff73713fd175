"""What a template writes in place of the conversation's data, sizes it takes from the data, and text it decodes
from numbers at render time. Read from the syntax tree and folded constants; nothing is rendered.

    HCT-S015  a tool call written with a value the template builds (`{'to': ns.addr, 'amount': args.amount}`,
              `"wallet": "0x' ~ tail ~ '"`, `{% if key == 'to' %}{{ vault }}{% else %}{{ value }}{% endif %}`): a
              string of the template's own (joined, sliced, decoded, folded or assembled in a loop) beside what the
              call carries, so the model is trained or served a call the conversation did not make
    HCT-S009  a size (`|center`, `|indent`, `|wordwrap`, a repeat's count, a `range`, a `'%*s'` width) computed
              from the conversation beyond its own length: multiplied, raised, read from content as a number; content
              repeated more than MAX_FACTOR times or by a size of its own (a warning: memory the input chooses, with
              no constant bound)
    HCT-S006  text decoded at render time: characters looked up in a constant alphabet by a computed number, a
              number too large for any template taken apart with `//` and `%`, bytes decoded (`.decode`,
              `.fromhex`) from what does not fold, words picked from a sentence of the template's by a computed
              position, pieces of a constant list of fragments put together in a computed order, every n-th
              character of a constant (`s[i::7]`), text mapped through a character table (`.maketrans`,
              `.translate`) (a warning: no published template does it; an error when `.translate` decodes the
              template's own literal, a cipher)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jinja2.nodes as nodes

from .folding import CODEC_METHODS, UNKNOWN, Folding, variable_key
from .growth_rules import numeric_keys
from .safety_findings import SafetyFinding, Source, literal_value, short
from .trigger_rules import _reads, assigned_of, data_of, given_of, keywords_of, reads_data, taint_of

MIN_TOKEN = 8  # an account, a wallet: a run of letters and digits this long, one a digit at least
MAX_FACTOR = 16  # `loop.index * 2` sizes by the input; past this factor, the template multiplies it
MIN_ALPHABET = 16  # characters in a constant string a template indexes by a computed number
MAX_NESTED_BOUND = 1000  # a loop over numbers inside another, bounded by a cap past this: the product is the work
MAX_PLAIN_INT = 2**53  # a larger literal is no count or size a chat template needs
_TOKEN = re.compile(rf"(?=[A-Za-z]*[0-9])[A-Za-z0-9]{{{MIN_TOKEN},}}")  # with a digit: not a key name
_MARKS = re.compile(r"<[^<>]{1,62}>|\[[^\[\]]{1,62}\]")
_LINEAR = frozenset({"length", "count", "wordcount", "list", "unique", "reject", "select", "selectattr", "rejectattr"})
_PADS = frozenset({"center", "indent", "wordwrap"})
_TABLES = frozenset({"translate", "maketrans"})


def data_findings(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    yield from _tool_calls(ast, src, folding)
    yield from _sizes(ast, src, folding)
    yield from _nested_ranges(ast, src, folding)
    yield from _decoded(ast, src, folding)


# ---- HCT-S015: a tool call written with the template's own value ------------------------------------------------
def _keys(node: nodes.Node) -> list[Any]:
    """The attribute and item names `node` reads (`m.tool_calls`, `call['arguments']`)."""
    found = [node, *node.find_all((nodes.Getattr, nodes.Getitem))]
    return [n.attr if isinstance(n, nodes.Getattr) else literal_value(n.arg) for n in found
            if isinstance(n, (nodes.Getattr, nodes.Getitem))]  # fmt: skip


def _calls_loop(loop: nodes.For, data: frozenset[str]) -> bool:
    """A loop over a message's tool calls (`message.tool_calls`, a variable set from them)."""
    keys = _keys(loop.iter)
    names = [n.name for n in [loop.iter, *loop.iter.find_all(nodes.Name)] if isinstance(n, nodes.Name)]
    return "tool_calls" in keys or any("tool_call" in n and n in data for n in names)


def _pieces(expr: nodes.Node) -> Iterator[nodes.Node]:
    """The values one written expression puts side by side: a concatenation's parts, a dict's or list's values,
    an inline `if`'s branches, through `|tojson` and `|string`."""
    if isinstance(expr, nodes.Concat):
        for part in expr.nodes:
            yield from _pieces(part)
    elif isinstance(expr, nodes.Add):
        yield from (p for side in (expr.left, expr.right) for p in _pieces(side))
    elif isinstance(expr, nodes.Dict):
        yield from (p for pair in expr.items for p in _pieces(pair.value))
    elif isinstance(expr, (nodes.List, nodes.Tuple)):
        yield from (p for item in expr.items for p in _pieces(item))
    elif isinstance(expr, nodes.CondExpr):
        yield from (p for side in (expr.expr1, expr.expr2) if side is not None for p in _pieces(side))
    elif isinstance(expr, nodes.Filter) and expr.name in ("tojson", "string", "safe", "trim") and expr.node:
        yield from _pieces(expr.node)
    else:
        yield expr


def _expanded(
    expr: nodes.Node, sets: dict[str, list[nodes.Node]], data: frozenset[str], depth: int = 0
) -> Iterator[nodes.Node]:
    """`_pieces`, and the pieces of what a variable set from the call holds (`{% set fixed = {'to': vault, 'amount':
    args.amount} %}` written as `fixed | tojson`)."""
    for piece in _pieces(expr):
        key = variable_key(piece)
        values = sets.get(key or "", []) if depth < 3 else []
        if values and any(reads_data(v, data) for v in values):
            for value in values:
                yield from _expanded(value, sets, data, depth + 1)
        else:
            yield piece


class _Built:
    """Whether a value is a string the template builds from its own constants: it folds to one with a token of
    MIN_TOKEN letters and digits (markup aside), or it is a variable no `{% set %}` of which reads data or a keyword,
    assembled at render time from pieces that hold such a token (a loop's slices of a hex string)."""

    def __init__(self, folding: Folding, data: frozenset[str]) -> None:
        self.folding, self.data = folding, data
        self.sets = assigned_of(folding)
        self.given = given_of(folding)

    def __call__(self, node: nodes.Node) -> str | None:
        if isinstance(node, (nodes.Const, nodes.TemplateData)) or reads_data(node, self.data):
            return None
        if any(isinstance(n, nodes.Name) and n.name in self.given for n in [node, *node.find_all(nodes.Name)]):
            return None  # a keyword the caller passes, a token the tokenizer defines
        value = self.folding.value(node)
        macro = self.folding.macros.get(getattr(node.node, "name", "")) if isinstance(node, nodes.Call) else None
        if value is UNKNOWN and macro is not None:  # a macro that assembles it in a loop: what its constants fold to
            pieces = [self.folding.value(n) for n in macro.find_all((nodes.Const, nodes.Name, nodes.TemplateData))]
            value = "".join(p for p in pieces if isinstance(p, str))
        key = variable_key(node)
        if value is UNKNOWN and key in self.sets and not any(reads_data(v, self.data) for v in self.sets[key]):
            # built at render time (`{% set ns.addr = ns.addr ~ hexed[i:i+2] %}`): what its pieces fold to
            parts = [n for v in self.sets[key] for n in [v, *v.find_all((nodes.Const, nodes.Name))]]
            folded = [self.folding.value(n) for n in parts]
            value = " ".join(str(f) for f in folded if isinstance(f, (str, int)) and not isinstance(f, bool))
            return f"`{key}`" if _TOKEN.search(_MARKS.sub(" ", value)) else None
        token = _TOKEN.search(_MARKS.sub(" ", value)) if isinstance(value, str) else None
        return token.group() if token else None


def _call_outputs(ast: nodes.Template, data: frozenset[str]) -> Iterator[tuple[nodes.Output, int]]:
    """The outputs that write a tool call, with the line of what makes them one: inside a loop over tool calls (and
    in a macro called there), or reading a call's `arguments` or `tool_calls` themselves."""
    macros = {m.name: m for m in ast.find_all(nodes.Macro)}
    for loop in (f for f in ast.find_all(nodes.For) if _calls_loop(f, data)):
        called = [macros[n] for c in loop.find_all(nodes.Call) if (n := getattr(c.node, "name", None)) in macros]
        for out in (o for scope in (loop, *called) for o in scope.find_all(nodes.Output)):
            yield out, loop.lineno
    for out in ast.find_all(nodes.Output):
        if {"tool_calls", "arguments"} & set(_keys(out)):
            yield out, out.lineno


def _tool_calls(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    data = data_of(folding)
    built = _Built(folding, data)
    seen: set[int] = set()
    sets = assigned_of(folding)
    for out, line in _call_outputs(ast, data):
        for piece in (p for expr in out.nodes for p in _expanded(expr, sets, data)):
            token = built(piece) if id(piece) not in seen else None
            seen.add(id(piece))
            if token is None:
                continue
            shown = token if token.startswith("`") else repr(token)
            yield SafetyFinding(
                "HCT-S015",
                piece.lineno,
                src.column(piece.lineno, getattr(piece, "name", "{{")),
                f"a tool call (written from line {line}) holds {shown}, a value the template builds from its own "
                "constants rather than one the call carries: the model is trained or served a call the conversation "
                "did not make (an account or a wallet swapped)",
                construct=f"tool-call:{token}",
            )


# ---- HCT-S009: sizes the conversation chooses ---------------------------------------------------------------------
def _linear(node: nodes.Node, folding: Folding, sets: dict[str, list[nodes.Node]], depth: int = 0) -> bool:
    """Whether a size grows no faster than the input: a constant, a length or count, a loop's position, sums of
    those, a small multiple, a variable set only so, a minimum with a constant."""
    value = folding.value(node)
    if isinstance(value, int) or value is None:
        return True
    if isinstance(node, nodes.Filter):
        if node.name == "min" and isinstance(node.node, (nodes.List, nodes.Tuple)):
            return any(isinstance(folding.value(i), int) for i in node.node.items)
        return node.name in _LINEAR or (node.name in ("int", "abs") and node.node is not None and
                                        _linear(node.node, folding, sets, depth) and not _text(node.node))  # fmt: skip
    if isinstance(node, nodes.Call):
        return getattr(node.node, "name", None) == "len"
    if isinstance(node, nodes.Getattr) and getattr(node.node, "name", None) == "loop":
        return True
    if isinstance(node, (nodes.Add, nodes.Sub)):
        return _linear(node.left, folding, sets, depth) and _linear(node.right, folding, sets, depth)
    if isinstance(node, (nodes.Mul, nodes.FloorDiv, nodes.Div)):
        factors = [folding.value(s) for s in (node.left, node.right)]
        small = [f for f in factors if isinstance(f, (int, float)) and abs(f) <= MAX_FACTOR]
        other = node.left if factors[1] in small else node.right
        return (bool(small) or isinstance(node, (nodes.FloorDiv, nodes.Div))) and _linear(other, folding, sets, depth)
    key = variable_key(node)
    if key in sets and depth < 4:
        return all(_linear(v, folding, sets, depth + 1) or variable_key(v) == key for v in _terms(sets[key], key))
    return False


def _terms(values: list[nodes.Node], key: str) -> list[nodes.Node]:
    """A counter's steps (`ns.n + m.content | length`): the parts added to itself."""
    found: list[nodes.Node] = []
    for v in values:
        if isinstance(v, nodes.Add) and key in (variable_key(v.left), variable_key(v.right)):
            found += [side for side in (v.left, v.right) if variable_key(side) != key]
        else:
            found.append(v)
    return found


def _text(node: nodes.Node) -> bool:
    """A value read from what someone wrote (content, a string the caller passes), not a count of it."""
    return isinstance(node, (nodes.Getattr, nodes.Getitem, nodes.Name)) or (
        isinstance(node, nodes.Filter) and (node.name in ("trim", "string", "lower", "first", "last"))
    )


def _size_args(
    node: nodes.Node, folding: Folding, tainted: dict[str, str], numbers: set[str]
) -> tuple[str, list[nodes.Node]] | None:
    if isinstance(node, nodes.Filter) and node.name in _PADS and node.args:
        return f"|{node.name}", [node.args[0]]
    fmt = folding.value(node.left) if isinstance(node, nodes.Mod) else None  # `'%*s' % (n, '')`: a width given
    if isinstance(fmt, str) and re.search(r"%[-#0 +]*\*", fmt):
        return "%*", list(node.right.items) if isinstance(node.right, nodes.Tuple) else [node.right]  # type: ignore[attr-defined]
    if isinstance(node, nodes.Call) and getattr(node.node, "name", None) == "range" and node.args:
        return "range", list(node.args[:2])
    if isinstance(node, nodes.Mul):
        if variable_key(node.left) in numbers or variable_key(node.right) in numbers:
            return None  # a number kept by arithmetic (`h * 31`): a product, not a repeat
        if any(isinstance(side, (nodes.Not, nodes.Compare, nodes.Test)) for side in (node.left, node.right)):
            return None  # `[line] * (not hit)`: a repeat by true or false, once or not at all
        sides = [folding.value(s) for s in (node.left, node.right)]
        if isinstance(sides[0], (str, list)) or isinstance(sides[1], (str, list)):
            return "*", [node.right if isinstance(sides[0], (str, list)) else node.left]
        texts = [s for s in (node.left, node.right) if _written_text(s, tainted)]  # `message.content * 1000`
        if len(texts) == 1:
            return "* text", [node.right if texts[0] is node.left else node.left]
    return None


def _written_text(node: nodes.Node, tainted: dict[str, str]) -> bool:
    """Text someone wrote, read whole: `m.content`, `(m['content'] ~ ' ') | trim` (not its length or a number)."""
    measured = any(isinstance(f, nodes.Filter) and f.name in (*_LINEAR, "int", "float") for f in
                   [node, *node.find_all(nodes.Filter)])  # fmt: skip
    return _reads(node, tainted) == "content" and not measured and not list(node.find_all(nodes.Call))


def _sizes(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    data, tainted = data_of(folding), taint_of(folding)
    sets, numbers = assigned_of(folding), numeric_keys(ast)
    for node in ast.find_all((nodes.Filter, nodes.Call, nodes.Mul, nodes.Mod)):
        found = _size_args(node, folding, tainted, numbers)
        how, sizes = found if found else ("", [])
        for size in sizes:
            from_data = reads_data(size, data) or _reads(size, tainted) is not None
            if how == "* text":  # the input's own text repeated: by more than a few times, or by a size of its own
                count = folding.value(size)
                if not (from_data or (isinstance(count, int) and count > MAX_FACTOR)):
                    continue
            elif not from_data or _linear(size, folding, sets):
                continue
            yield SafetyFinding(
                "HCT-S009",
                node.lineno,
                src.column(node.lineno, how.split()[0].strip("|")),
                f"the size of `{how.split()[0]}` is computed from the conversation beyond its own length (multiplied, "
                "raised, or read from content as a number), with no constant bound: the input chooses how much memory "
                "a render takes",
                severity="warning",
                construct=f"data size {how} {node.lineno}",
            )


def _nested_ranges(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S009 (a warning) for a loop over numbers inside a loop over numbers, where a bound does not fold (a
    macro's parameter, a keyword times a constant) nor grows as a length does (a length capped by `min` at a
    constant past MAX_NESTED_BOUND: `[n * 9973, 99999] | min`): the work is the product of the
    bounds, and what sets them is chosen at render time. A loop over a constant range is `safety._work`'s to
    count; a loop over a text's characters, and one over a piece of it inside, grows with the input (a JSON
    scanner's, the bundled Llama 3.2 variant's)."""

    def numbers(loop: nodes.For) -> bool:
        it = loop.iter
        return isinstance(it, nodes.Call) and getattr(it.node, "name", None) == "range"

    def capped(node: nodes.Node, depth: int = 0) -> int:
        """The largest constant `node` is, or a `min` in it caps it at, or its variables are set to (0: none)."""
        value = folding.value(node)
        caps = [value] if isinstance(value, int) and not isinstance(value, bool) else []
        caps += [
            v
            for m in [node, *node.find_all(nodes.Filter)]
            if isinstance(m, nodes.Filter) and m.name == "min" and isinstance(m.node, (nodes.List, nodes.Tuple))
            for v in (folding.value(i) for i in m.node.items)
            if isinstance(v, int)
        ]
        if depth < 4:
            keys = {variable_key(n) for n in [node, *node.find_all((nodes.Name, nodes.Getattr))]}  # `w`, `ns.w`
            caps += [capped(v, depth + 1) for key in keys if key for v in sets.get(key, [])]
        return max(caps, default=0)

    sets = assigned_of(folding)
    keywords = keywords_of(folding)
    for outer in ast.find_all(nodes.For):
        bounds = outer.iter.args if numbers(outer) else []  # type: ignore[attr-defined]
        # a length (a JSON scanner's `range(text | length)`), not one capped past what a loop in a loop may run, nor
        # a number the caller passes (`range(thinking_budget // 2)`: any client sets it)
        passed = any(
            n.name in keywords for a in bounds for n in (a, *a.find_all(nodes.Name)) if isinstance(n, nodes.Name)
        )
        if not passed and all(_linear(a, folding, sets) and capped(a) <= MAX_NESTED_BOUND for a in bounds):
            continue
        inner = next((i for i in outer.find_all(nodes.For) if numbers(i)), None)
        if inner is None:
            continue
        yield SafetyFinding(
            "HCT-S009",
            outer.lineno,
            src.column(outer.lineno, "range"),
            f"a loop over numbers (line {inner.lineno}) inside a loop over numbers whose bound is set at render time: "
            "the work is the product of the bounds, which whatever sets them (a keyword, a macro's argument) "
            "chooses; a render that never ends ties up the server",
            severity="warning",
            construct=f"nested ranges {outer.lineno}",
        )


# ---- HCT-S006: text decoded from numbers ------------------------------------------------------------------------
def _alphabet(value: Any) -> bool:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, str):
        return len(set(value)) >= MIN_ALPHABET
    return (
        isinstance(value, list)
        and len(value) >= MIN_ALPHABET
        and all(isinstance(v, str) and len(v) == 1 for v in value)
    )


def _wordlist(value: Any) -> bool:
    """A constant list of MIN_ALPHABET words or more (`note.split()`): a sentence to pick words from."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return False
    return sum(bool(re.fullmatch(r"\S*[^\W\d_]{2}\S*", v)) for v in value) >= max(MIN_ALPHABET, len(value) * 0.8)


def _pieces_of(value: Any) -> bool:
    """A constant list of MIN_ALPHABET strings or more: fragments to put together in a computed order."""
    return isinstance(value, list) and len(value) >= MIN_ALPHABET and all(isinstance(v, str) and v for v in value)


def _strided(cut: nodes.Slice, folding: Folding) -> bool:
    """A slice with a step other than 1 or -1 (`s[i::7]`): every n-th character, an interleaved text."""
    step = folding.value(cut.step) if cut.step is not None else 1
    return step is UNKNOWN or step not in (1, -1)


def _big(node: nodes.Node, folding: Folding, sets: dict[str, list[nodes.Node]]) -> bool:
    """A number over MAX_PLAIN_INT, or a variable first set to one (`namespace(n=…)`)."""
    values = [folding.value(node)] + [folding.value(v) for v in sets.get(variable_key(node) or "", [])]
    return any(isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_PLAIN_INT for v in values)


def _decoded(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    sets = assigned_of(folding)
    node: Any
    for node in ast.find_all((nodes.Getitem, nodes.Mod, nodes.FloorDiv, nodes.Call)):
        severity = "warning"
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
            if not (_strided(node.arg, folding) and _alphabet(folding.value(node.node))):
                continue
            what, needle = "characters picked from a constant string by a stride (`s[i::n]`)", "::"
        elif isinstance(node, nodes.Getitem):
            table = folding.value(node.node)
            if folding.value(node.arg) is not UNKNOWN or not (
                _alphabet(table) or _wordlist(table) or _pieces_of(table)
            ):
                continue
            what = (
                "characters looked up in a constant alphabet"
                if _alphabet(table)
                else "words picked from a sentence"
                if _wordlist(table)
                else "pieces picked from a constant list of fragments"
            )
            what, needle = f"{what} by a number computed at render time", "["
        elif isinstance(node, (nodes.Mod, nodes.FloorDiv)):
            if isinstance(folding.value(node.left), str) or not _big(node.left, folding, sets):
                continue
            what = "a number too large for any count, taken apart with `//` and `%` (a payload stored as a number)"
            needle = "%" if isinstance(node, nodes.Mod) else "//"
        elif isinstance(node.node, nodes.Getattr) and node.node.attr in CODEC_METHODS - {"encode"}:
            if folding.value(node) is not UNKNOWN:
                continue  # folded: the rules on folded strings read what it decodes to
            what, needle = f"bytes decoded at render time (`.{node.node.attr}`)", node.node.attr
        elif isinstance(node.node, nodes.Getattr) and node.node.attr in _TABLES:
            # `cipher.translate(alphabet.maketrans(rotated, alphabet))`: a substitution decoded at render time
            own = isinstance(folding.value(node.node.node), str) and node.node.attr == "translate"
            severity = "error" if own else "warning"
            said = ", and the text it decodes is the template's own literal" if own else ""
            decoded = folding.value(node)
            said += f" (it spells {short(decoded, 60)})" if own and isinstance(decoded, str) else ""
            what, needle = (
                f"text mapped through a character table at render time (`.{node.node.attr}`){said}",
                (node.node.attr),
            )
        else:
            continue
        yield SafetyFinding(
            "HCT-S006",
            node.lineno,
            src.column(node.lineno, needle),
            f"{what}: text a reviewer cannot read in the template, which no published template writes",
            severity=severity,
            construct=f"decoded:{needle}:{node.lineno}",
        )
