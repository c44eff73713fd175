"""HCT-S009 for work that grows exponentially: a variable concatenated with itself in a loop (`{% set ns.s = ns.s ~
ns.s %}` inside `{% for i in range(40) %}`: 2**40 characters), repeated by a constant (`{% set s = s * 3 %}`),
padded to a multiple of its own length, or a string repeated by a product of constants too large to hold. Found
statically, from the growth factor and the loops' bounds, never by rendering; whether or not a condition gates it
(a trigger that arms a bomb is a bomb).

A variable that grows by a factor `k` per step in loops of `n` steps in all reaches `k**n` times its size: over
`MAX_GROWTH` is an error. A loop over the conversation (`for m in messages`) has no constant bound: growth per item
is exponential in the conversation's length, and is an error too."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import jinja2.nodes as nodes

from .folding import Folding, variable_key
from .safety_findings import SafetyFinding, Source

MAX_GROWTH = 100_000  # times its size a variable may grow in one render (as `MAX_REPEAT_CHARS` for a repeat)
_SIZES = frozenset({"length", "count", "wordcount", "first", "last", "random"})
_PADS = frozenset({"center", "indent", "wordwrap", "truncate", "batch"})


def _reads(node: nodes.Node, key: str, replaced: str | None = None) -> int:
    """How many times `node` writes the value of `key` into what it computes: not its size (`s | length`), not a
    test, a condition or a subscript's key; not the part `key.replaced` in the new value of the very field it is
    (`dict(d, k=d.k ~ x)` keeps d's size, whatever x)."""
    if replaced is not None and _part(node, key) == replaced:
        return 0
    if variable_key(node) == key and not (isinstance(node, nodes.Name) and node.ctx != "load"):
        return 1
    if isinstance(node, nodes.Call) and getattr(node.node, "name", None) == "dict" and _dict_of(node, key):
        fields = sum(_reads(kw.value, key, kw.key) for kw in node.kwargs)  # `dict(d, k=…)`: d, its field k replaced
        rest = [*node.args[1:], *(n for n in (node.dyn_args, node.dyn_kwargs) if n is not None)]
        return 1 + fields + sum(_reads(n, key) for n in rest)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice) and _few(node.arg):
        return 0  # `s[-1:]`, `s[:3]`: a few items of it, not a copy
    if isinstance(node, (nodes.Compare, nodes.Test)) or (isinstance(node, nodes.Filter) and node.name in _SIZES):
        return 0
    if isinstance(node, nodes.Call) and getattr(node.node, "name", None) == "len":
        return 0
    skipped = {id(node.test)} if isinstance(node, nodes.CondExpr) else set()
    if isinstance(node, nodes.Getitem):
        skipped.add(id(node.arg))
    if isinstance(node, nodes.CondExpr):  # one branch is taken: the larger
        return max(_reads(b, key, replaced) for b in (node.expr1, node.expr2) if b is not None)
    return sum(_reads(c, key, replaced) for c in node.iter_child_nodes() if id(c) not in skipped)


def _dict_of(call: nodes.Call, key: str) -> bool:
    return bool(call.args) and variable_key(call.args[0]) == key


def _few(cut: nodes.Slice, most: int = 16) -> bool:
    """A slice of at most `most` items, whatever it is taken from: constant bounds `[a:b]`, or `[-k:]`."""
    start, stop = (_integer(n) for n in (cut.start, cut.stop))
    if cut.step is not None or isinstance(start, nodes.Node) or isinstance(stop, nodes.Node):
        return False
    if isinstance(start, int) and start < 0 and stop is None:
        return -start <= most
    begin = 0 if start is None else start
    return isinstance(begin, int) and isinstance(stop, int) and 0 <= begin <= stop and stop - begin <= most


def _integer(node: nodes.Node | None) -> Any:
    """A slice bound's constant (`-1` parses as a negation of 1), None for none, else the node itself."""
    if isinstance(node, nodes.Neg) and isinstance(node.node, nodes.Const) and isinstance(node.node.value, int):
        return -node.node.value
    return node.value if isinstance(node, nodes.Const) else node


def _part(node: nodes.Node, key: str) -> str | None:
    """`k` for `key.k` or `key['k']`: a field of the variable's value."""
    if isinstance(node, nodes.Getattr) and variable_key(node.node) == key:
        return node.attr
    if isinstance(node, nodes.Getitem) and variable_key(node.node) == key and isinstance(node.arg, nodes.Const):
        return str(node.arg.value)
    return None


_ARITHMETIC = (nodes.Add, nodes.Sub, nodes.Mul, nodes.Mod, nodes.FloorDiv, nodes.Div, nodes.Neg, nodes.Pos)
_NUMBER_FILTERS = frozenset({"int", "float", "length", "count", "abs", "round"})


def _arithmetic(node: nodes.Node) -> bool:
    """Arithmetic on numbers only: no string constant outside a comparison, no `**`, no filter that makes text.
    Started from a number, such a value stays one: `+` of a string to it raises rather than concatenates."""
    if isinstance(node, nodes.Const):
        return isinstance(node.value, (int, float))
    if isinstance(node, (nodes.Compare, nodes.Test)):
        return True  # a boolean, whatever it compares
    if isinstance(node, nodes.Filter):
        return node.name in _NUMBER_FILTERS
    if isinstance(node, (nodes.Name, nodes.NSRef, nodes.Getattr, nodes.Getitem)):
        return True
    if isinstance(node, nodes.Call):  # `s.find(c)`, `s.count(c)`, `len(s)`: a number
        method = node.node.attr if isinstance(node.node, nodes.Getattr) else getattr(node.node, "name", None)
        return method in ("find", "rfind", "index", "rindex", "count", "len")
    if isinstance(node, nodes.CondExpr):
        return all(_arithmetic(n) for n in (node.expr1, node.expr2) if n is not None)
    return isinstance(node, _ARITHMETIC) and all(_arithmetic(c) for c in node.iter_child_nodes())


def numeric_keys(ast: nodes.Template) -> set[str]:
    """Variables that hold a number for the whole render: first set to a number (`{% set h = 0 %}`,
    `namespace(v=0)`) and only ever set again by arithmetic. Multiplying one by a constant grows its digits by a
    constant, not its size by a factor."""
    values: dict[str, list[nodes.Node]] = {}
    assign: Any
    for assign in ast.find_all((nodes.Assign, nodes.AssignBlock)):
        key = variable_key(assign.target)
        if key is None:
            continue
        value = getattr(assign, "node", None)
        if isinstance(value, nodes.Call) and getattr(value.node, "name", None) == "namespace":
            for kw in value.kwargs:
                values.setdefault(f"{key}.{kw.key}", []).append(kw.value)
        values.setdefault(key, []).append(value if value is not None else nodes.Const("block"))
    return {
        k
        for k, vs in values.items()
        if any(isinstance(v, nodes.Const) and isinstance(v.value, (int, float)) for v in vs)
        and all(_arithmetic(v) for v in vs)
    }


def _modular(value: nodes.Node, folding: Folding) -> bool:
    """`(h * 31 + c) % 1000003`: a number kept below a constant (a hash), which no factor grows; a string literal
    on its left would make it a format instead."""
    if not (isinstance(value, nodes.Mod) and isinstance(folding.value(value.right), int)):
        return False
    return not any(isinstance(c.value, str) for c in value.left.find_all(nodes.Const))


def _spliced(value: nodes.Node, key: str) -> int:
    """How many head and tail slices of `key` pair up in `value` (`s[:i] + '</think>' + s[i:]`, text put in the
    middle): each pair is one copy of `key`, not two."""
    cuts = [
        n.arg
        for n in value.find_all(nodes.Getitem)
        if variable_key(n.node) == key and isinstance(n.arg, nodes.Slice) and n.arg.step is None
    ]
    heads = sum(c.start is None and c.stop is not None for c in cuts)
    tails = sum(c.start is not None and c.stop is None for c in cuts)
    return min(heads, tails)


def _factor(
    value: nodes.Node | list[nodes.Node], key: str, folding: Folding, numbers: frozenset[str] = frozenset()
) -> float:
    """How many times over an assignment of `value` to `key` makes `key` (1 when it does not grow with itself)."""
    if isinstance(value, list):  # `{% set s %}{{ s }}{{ s }}{% endset %}`
        return float(sum(_reads(n, key) for n in value)) or 1.0
    if _modular(value, folding) or (key in numbers and _reads(value, key) <= 1):
        return 1.0
    factor = float(_reads(value, key) - _spliced(value, key))
    for node in (value, *value.find_all((nodes.Mul, nodes.Filter, nodes.Call))):
        if isinstance(node, nodes.Mul) and (_reads(node.left, key) or _reads(node.right, key)):
            count = [folding.value(side) for side in (node.left, node.right)]
            factor *= max((c for c in count if isinstance(c, int) and not isinstance(c, bool)), default=1)
        elif (replaced := replace_args(node)) is not None:  # `s | replace('x', 'xx')`, `s.replace('x', 'xx')`
            base, args = replaced
            old, new = (folding.value(a) for a in args[:2])
            if _reads(base, key) and isinstance(old, str) and isinstance(new, str) and old and old in new:
                factor *= len(new) / len(old)
            elif _reads(base, key) and _empty(args[0], folding) and (new or _reads(args[1], key)):
                # `s | replace(s[:0], s)`: the new text written before every character and after the last, as
                # many times as the text is long: ten for a word, counted as ten
                factor *= 10

        elif isinstance(node, nodes.Filter) and node.name in _PADS and node.args and node.node is not None:
            width = node.args[0]  # `s | center(s | length * 2)`: padded to a multiple of its own size
            if _reads(node.node, key) and _sized_by(width, key):
                count = [folding.value(n) for n in width.find_all(nodes.Const)]
                factor = max(factor, max((c for c in count if isinstance(c, int) and c >= 2), default=1))
    return factor


def _empty(node: nodes.Node, folding: Folding) -> bool:
    """Whether `node` is the empty string whatever the data: `''` folded, or a slice that takes nothing (`s[:0]`)."""
    if folding.value(node) == "":
        return True
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        start = folding.value(node.arg.start) if node.arg.start is not None else 0
        stop = folding.value(node.arg.stop) if node.arg.stop is not None else None
        return isinstance(stop, int) and start == stop and node.arg.step is None
    return False


def replace_args(node: nodes.Node) -> tuple[nodes.Expr, list[nodes.Expr]] | None:
    """(what is replaced in, the arguments) for `s | replace(a, b)` or `s.replace(a, b)`."""
    if isinstance(node, nodes.Filter) and node.name == "replace" and len(node.args) >= 2 and node.node is not None:
        return node.node, node.args
    if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and node.node.attr == "replace":
        return (node.node.node, node.args) if len(node.args) >= 2 else None
    return None


def _sized_by(node: nodes.Node, key: str) -> bool:
    return any(
        isinstance(f, nodes.Filter)
        and f.name in ("length", "count")
        and f.node is not None
        and variable_key(f.node) == key
        for f in (node, *node.find_all(nodes.Filter))
    )


def _steps(loop: nodes.For, folding: Folding) -> float:
    """The iterations of a loop over a constant range or list; inf for one over the conversation or a keyword."""
    values = folding.loop_values(loop)
    try:
        return math.inf if values is None else float(len(values))
    except OverflowError:  # `range(2**64)`: `safety._work` names it
        return math.inf


def growth(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S009: a variable that grows with itself past MAX_GROWTH times (or per item of an unbounded loop), in
    the template's loops or in a macro's body at each call; and a macro that calls itself with its argument
    doubled."""
    macros = {m.name: m for m in ast.find_all(nodes.Macro)}
    numbers = frozenset(numeric_keys(ast))
    # variable -> [(growth factor of one assignment, (all its passes, the passes of constant loops), assignment)]
    grown: dict[str, list[tuple[float, tuple[float, float], nodes.Node]]] = {}

    # steps: (all the passes, inf past a loop with no constant bound; the passes of the constant loops alone)
    def walk(node: nodes.Node, steps: tuple[float, float], inside: tuple[str, ...]) -> None:
        for child in node.iter_child_nodes():
            if isinstance(child, nodes.Macro):
                continue  # read where it is called
            if isinstance(child, nodes.For):
                walk(child.iter, steps, inside)
                passes = _steps(child, folding)
                inner = (steps[0] * passes, steps[1] * (1.0 if math.isinf(passes) else passes))
                for stmt in child.body:
                    visit(stmt, inner, inside)
                for stmt in child.else_:
                    visit(stmt, steps, inside)
            else:
                visit(child, steps, inside)

    def visit(node: nodes.Node, steps: tuple[float, float], inside: tuple[str, ...]) -> None:
        if isinstance(node, (nodes.Assign, nodes.AssignBlock)) and (key := variable_key(node.target)):
            factor = _factor(node.body if isinstance(node, nodes.AssignBlock) else node.node, key, folding, numbers)
            if factor > 1:
                grown.setdefault(key, []).append((factor, steps, node))
        name = getattr(node.node, "name", None) if isinstance(node, nodes.Call) else None
        if name in macros and name not in inside and len(inside) < 4:  # the macro's body, where it is called
            for stmt in macros[name].body:
                visit(stmt, steps, (*inside, name))
        walk(node, steps, inside)

    walk(ast, (1.0, 1.0), ())
    for key, entries in grown.items():
        factor, _, node = max(entries, key=lambda e: e[0])
        size = sum(bounded * math.log10(f) for f, (_, bounded), _ in entries)
        if size > math.log10(MAX_GROWTH):
            passes = sum(bounded for _, (_, bounded), _ in entries)
            how = f"grows {factor:g}-fold on each of {passes:,.0f} passes: about 10**{size:,.0f} times its size"
        elif any(math.isinf(steps) for _, (steps, _), _ in entries):
            how = f"grows {factor:g}-fold on every pass of a loop with no constant bound: exponential in the input"
        else:
            continue
        yield SafetyFinding(
            "HCT-S009",
            node.lineno,
            src.column(node.lineno, key.split(".")[-1]),
            f"`{key}` is built from itself and {how} (over {MAX_GROWTH:,}): a render that never ends or exhausts "
            "memory, whatever condition arms it",
            construct=f"growth {key} {factor:g}",
        )
    yield from _recursive_growth(macros.values(), src, folding)
    yield from _branching(macros.values(), src)


def _path_calls(body: list[nodes.Node], name: str) -> int:
    """The most calls of the macro `name` one pass through `body` makes: an `if`'s branches are alternatives, a
    loop's body is left out (one call per item of a list, as a schema's properties, is no doubling) unless the loop
    counts numbers (`for _ in range(width)`: width calls per level)."""
    total = 0
    for stmt in body:
        if isinstance(stmt, nodes.If):
            branches = [stmt.body, *(e.body for e in stmt.elif_), stmt.else_]
            total += _own_calls(stmt.test, name) + max(_path_calls(b, name) for b in branches)
        elif isinstance(stmt, nodes.For) and _counted(stmt.iter) and _path_calls(stmt.body, name):
            total += 2 * _path_calls(stmt.body, name)  # once per number of a range: range**depth, at least 2**depth
        elif isinstance(stmt, (nodes.For, nodes.Macro, nodes.CallBlock)):
            continue
        elif isinstance(stmt, (nodes.FilterBlock, nodes.AssignBlock, nodes.Scope, nodes.With)):
            total += _path_calls(stmt.body, name)
        else:
            total += _own_calls(stmt, name)
    return total


def _counted(iterable: nodes.Node) -> bool:
    """A loop over numbers (`range(width)`), not over data: a walker of a schema loops over its properties."""
    return isinstance(iterable, nodes.Call) and getattr(iterable.node, "name", None) == "range"


def _own_calls(node: nodes.Node, name: str) -> int:
    return sum(getattr(c.node, "name", None) == name for c in node.find_all(nodes.Call))


def _branching(macros: Iterable[nodes.Macro], src: Source) -> Iterator[SafetyFinding]:
    """A macro that calls itself twice or more on one path (`{{ m(n - 1) }}{{ m(n - 1) }}`): 2**depth calls, however
    the depth is computed, for output a reviewer cannot see change."""
    for macro in macros:
        calls = _path_calls(macro.body, macro.name)
        if calls < 2:
            continue
        call = next(c for c in macro.find_all(nodes.Call) if getattr(c.node, "name", None) == macro.name)
        loops = [f for f in macro.find_all(nodes.For) if _counted(f.iter) and _own_calls(f, macro.name)]
        how = (
            "once per number of a `range` on one path: the work is range**depth calls"
            if loops
            else f"{calls} times on one path: the work is {calls}**depth calls"
        )
        yield SafetyFinding(
            "HCT-S009",
            call.lineno,
            src.column(call.lineno, macro.name),
            f"the macro `{macro.name}` calls itself {how}, exponential in the depth of the recursion, which a chat "
            "template never needs",
            severity="warning",
            construct=f"branching recursion {macro.name}",
        )


def _recursive_growth(macros: Iterable[nodes.Macro], src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """A macro that calls itself with an argument built from itself twice (`m(s ~ s, n - 1)`), or that grows a
    variable with itself and calls itself (`{% set ns.s = ns.s ~ ns.s %}{{ m(k - 1) }}`): 2**depth."""
    for macro in macros:
        recursive = [c for c in macro.find_all(nodes.Call) if getattr(c.node, "name", None) == macro.name]
        sets: list[Any] = [*macro.find_all(nodes.Assign), *macro.find_all(nodes.AssignBlock)]
        for assign in sets if recursive else []:
            key = variable_key(assign.target)
            value = assign.body if isinstance(assign, nodes.AssignBlock) else assign.node
            if key and _factor(value, key, folding) > 1:
                yield SafetyFinding(
                    "HCT-S009",
                    assign.lineno,
                    src.column(assign.lineno, key.split(".")[-1]),
                    f"`{key}` is built from itself in the macro `{macro.name}`, which calls itself: each level of "
                    "recursion multiplies it, exponential in the depth",
                    construct=f"recursive growth {macro.name} {key}",
                )
        for call in recursive:
            for param, arg in zip(macro.args, call.args):
                factor = _factor(arg, param.name, folding)
                if factor > 1:
                    yield SafetyFinding(
                        "HCT-S009",
                        call.lineno,
                        src.column(call.lineno, macro.name),
                        f"the macro `{macro.name}` calls itself with `{param.name}` grown {factor:g}-fold: each level "
                        "of recursion multiplies it, exponential in the depth",
                        construct=f"recursive growth {macro.name} {param.name}",
                    )


def repeats(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S009: a value repeated more than MAX_GROWTH times (`s * 2**30`, `(s * 1000) * 1000`, `'x' * 2**i` in a
    loop over `range(40)`), a padding filter or a `range` as wide, at the largest value a loop over a constant range
    gives its variable, and `|batch` filled to such a width. A literal repeated by constants, a constant width and a
    constant range are `safety._work`'s."""
    bounds = _loop_bounds(ast, folding)
    inner = {id(c) for m in ast.find_all(nodes.Mul) for c in (m.left, m.right) if isinstance(c, nodes.Mul)}
    node: Any
    for node in ast.find_all((nodes.Mul, nodes.Filter, nodes.Call)):
        if isinstance(node, (nodes.Filter, nodes.Call)):
            yield from _wide(node, src, folding, bounds)
            continue
        if id(node) in inner:
            continue
        leaves = _leaves(node)
        counts = [_largest(leaf, folding, bounds) for leaf in leaves]
        numbers = [c for c in counts if c is not None]
        repeated = [leaf for leaf, c in zip(leaves, counts) if c is None]
        spelled = all(isinstance(folding.value(leaf), int) for leaf, c in zip(leaves, counts) if c is not None)
        literal = all(isinstance(folding.value(leaf), (str, list)) for leaf in repeated)
        if not repeated or not numbers or math.prod(numbers) <= MAX_GROWTH or (spelled and literal):
            continue
        times = math.prod(numbers)
        amount = "an astronomical number of" if math.isinf(times) else f"{times:,.0f}"
        yield SafetyFinding(
            "HCT-S009",
            node.lineno,
            src.column(node.lineno, "*"),
            f"repeats a value {amount} times (over {MAX_GROWTH:,}): a string or list of that size exhausts memory",
            construct=f"repeat {times:.0f}",
        )


def _wide(node: nodes.Filter | nodes.Call, src: Source, folding: Folding, bounds: dict[str, float]) -> Iterator[Any]:
    """A padding filter, `|batch` with a fill, or `range` wider than the bounds, at a width a loop variable gives
    (a constant width is `safety._nested_work`'s, a constant range `safety._work`'s)."""
    if isinstance(node, nodes.Filter):
        fill = node.name != "batch" or len(node.args) >= 2 or any(k.key == "fill_with" for k in node.kwargs)
        if node.name not in _PADS or not node.args or not fill:
            return
        arg, name, limit = node.args[0], node.name, MAX_GROWTH
        constant_elsewhere = node.name != "batch"  # `safety._nested_work` reads a constant padding width
    elif getattr(node.node, "name", None) == "range" and node.args:
        arg, name, limit, constant_elsewhere = node.args[-1 if len(node.args) < 3 else 1], "range", 10_000, True
    else:
        return
    width = _largest(arg, folding, bounds)
    if width is None or width <= limit or (constant_elsewhere and isinstance(folding.value(arg), int)):
        return
    amount = "an astronomical number of" if math.isinf(width) else f"{width:,.0f}"
    yield SafetyFinding(
        "HCT-S009",
        node.lineno,
        src.column(node.lineno, name),
        f"`{name}` reaches {amount} {'items' if name in ('range', 'batch') else 'characters'} (over {limit:,}) at "
        "the largest value its loop gives it",
        construct=f"{name} {width:.0f}",
    )


def _loop_bounds(ast: nodes.Template, folding: Folding) -> dict[str, float]:
    """The largest value of each loop variable over a constant range or list of numbers."""
    bounds: dict[str, float] = {}
    for loop in ast.find_all(nodes.For):
        if not isinstance(loop.target, nodes.Name):
            continue
        values = folding.loop_values(loop)
        if isinstance(values, range):
            largest = max(values.start, values.stop - 1, 0)
            bounds[loop.target.name] = float(largest) if largest.bit_length() < 1000 else math.inf
        elif values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            bounds[loop.target.name] = float(max(values))
    return bounds


def _largest(node: nodes.Node, folding: Folding, bounds: dict[str, float]) -> float | None:
    """The largest number `node` can be: a constant, a loop variable's bound, arithmetic of those; else None."""
    value = folding.value(node)
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value) if value.bit_length() < 1000 else math.inf
    if isinstance(node, nodes.Name):
        return bounds.get(node.name)
    if isinstance(node, (nodes.Pow, nodes.Mul, nodes.Add)):
        left, right = _largest(node.left, folding, bounds), _largest(node.right, folding, bounds)
        if left is None or right is None:
            return None
        if isinstance(node, nodes.Add):
            return left + right
        if isinstance(node, nodes.Mul):
            return left * right
        if left > 1 and right * math.log10(left) > 300:
            return math.inf
        return float(left**right) if left > 0 or (left == 0 and right >= 0) else None
    return None


def _leaves(node: nodes.Node) -> list[nodes.Node]:
    if isinstance(node, nodes.Mul):
        return [*_leaves(node.left), *_leaves(node.right)]
    return [node]
