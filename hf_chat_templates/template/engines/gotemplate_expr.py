"""Jinja expressions as Go text/template pipelines over Ollama's data (`gotemplate` translates the statements).

A value is either a constant known when translating (`Const`: a literal, bos_token, a kwarg, a test whose answer
Ollama's data decides, e.g. `content is string`) or Go code (`Go`) with the kind of Ollama value it yields
(`message`, `call`, `callfn`, `args`, `tool`, `toolfn`, `list`, `text`, or `any`), which decides how its fields
are spelled. What Go templates cannot express raises `Untranslatable` naming the construct and its line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import jinja2
from jinja2 import nodes

# Ollama's fields for the keys chat templates read, by the kind of value read.
FIELDS: dict[str, dict[str, tuple[str, str]]] = {
    "message": {
        "role": ("Role", "text"),
        "content": ("Content", "text"),
        "tool_calls": ("ToolCalls", "calls"),
        "reasoning_content": ("Thinking", "text"),
        "reasoning": ("Thinking", "text"),
        "thinking": ("Thinking", "text"),
        "tool_call_id": ("ToolCallID", "text"),
        "name": ("ToolName", "text"),
    },
    "call": {"id": ("ID", "text"), "function": ("Function", "callfn")},
    "callfn": {"name": ("Name", "text"), "arguments": ("Arguments", "args")},
    "tool": {"type": ("Type", "text"), "function": ("Function", "toolfn")},
    "toolfn": {
        "name": ("Name", "text"),
        "description": ("Description", "text"),
        "parameters": ("Parameters", "any"),
    },
}
# What a loop over a list of each kind yields.
ITEMS = {"messages": "message", "calls": "call", "tools": "tool"}
# Fields Ollama always has (never absent, maybe empty): `is defined` is true.
ALWAYS = {"Role", "Content", "Function", "Name", "Arguments", "Type"}


class Untranslatable(Exception):
    """A construct Go templates (or Ollama's data) cannot express: `construct` names it, `line` is its line."""

    def __init__(self, construct: str, line: int, why: str) -> None:
        super().__init__(f"line {line}: {construct}: {why}")
        self.construct = construct
        self.line = line
        self.why = why


class Undefined:
    """A name the template reads that Ollama does not define (Jinja's undefined: false, prints nothing)."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Undefined"


UNDEFINED = Undefined()


@dataclass(frozen=True)
class Const:
    value: Any


@dataclass(frozen=True)
class Go:
    code: str
    kind: str = "any"


Value = Const | Go


def literal(value: Any, line: int) -> str:
    """A Go literal for a constant."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Undefined) or value is None:
        return '""'
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        return str(value)
    raise Untranslatable(type(value).__name__ + " constant", line, "only strings, integers and booleans are written")


def code(value: Value, line: int) -> str:
    return value.code if isinstance(value, Go) else literal(value.value, line)


def arg(value: Value, line: int) -> str:
    """As an argument: parenthesized when it is a pipeline of several words."""
    text = code(value, line)
    return f"({text})" if " " in text and not text.startswith('"') else text


class Expressions:
    """Translates expressions; `scope` resolves names (loop variables, set variables, Ollama's values)."""

    def __init__(self, scope: Any) -> None:
        self.scope = scope

    def value(self, node: nodes.Node) -> Value:
        method = getattr(self, "_" + type(node).__name__.lower(), None)
        if method is None:
            raise Untranslatable(_describe(node), node.lineno, "Go templates have no such expression")
        try:
            result: Value = method(node)
        except (TypeError, ValueError, jinja2.exceptions.UndefinedError) as err:  # a constant it cannot compute
            raise Untranslatable(
                _computed(node),
                node.lineno,
                f"its value cannot be computed as the translation reads it ({err}): an undefined variable? pass it "
                "with --kwarg, or guard it with `is defined`",
            ) from None
        return result

    def _const(self, node: nodes.Const) -> Value:
        return Const(node.value)

    def _templatedata(self, node: nodes.TemplateData) -> Value:
        return Const(node.data)

    def _name(self, node: nodes.Name) -> Value:
        return self.scope.lookup(node.name, node.lineno)

    def _nsref(self, node: nodes.NSRef) -> Value:
        return self.scope.lookup(f"{node.name}.{node.attr}", node.lineno)

    def _getattr(self, node: nodes.Getattr) -> Value:
        if isinstance(node.node, nodes.Name) and node.node.name == "loop":
            return self.scope.loop_attribute(node.attr, node.lineno)
        if isinstance(node.node, nodes.Name) and self.scope.is_namespace(node.node.name):
            return self.scope.lookup(f"{node.node.name}.{node.attr}", node.lineno)
        return self.field(self.value(node.node), node.attr, node.lineno)

    def field(self, base: Value, key: str, line: int) -> Value:
        if isinstance(base, Const):
            if isinstance(base.value, dict):
                return Const(base.value.get(key, UNDEFINED))
            return Const(UNDEFINED)
        fields = FIELDS.get(base.kind)
        if fields is None:
            raise Untranslatable(f"[{key!r}] of a {base.kind} value", line, "Ollama's data has no such field to read")
        if key not in fields:
            return Const(UNDEFINED)  # Ollama's data never carries it
        name, kind = fields[key]
        return Go(f"{arg(base, line)}.{name}", kind)

    def _getitem(self, node: nodes.Getitem) -> Value:
        line = node.lineno
        if isinstance(node.arg, nodes.Slice):
            return self._slice(self.value(node.node), node.arg)
        if isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            if isinstance(node.node, nodes.Name) and self.scope.is_namespace(node.node.name):
                return self.scope.lookup(f"{node.node.name}.{node.arg.value}", line)
            return self.field(self.value(node.node), node.arg.value, line)
        base = self.value(node.node)
        if not isinstance(base, Go) or base.kind not in ITEMS:
            raise Untranslatable("an index into a computed value", line, "only lists of Ollama's data are indexed")
        item = ITEMS[base.kind]
        k = int_constant(node.arg)
        if k is not None:
            if k >= 0:
                return Go(f"index {arg(base, line)} {k}", item)
            if k == -1 and base.code == "$.Messages":
                return Go("$last_message", "message")
            raise Untranslatable(f"[{k}]", line, "Go's index takes no negative position")
        neighbour = self.scope.neighbour(base.code, node.arg, line)
        if neighbour is not None:
            return Go(neighbour, item)
        raise Untranslatable("an index computed by arithmetic", line, "Go templates have no arithmetic")

    def _slice(self, base: Value, node: nodes.Slice) -> Value:
        bounds: list[int | None] = []
        for part in (node.start, node.stop):
            if part is None:
                bounds.append(None)
            elif (k := int_constant(part)) is not None and k >= 0:
                bounds.append(k)
            else:
                raise Untranslatable("a slice with a negative or computed bound", node.lineno, "Go's slice cannot")
        if node.step is not None or not isinstance(base, Go):
            raise Untranslatable("a slice with a step", node.lineno, "Go's slice has no step")
        start, stop = bounds
        words = [str(start or 0)] + ([str(stop)] if stop is not None else [])
        return Go(f"slice {arg(base, node.lineno)} {' '.join(words)}", base.kind)

    def _not(self, node: nodes.Not) -> Value:
        inner = self.value(node.node)
        return Const(not inner.value) if isinstance(inner, Const) else Go(f"not {arg(inner, node.lineno)}", "bool")

    def _and(self, node: nodes.And) -> Value:
        left, right = self.value(node.left), self.value(node.right)
        if isinstance(left, Const):
            return right if left.value else left
        if isinstance(right, Const) and not right.value:
            return Go(f"and {arg(left, node.lineno)} false", "bool")
        if isinstance(right, Const):
            return Go(f"and {arg(left, node.lineno)} {literal(bool(right.value), node.lineno)}", "bool")
        return Go(f"and {arg(left, node.lineno)} {arg(right, node.lineno)}", "bool")

    def _or(self, node: nodes.Or) -> Value:
        left, right = self.value(node.left), self.value(node.right)
        if isinstance(left, Const):
            return left if left.value else right
        if isinstance(right, Const):
            return Go(f"or {arg(left, node.lineno)} {literal(bool(right.value), node.lineno)}", "bool")
        return Go(f"or {arg(left, node.lineno)} {arg(right, node.lineno)}", "bool")

    def _compare(self, node: nodes.Compare) -> Value:
        if len(node.ops) != 1:
            raise Untranslatable("a chained comparison", node.lineno, "write it as comparisons joined by `and`")
        op = node.ops[0]
        go_op = {"eq": "eq", "ne": "ne", "lt": "lt", "gt": "gt", "lteq": "le", "gteq": "ge"}.get(op.op)
        loop_index = self.scope.loop_index_compare(node.expr, op.expr, go_op) if go_op else None
        if loop_index is not None:
            return Go(loop_index, "bool")
        left, right = self.value(node.expr), op.expr
        if op.op in ("in", "notin"):
            return self._membership(left, right, op.op == "notin", node.lineno)
        other = self.value(right)
        if isinstance(left, Const) and isinstance(other, Const):
            import operator

            ops = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "gt": operator.gt}
            ops |= {"lteq": operator.le, "gteq": operator.ge}
            return Const(ops[op.op](left.value, other.value))
        return Go(f"{go_op} {arg(left, node.lineno)} {arg(other, node.lineno)}", "bool")

    def _membership(self, left: Value, right: nodes.Expr, negate: bool, line: int) -> Value:
        if not isinstance(right, (nodes.List, nodes.Tuple)) or not all(isinstance(i, nodes.Const) for i in right.items):
            raise Untranslatable(
                "`in` over a value", line, "Go templates have no membership test but `eq` on constants"
            )
        options = [i.value for i in right.items]  # type: ignore[attr-defined]
        if isinstance(left, Const):
            return Const((left.value in options) != negate)
        test = f"eq {arg(left, line)} " + " ".join(literal(o, line) for o in options)
        return Go(f"not ({test})" if negate else test, "bool")

    def _concat(self, node: nodes.Concat) -> Value:
        return self.joined(node.nodes, node.lineno)

    def _add(self, node: nodes.Add) -> Value:
        left, right = self.value(node.left), self.value(node.right)
        texts = [v for v in (left, right) if isinstance(v, Const) and isinstance(v.value, str)]
        if not texts and not (isinstance(left, Go) and left.kind == "text"):
            raise Untranslatable("`+` on numbers or lists", node.lineno, "Go templates have no arithmetic")
        return self.joined([node.left, node.right], node.lineno)

    def joined(self, parts: list[nodes.Expr], line: int) -> Value:
        values = [v for p in parts for v in self.pieces(p)]
        if all(isinstance(v, Const) for v in values):
            return Const("".join(_text(v.value) for v in values))  # type: ignore[union-attr]
        # printf, not print: print puts a space between two operands that are not strings
        return Go(f"printf {json.dumps('%v' * len(values))} " + " ".join(arg(v, line) for v in values), "text")

    def pieces(self, node: nodes.Expr) -> list[Value]:
        """The values a string concatenation prints, in order (nested `+` and `~` flattened)."""
        if isinstance(node, nodes.Concat):
            return [v for p in node.nodes for v in self.pieces(p)]
        if isinstance(node, nodes.Add):
            value = self._add(node)
            if isinstance(value, Const):
                return [value]
            return [v for p in (node.left, node.right) for v in self.pieces(p)]
        value = self.value(node)
        if isinstance(value, Go) and value.kind not in ("text", "any", "int"):
            raise Untranslatable(*written_whole(value.kind, node.lineno))
        return [value]

    def _test(self, node: nodes.Test) -> Value:
        line = node.lineno
        value = self.value(node.node)
        if isinstance(value, Const):
            return Const(_const_test(node.name, value.value, line))
        field = value.code.rsplit(".", 1)[-1]
        if node.name == "defined":
            return Const(True) if field in ALWAYS else value
        if node.name == "undefined":
            return Const(False) if field in ALWAYS else Go(f"not {arg(value, line)}", "bool")
        if node.name == "none":
            return Const(False) if field in ALWAYS - {"Content"} else Go(f"not {arg(value, line)}", "bool")
        kinds = {"string": ("text",), "mapping": ("args", "call", "callfn", "tool", "toolfn", "message")}
        kinds |= {
            "iterable": ("text", "calls", "messages", "tools"),
            "sequence": ("text", "calls", "messages", "tools"),
        }
        if node.name in kinds and value.kind != "any":
            return Const(value.kind in kinds[node.name])
        raise Untranslatable(f"`is {node.name}`", line, "Ollama's data does not answer this test when translating")

    def _filter(self, node: nodes.Filter) -> Value:
        line = node.lineno
        if node.node is None:
            raise Untranslatable(f"filter block `{node.name}`", line, "Go templates have no filter blocks")
        value = self.value(node.node)
        if node.name in ("length", "count"):
            return Const(len(value.value)) if isinstance(value, Const) else Go(f"len {arg(value, line)}", "int")
        ascii_off = [(kw.key, getattr(kw.value, "value", None)) for kw in node.kwargs] == [("ensure_ascii", False)]
        if node.name == "tojson" and (node.args or (node.kwargs and not ascii_off)):
            # ensure_ascii=False is what Go's json does already: it writes non-ASCII characters as they are
            raise Untranslatable("tojson with arguments", line, "Ollama's json function takes none")
        if node.name == "string" and not node.args and (isinstance(value, Const) or value.kind == "text"):
            return Const(_text(value.value)) if isinstance(value, Const) else value
        if node.name == "first" and isinstance(value, Go) and value.kind in ITEMS and not node.args:
            return Go(f"index {arg(value, line)} 0", ITEMS[value.kind])
        if node.name == "tojson":
            if isinstance(value, Const):
                if isinstance(value.value, Undefined):
                    raise Untranslatable("tojson of an undefined value", line, "transformers fails on it too")
                return Const(json.dumps(value.value, ensure_ascii=False))
            return Go(f"json {arg(value, line)}", "text")
        if node.name == "safe":
            return value
        if isinstance(value, Const) and node.name in ("trim", "upper", "lower") and isinstance(value.value, str):
            return Const(getattr(value.value, {"trim": "strip"}.get(node.name, node.name))())
        raise Untranslatable(f"filter `{node.name}`", line, "Ollama's templates have no such function")

    def _call(self, node: nodes.Call) -> Value:
        line = node.lineno
        if isinstance(node.node, nodes.Getattr):
            raise Untranslatable(f"method `.{node.node.attr}()`", line, "Go templates call no methods on values")
        name = node.node.name if isinstance(node.node, nodes.Name) else "a computed callable"
        if name == "strftime_now" and len(node.args) == 1 and isinstance(node.args[0], nodes.Const):
            if node.args[0].value == "%Y-%m-%d":
                return Go("currentDate", "text")
            raise Untranslatable(f"strftime_now({node.args[0].value!r})", line, "Ollama's currentDate writes %Y-%m-%d")
        raise Untranslatable(f"call `{name}(…)`", line, "Ollama's templates have no such function")

    def _condexpr(self, node: nodes.CondExpr) -> Value:
        test = self.value(node.test)
        if isinstance(test, Const):
            return self.value(node.expr1) if test.value else self.value(node.expr2) if node.expr2 else Const("")
        raise Untranslatable("an inline `if … else`", node.lineno, "Go templates have no conditional expression")


def int_constant(node: nodes.Expr) -> int | None:
    """The integer a literal (or a negated one) spells, else None."""
    if isinstance(node, nodes.Neg):
        inner = int_constant(node.node)
        return -inner if inner is not None else None
    if isinstance(node, nodes.Const) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def written_whole(kind: str, line: int) -> tuple[str, int, str]:
    """Why a value of `kind` written whole is refused: Go writes it otherwise than transformers."""
    if kind == "args":
        why = "Ollama writes them as compact JSON; transformers writes a string as given and a dict as Python's repr"
        return "tool-call arguments written whole", line, why + " (write them with `| tojson`)"
    return f"a {kind} value written whole", line, "Go writes it otherwise than transformers"


def _text(value: Any) -> str:
    if isinstance(value, Undefined):
        return ""
    return str(value)


def _const_test(name: str, value: Any, line: int) -> bool:
    tests = {
        "defined": lambda v: not isinstance(v, Undefined),
        "undefined": lambda v: isinstance(v, Undefined),
        "none": lambda v: v is None,
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "true": lambda v: v is True,
        "false": lambda v: v is False,
        "mapping": lambda v: isinstance(v, dict),
    }
    if name not in tests:
        raise Untranslatable(f"`is {name}`", line, "not translated")
    return bool(tests[name](value))


ARITHMETIC = {"Sub": "-", "Mul": "*", "Div": "/", "FloorDiv": "//", "Mod": "%", "Pow": "**", "Neg": "unary -"}


def _computed(node: nodes.Node) -> str:
    """The construct whose constant value could not be computed, as a reader finds it in the template."""
    if isinstance(node, nodes.Compare) and node.ops:
        return f"a comparison (`{node.ops[0].op}`)"
    if isinstance(node, (nodes.Filter, nodes.Test)) and node.name:
        return f"{'filter' if isinstance(node, nodes.Filter) else 'test'} `{node.name}` on a constant"
    return _describe(node)


def _describe(node: nodes.Node) -> str:
    if type(node).__name__ in ARITHMETIC:
        return f"arithmetic (`{ARITHMETIC[type(node).__name__]}`)"
    return {"List": "a list literal", "Dict": "a dict literal", "Tuple": "a tuple"}.get(
        type(node).__name__, type(node).__name__
    )
