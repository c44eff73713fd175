"""Constant folding on a template's syntax tree: what a template computes from literals alone, without rendering it.

A rule that reads literals misses a name or a sentence the template assembles: `['__cla', 'ss__'] | join`,
`'%c%c' | format(95, 95)`, `'__ssalc__' | reverse`, a `{% set %}` of a constant used later, a macro called with
constants, a loop over a constant list, a namespace field never set again. `Folding` evaluates those from jinja2's
nodes (nothing is compiled or rendered, and no Python method is called on anything but a constant string, list or
number), so every text rule can read the strings the template writes as well as the ones it spells.

    >>> import jinja2
    >>> ast = jinja2.Environment().parse("{% set n = ['__cla', 'ss__'] | join %}{{ x | attr(n) }}")
    >>> attr = next(f for f in ast.find_all(jinja2.nodes.Filter) if f.name == "attr")
    >>> Folding(ast).value(attr.args[0])
    '__class__'

What cannot be folded (a message's content, a keyword the caller passes) is `UNKNOWN`; so is anything past the size
bounds below, which keep `'x' * 10**9` from being computed here.
"""

from __future__ import annotations

import operator
import re
import string
from collections.abc import Callable, Iterator
from typing import Any

import jinja2.nodes as nodes

from .names import loop_targets, namespace_fields, undeclared_names, variable_key
from .sequences import CODEC_METHODS, bind, fold_codec, fold_sequence, fold_table, hashable

__all__ = ["UNKNOWN", "Folding", "undeclared_names", "variable_key"]


class _Exhausted(Exception):  # MAX_STEPS reached
    """Folding stopped: MAX_STEPS nodes were evaluated."""


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
MAX_CHARS = 65_536  # a folded string (or list) longer than this is not computed
MAX_ITEMS = 64  # loop iterations folded per constant list
MAX_DEPTH = 8  # macro calls folded within one another
MAX_STEPS = 100_000  # nodes evaluated or walked in all: past it, the rest is UNKNOWN and `exhausted` says so
_MISS = object()
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    nodes.Add: operator.add,
    nodes.Sub: operator.sub,
    nodes.Mul: operator.mul,
    nodes.Div: operator.truediv,
    nodes.FloorDiv: operator.floordiv,
    nodes.Mod: operator.mod,
}
_STRING_FILTERS: dict[str, Callable[[str], str]] = {
    "lower": str.lower,
    "upper": str.upper,
    "title": str.title,
    "capitalize": str.capitalize,
    "trim": str.strip,
    "string": str,
    "safe": str,
}
_STRING_METHODS = frozenset({"lower", "upper", "strip", "lstrip", "rstrip", "title", "capitalize", "replace"})


def _small(value: Any) -> bool:
    if isinstance(value, (str, bytes)):
        return len(value) <= MAX_CHARS
    if isinstance(value, (list, tuple, dict)):
        items = list(value.values() if isinstance(value, dict) else value)
        return (
            len(items) <= MAX_CHARS
            and sum(len(v) for v in items if isinstance(v, str)) <= MAX_CHARS
            and all(_small(v) for v in items if not isinstance(v, str))
        )
    return isinstance(value, (int, float, bool)) or value is None


def _join(separator: str, values: list[Any]) -> Any:
    texts = [_text(v) for v in values]
    return UNKNOWN if sum(map(len, texts)) + len(separator) * len(texts) > MAX_CHARS else separator.join(texts)


# A `%` conversion's width or precision: `'%999999999d' % 1` would build a string of a gigabyte.
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?")


def _percent_safe(fmt: str) -> bool:
    return all("*" not in (w + p) and int(w or 0) < 1000 and int(p or 0) < 1000 for w, p in _PERCENT_SPEC.findall(fmt))


def _text(value: Any) -> str:
    """What Jinja writes for a folded value (`{{ value }}`)."""
    return "" if value is None else str(value)


def _format_safe(fmt: str) -> bool:
    """`str.format` reads attributes and items through its fields (`{0.__class__}`): folded only without them."""
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return False
    try:
        return all(
            (not name or name.isdigit() or name.isidentifier())
            and all(int(n) < 1000 for n in re.findall(r"\d+", spec or ""))
            for _, name, spec, _ in fields
        )
    except ValueError:
        return False


class Folding:
    """The constant values of one template's expressions. `value(node, scope)` folds one node; `strings()` yields
    every non-literal expression that folds to a string, with the scopes of loops over constant lists and of macro
    calls with constant arguments."""

    def __init__(self, ast: nodes.Template) -> None:
        self.ast = ast
        self.macros = {m.name: m for m in ast.find_all(nodes.Macro)}
        self.steps = 0
        self.exhausted = False  # MAX_STEPS was reached: what was left is UNKNOWN
        self._depth = 0
        self._memo: dict[int, Any] | None = None  # values without bindings, once the constants are known
        self._sequences: dict[str, list[Any]] = {}
        self._walked: list[tuple[nodes.Node, dict[str, Any]]] | None = None
        self._strings: list[tuple[nodes.Node, str]] | None = None
        self._loops: dict[int, range | list[Any] | None] = {}
        self.cache: dict[str, Any] = {}  # what the rules compute once per template (`trigger_rules.taint_of`)
        self.constants = self._constants()
        self._memo = {}

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            self.exhausted = True
            raise _Exhausted

    def _constants(self) -> dict[str, Any]:
        """Names every `{% set %}` of which assigns one foldable value (`{% set x = … %}` or a `{% set x %}…{% endset
        %}` block without a filter), and that nothing else binds (a loop target, a macro's argument, a tuple target),
        to a fixed point (`{% set b = a ~ 'x' %}` after `a`)."""
        loops: list[Any] = [*self.ast.find_all(nodes.For), *self.ast.find_all(nodes.Macro)]
        bound = {n.name for t in loops for n in loop_targets(t)}
        sets: list[Any] = [*self.ast.find_all(nodes.Assign), *self.ast.find_all(nodes.AssignBlock)]
        bound |= {n.name for a in sets if not isinstance(a.target, nodes.Name) for n in a.target.find_all(nodes.Name)}
        bound |= {getattr(a.target, "name", "") for a in sets if isinstance(a, nodes.AssignBlock) and a.filter}
        assigns: dict[str, list[Any]] = namespace_fields(sets, bound)  # `ns.attr` of a `namespace(attr=…)` too
        for a in sets:
            if isinstance(a.target, nodes.Name) and a.target.name not in bound:
                assigns.setdefault(a.target.name, []).append(a.body if isinstance(a, nodes.AssignBlock) else a.node)
        self.constants = {}
        for _ in range(4):
            before = dict(self.constants)
            for name, exprs in assigns.items():
                values = [self._block(e) if isinstance(e, list) else self.value(e) for e in exprs]
                if values and all(v is not UNKNOWN and v == values[0] for v in values):
                    self.constants[name] = values[0]
            if self.constants == before:
                break
        return self.constants

    def _block(self, body: list[nodes.Node]) -> Any:
        try:
            found = self._body(body, {})
        except Exception:  # as in `value`
            return UNKNOWN
        return found if found is UNKNOWN or _small(found) else UNKNOWN

    # ---- one node ----------------------------------------------------------------------------------------------
    def value(self, node: nodes.Node, scope: dict[str, Any] | None = None) -> Any:
        """The constant value of `node`, or UNKNOWN."""
        try:
            found = self._value(node, scope or {})
        except Exception:  # a constant expression that would raise in Jinja too (`1 / 0`, `'%d' % 'x'`)
            return UNKNOWN
        return found if found is UNKNOWN or _small(found) else UNKNOWN

    def _value(self, node: nodes.Node, scope: dict[str, Any]) -> Any:
        self._tick()
        if scope or self._memo is None:
            return self._compute(node, scope)
        found = self._memo.get(id(node), _MISS)
        if found is _MISS:
            found = self._memo[id(node)] = self._compute(node, scope)
        return found

    def _compute(self, node: nodes.Node, scope: dict[str, Any]) -> Any:
        if isinstance(node, nodes.Const):  # a list or tuple literal too, once jinja2's compiler has visited it
            return list(node.value) if isinstance(node.value, tuple) else node.value
        if isinstance(node, nodes.TemplateData):
            return node.data
        if isinstance(node, nodes.Name):
            return scope.get(node.name, self.constants.get(node.name, UNKNOWN)) if node.ctx == "load" else UNKNOWN
        if isinstance(node, (nodes.List, nodes.Tuple)):
            return self._all([self._value(i, scope) for i in node.items])
        if isinstance(node, nodes.Dict):
            pairs = [(self._value(p.key, scope), self._value(p.value, scope)) for p in node.items]
            return UNKNOWN if any(UNKNOWN in p for p in pairs) else {hashable(k): v for k, v in pairs}
        if isinstance(node, nodes.Concat):
            parts = self._all([self._value(n, scope) for n in node.nodes])
            return parts if parts is UNKNOWN else "".join(_text(p) for p in parts)
        if isinstance(node, tuple(_BINARY)) and isinstance(node, nodes.BinExpr):
            return self._binary(node, scope)
        if isinstance(node, nodes.Pow):
            left, right = self._value(node.left, scope), self._value(node.right, scope)
            if not all(isinstance(v, int) for v in (left, right)) or abs(right) > 64 or abs(left) > 2**16:
                return UNKNOWN
            return left**right
        if isinstance(node, nodes.Neg):
            inner = self._value(node.node, scope)
            return -inner if isinstance(inner, (int, float)) else UNKNOWN
        if isinstance(node, nodes.CondExpr):
            test = self._value(node.test, scope)
            if test is UNKNOWN:
                return UNKNOWN
            branch = node.expr1 if test else node.expr2
            return self._value(branch, scope) if branch is not None else None
        if isinstance(node, nodes.Getitem):
            return self._item(node, scope)
        if isinstance(node, nodes.Getattr):  # `d.key` on a constant dict reads the item, as Jinja does
            if (key := variable_key(node)) in self.constants and str(key).split(".")[0] not in scope:
                return self.constants[key]
            base = self._value(node.node, scope)
            return base.get(node.attr, UNKNOWN) if isinstance(base, dict) else UNKNOWN
        if isinstance(node, nodes.Filter):
            return self._filter(node, scope)
        if isinstance(node, nodes.Call):
            return self._call(node, scope)
        if isinstance(node, nodes.MarkSafe):
            return self._value(node.expr, scope)
        return UNKNOWN

    @staticmethod
    def _all(values: list[Any]) -> Any:
        return UNKNOWN if any(v is UNKNOWN for v in values) else values

    def _binary(self, node: nodes.BinExpr, scope: dict[str, Any]) -> Any:
        left, right = self._value(node.left, scope), self._value(node.right, scope)
        if UNKNOWN in (left, right):
            return UNKNOWN
        if isinstance(node, nodes.Mul) and isinstance(left, (str, list)) != isinstance(right, (str, list)):
            size, count = (len(left), right) if isinstance(left, (str, list)) else (len(right), left)
            if not isinstance(count, int) or size * count > MAX_CHARS:
                return UNKNOWN
        if isinstance(node, nodes.Mod) and isinstance(left, str):
            if not _percent_safe(left):
                return UNKNOWN
            return left % (tuple(right) if isinstance(right, list) else right)  # Jinja's `%` is Python's
        return _BINARY[type(node)](left, right)

    def _item(self, node: nodes.Getitem, scope: dict[str, Any]) -> Any:
        base = self._value(node.node, scope)
        if not isinstance(base, (str, list, dict)):
            return UNKNOWN
        if isinstance(node.arg, nodes.Slice):
            bounds = [None if n is None else self._value(n, scope) for n in (node.arg.start, node.arg.stop)]
            step = None if node.arg.step is None else self._value(node.arg.step, scope)
            if any(b is UNKNOWN or not (b is None or isinstance(b, int)) for b in (*bounds, step)) or step == 0:
                return UNKNOWN
            return base[slice(bounds[0], bounds[1], step)] if not isinstance(base, dict) else UNKNOWN
        key = self._value(node.arg, scope)
        if isinstance(base, dict):
            return base.get(key, UNKNOWN) if isinstance(key, (str, int)) else UNKNOWN
        return base[key] if isinstance(key, int) and -len(base) <= key < len(base) else UNKNOWN

    def _args(self, node: nodes.Filter | nodes.Call, scope: dict[str, Any]) -> Any:
        if node.dyn_args is not None or node.dyn_kwargs is not None:
            return UNKNOWN
        args = self._all([self._value(a, scope) for a in node.args])
        kwargs = {k.key: self._value(k.value, scope) for k in node.kwargs}
        return UNKNOWN if args is UNKNOWN or UNKNOWN in kwargs.values() else (args, kwargs)

    def _filter(self, node: nodes.Filter, scope: dict[str, Any]) -> Any:
        value = self._value(node.node, scope) if node.node is not None else UNKNOWN
        given = self._args(node, scope)
        if value is UNKNOWN or given is UNKNOWN:
            return UNKNOWN
        args, kwargs = given
        name = node.name
        if isinstance(value, dict) and name in ("join", "first", "last", "list"):
            value = list(value)  # Jinja iterates a mapping's keys: `dict(never=0, mention=0) | join(' ')`
        if name == "join" and isinstance(value, (list, str)) and not kwargs:
            return _join(_text(args[0] if args else ""), list(value))
        if name == "format" and isinstance(value, str) and _percent_safe(value):
            return value % (kwargs or tuple(args))  # Jinja's do_format
        if name == "reverse" and isinstance(value, (str, list)):
            return value[::-1]
        if name == "replace" and isinstance(value, str) and len(args) == 2 and not kwargs:
            old, new = _text(args[0]), _text(args[1])
            if len(value) * (len(new) + 1) > MAX_CHARS:
                return UNKNOWN
            return value.replace(old, new)
        if name in ("first", "last") and isinstance(value, (str, list)) and value:
            return value[0] if name == "first" else value[-1]
        if name == "int" and isinstance(value, str) and len(value) <= 1000:  # `'E0041' | int(base=16)`
            return int(value, int(kwargs.get("base", args[1] if len(args) > 1 else 10)))
        if name in ("length", "count") and isinstance(value, (str, list, dict)):
            return len(value)
        if name in (*_STRING_FILTERS, "list") and isinstance(value, (str, list)) and not args and not kwargs:
            if name == "list":
                return list(value)
            return _STRING_FILTERS[name](value) if isinstance(value, str) else UNKNOWN
        return fold_sequence(name, value, args, kwargs, unknown=UNKNOWN)

    def _call(self, node: nodes.Call, scope: dict[str, Any]) -> Any:
        given = self._args(node, scope)
        if given is UNKNOWN:
            return UNKNOWN
        args, kwargs = given
        callee = node.node
        if isinstance(callee, nodes.Name) and callee.name in self.macros and callee.name not in scope:
            return self._macro(self.macros[callee.name], args, kwargs)
        if isinstance(callee, nodes.Name) and callee.name == "dict" and not args and callee.name not in scope:
            return dict(kwargs)  # Jinja's global: its keyword names are the keys, written as they are spelled
        if not isinstance(callee, nodes.Getattr):
            return UNKNOWN
        base = self._value(callee.node, scope)
        if isinstance(base, (str, bytes)) and callee.attr in CODEC_METHODS and not kwargs:
            return fold_codec(base, callee.attr, args, unknown=UNKNOWN)
        if isinstance(base, dict) and callee.attr == "items" and not args:
            return fold_sequence("items", base, [], {}, unknown=UNKNOWN)
        if isinstance(base, str) and callee.attr in ("maketrans", "translate") and not kwargs:
            return fold_table(base, callee.attr, args, unknown=UNKNOWN)
        if not isinstance(base, str) or kwargs:
            return UNKNOWN
        if callee.attr in _STRING_METHODS and all(isinstance(a, str) for a in args):
            if callee.attr == "replace" and len(base) * (sum(map(len, args)) + 1) > MAX_CHARS:
                return UNKNOWN
            return getattr(base, callee.attr)(*args)
        if callee.attr == "join" and len(args) == 1 and isinstance(args[0], list):
            return _join(base, args[0])
        if callee.attr in ("split", "rsplit") and len(args) <= 1 and all(isinstance(a, str) and a for a in args):
            return getattr(base, callee.attr)(*args)  # `'pip,npm'.split(',')`: no longer than `base`
        if callee.attr == "format" and _format_safe(base) and all(isinstance(a, (str, int, float)) for a in args):
            return base.format(*args)
        return UNKNOWN

    def _macro(self, macro: nodes.Macro, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """What a macro writes when called with constants (its body's outputs, folded), or UNKNOWN."""
        if self._depth >= MAX_DEPTH or len(args) > len(macro.args):
            return UNKNOWN
        defaults = dict(zip([a.name for a in macro.args][len(macro.args) - len(macro.defaults) :], macro.defaults))
        scope: dict[str, Any] = {}
        for i, arg in enumerate(macro.args):
            if i < len(args):
                scope[arg.name] = args[i]
            elif arg.name in kwargs:
                scope[arg.name] = kwargs[arg.name]
            elif arg.name in defaults:
                scope[arg.name] = self._value(defaults[arg.name], {})
            else:
                scope[arg.name] = None  # Jinja: an argument not given is undefined, written as ''
        self._depth += 1
        try:
            return self._body(macro.body, scope)
        finally:
            self._depth -= 1

    def _body(self, body: list[nodes.Node], scope: dict[str, Any]) -> Any:
        """The text a list of statements writes, when it holds only outputs, constant conditions and loops over
        constant lists."""
        out: list[str] = []
        for stmt in body:
            if isinstance(stmt, nodes.Output):
                parts = self._all([self._value(n, scope) for n in stmt.nodes])
                if parts is UNKNOWN:
                    return UNKNOWN
                out += [_text(p) for p in parts]
            elif isinstance(stmt, nodes.If):
                test = self._value(stmt.test, scope)
                if test is UNKNOWN or stmt.elif_:
                    return UNKNOWN
                written = self._body(stmt.body if test else stmt.else_, scope)
                if written is UNKNOWN:
                    return UNKNOWN
                out.append(written)
            else:
                return UNKNOWN
            if sum(map(len, out)) > MAX_CHARS:
                return UNKNOWN
        return "".join(out)

    def loop_values(self, loop: nodes.For) -> range | list[Any] | None:
        """The values a loop over a constant range (`range(0xE0020, 0xE007F)`, as a `range`) or a constant list or
        string (as a list) gives its variable, or None (a loop over the conversation or a keyword)."""
        if id(loop) not in self._loops:
            it = loop.iter
            found: range | list[Any] | None = None
            if isinstance(it, nodes.Call) and getattr(it.node, "name", None) == "range" and 0 < len(it.args) <= 3:
                bounds = [self.value(a) for a in it.args]
                if all(isinstance(b, int) and not isinstance(b, bool) for b in bounds) and 0 not in bounds[2:]:
                    found = range(*bounds)
            elif isinstance(value := self.value(it), (list, str)):
                found = list(value)
            self._loops[id(loop)] = found
        return self._loops[id(loop)]

    # ---- every string ------------------------------------------------------------------------------------------
    def strings(self) -> Iterator[tuple[nodes.Node, str]]:
        """Each expression that is not a literal and folds to a string, with that string (a list of strings is
        the strings joined by spaces), once per node and value; inside a loop over a constant list, once per item.
        Computed once: every rule reads the same list (and the step budget is spent once, not once per rule)."""
        if self._strings is None:
            found: dict[tuple[int, str], tuple[nodes.Node, str]] = {}
            for node, scope in self.walk():
                if isinstance(node, (nodes.Const, nodes.TemplateData)) or not isinstance(node, nodes.Expr):
                    continue
                value = self.value(node, scope)
                if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                    value = " ".join(value)
                if isinstance(value, str) and value:
                    found.setdefault((id(node), value), (node, value))
            self._strings = list(found.values())
        return iter(self._strings)

    def walk(self) -> Iterator[tuple[nodes.Node, dict[str, Any]]]:
        """Every node of the template with the bindings of the loops over constant lists it is in (a node inside
        such a loop comes once per item). Walked once; later calls read the same list."""
        if self._walked is None:
            self._walked = list(self._scoped(self.ast, {}))
        return iter(self._walked)

    def _scoped(self, node: nodes.Node, scope: dict[str, Any]) -> Iterator[tuple[nodes.Node, dict[str, Any]]]:
        """Every node under `node` with the loop bindings in force there."""
        for child in node.iter_child_nodes():
            yield from self._visit(child, scope)

    def alternatives(self, node: nodes.Node, scope: dict[str, Any] | None = None) -> list[Any]:
        """The values `node` may take: its value, or where that is unknown, its value under each value a variable
        it reads is set to in turn (`{% set n = '__cla' %}{% set n = n ~ 'ss__' %}`: `n` is '__cla', then
        '__class__')."""
        found = self.value(node, scope)
        if found is not UNKNOWN:
            return [found]
        values = [found]
        for name in dict.fromkeys(n.name for n in [node, *node.find_all(nodes.Name)] if isinstance(n, nodes.Name)):
            for value in self._sequence(name)[:MAX_ITEMS]:
                values.append(self.value(node, {**(scope or {}), name: value}))
        return values

    def _sequence(self, name: str) -> list[Any]:
        """The values the `{% set %}`s of `name` give it in the template's order, each from the one before."""
        if name not in self._sequences:
            values: list[Any] = []
            for a in self.ast.find_all(nodes.Assign):
                if isinstance(a.target, nodes.Name) and a.target.name == name:
                    before = {name: values[-1]} if values and values[-1] is not UNKNOWN else {}
                    values.append(self.value(a.node, before))
            self._sequences[name] = [v for v in values if v is not UNKNOWN]
        return self._sequences[name]

    def _visit(self, node: nodes.Node, scope: dict[str, Any]) -> Iterator[tuple[nodes.Node, dict[str, Any]]]:
        """`node` and the nodes under it; a loop over a constant list is walked once per item (at most MAX_ITEMS),
        its body with the item bound, until MAX_STEPS."""
        if self.exhausted:
            return
        try:
            self._tick()
        except _Exhausted:
            return
        yield node, scope
        if isinstance(node, nodes.With):  # `{% with x = '__class__' %}`: the body sees the bindings
            inner = dict(scope)
            for target, value in zip(node.targets, node.values, strict=False):
                yield from self._visit(value, scope)
                if isinstance(target, nodes.Name):
                    inner[target.name] = self.value(value, scope)
            for stmt in node.body:
                yield from self._visit(stmt, {k: v for k, v in inner.items() if v is not UNKNOWN})
            return
        if isinstance(node, nodes.For) and isinstance(node.target, (nodes.Name, nodes.Tuple)):
            items = self.value(node.iter, scope)
            if isinstance(items, (list, str)) and 0 < len(items) <= MAX_ITEMS:
                for item in items:
                    inner = {**scope, **bind(node.target, item)}
                    for stmt in node.body:
                        yield from self._visit(stmt, inner)
                return
        yield from self._scoped(node, scope)
