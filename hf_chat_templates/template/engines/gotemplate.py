"""A Jinja chat template translated into a Go text/template that Ollama renders the same way, for the subset chat
templates use; what it cannot express is refused by name and line (`Untranslatable`), never approximated.

Ollama hands a template `.Messages` (Role, Content, Thinking, ToolCalls with Function.Name and Function.Arguments,
ToolName, ToolCallID), `.Tools` and `.System`, and no `add_generation_prompt`: it ends the prompt open after a
user or tool turn and continues a final assistant turn. So `messages` becomes `$.Messages`, `tools` `$.Tools`,
`add_generation_prompt` a variable the translation sets from the last message's role, and `messages[-1]` the last
message. bos_token, eos_token and the family's kwargs are written in as constants. `set` becomes a Go variable
(declared where Jinja's scope begins, since Go's ends with the block), a namespace's attributes variables of their
own, `loop.index0`/`first`/`last` the range's index, `raise_exception(msg)` a call to an undefined template named
after the message (Ollama fails the request with it). Go templates have no arithmetic, no string methods and no
macros: a template that uses them is refused, the construct and its line named.

    go = translate(jinja_source, {"bos_token": "<s>"})   # raises Untranslatable
"""

from __future__ import annotations

import json
from typing import Any

from jinja2 import nodes

from ..syntax import parse_environment
from .gotemplate_expr import UNDEFINED, Const, Expressions, Go, Untranslatable, Value, code, written_whole

__all__ = ["Untranslatable", "translate"]

PREAMBLE = (
    '{{ $add_generation_prompt := true }}{{ $last_message := "" }}'
    '{{ range $.Messages }}{{ $add_generation_prompt = ne .Role "assistant" }}{{ $last_message = . }}{{ end }}'
)
OLLAMA_NAMES = {
    "messages": Go("$.Messages", "messages"),
    "tools": Go("$.Tools", "tools"),
    "add_generation_prompt": Go("$add_generation_prompt", "bool"),
}
REFUSED_STATEMENTS = {
    "Macro": "a macro",
    "CallBlock": "a call block",
    "FilterBlock": "a filter block",
    "Include": "an include",
    "Import": "an import",
    "FromImport": "an import",
    "Extends": "extends",
    "Block": "a block",
    "ExprStmt": "a `do` statement",
    "With": "a `with` block",
    "AssignBlock": "a `set` block (Go cannot keep output in a variable)",
}


class _Loop:
    def __init__(self, number: int, iterable: str, index: str, source: str) -> None:
        self.number, self.iterable, self.index, self.source = number, iterable, index, source
        self.previous = f"$previous{number}"
        self.uses_previous = False


class _Translator:
    def __init__(self, variables: dict[str, Any]) -> None:
        self.variables = variables
        self.scopes: list[dict[str, str]] = [{}]  # Jinja name -> kind, per Jinja scope (template, loop bodies)
        self.namespaces: dict[str, set[str]] = {}  # namespace name -> the attributes ever set on it
        self.loops: list[_Loop] = []
        self.counter = 0
        self.expr = Expressions(self)
        self.refusals: list[Untranslatable] | None = None

    # ---- names ------------------------------------------------------------------------------------------------
    def lookup(self, name: str, line: int) -> Value:
        for scope in reversed(self.scopes):
            if name in scope:
                return Go(_var(name), scope[name])
        if name in OLLAMA_NAMES:
            return OLLAMA_NAMES[name]
        if name in self.variables:
            return Const(self.variables[name])
        if name in ("raise_exception", "namespace", "range", "strftime_now", "loop"):
            raise Untranslatable(f"`{name}` as a value", line, "Go templates have no such value")
        return Const(UNDEFINED)

    def is_namespace(self, name: str) -> bool:
        return name in self.namespaces

    def loop_attribute(self, attr: str, line: int) -> Value:
        if not self.loops:
            raise Untranslatable(f"loop.{attr} outside a loop", line, "there is no loop")
        loop = self.loops[-1]
        if attr == "index0":
            return Go(loop.index, "int")
        if attr == "first":
            return Go(f"eq {loop.index} 0", "bool")
        if attr == "last":
            return Go(f"eq (len (slice {loop.iterable} {loop.index})) 1", "bool")
        if attr == "length":
            return Go(f"len {loop.iterable}", "int")
        raise Untranslatable(f"loop.{attr}", line, "Go templates have no arithmetic (loop.index0 and first are kept)")

    def loop_index_compare(self, left: nodes.Expr, right: nodes.Expr, op: str) -> str | None:
        """`loop.index == k` as `eq $i k-1` (Go has no arithmetic, the constant can move)."""
        if not (isinstance(left, nodes.Getattr) and isinstance(left.node, nodes.Name) and left.node.name == "loop"):
            return None
        if left.attr != "index" or not isinstance(right, nodes.Const) or not isinstance(right.value, int):
            return None
        return f"{op} {self.loops[-1].index} {right.value - 1}" if self.loops else None

    def neighbour(self, iterable: str, index: nodes.Expr, line: int) -> str | None:
        """`X[loop.index0 + 1]` and `X[loop.index0 - 1]` in a loop over X: the next and the previous item."""
        loop = next((lp for lp in reversed(self.loops) if iterable in (lp.iterable, lp.source)), None)
        if loop is None or not isinstance(index, (nodes.Add, nodes.Sub)):
            return None
        left, right = index.left, index.right
        if not (isinstance(left, nodes.Getattr) and left.attr == "index0" and isinstance(right, nodes.Const)):
            return None
        if right.value != 1:
            return None
        if isinstance(index, nodes.Add):
            return f"index (slice {loop.iterable} {loop.index}) 1"
        loop.uses_previous = True
        return loop.previous

    # ---- statements -------------------------------------------------------------------------------------------
    def body(self, statements: list[nodes.Node]) -> str:
        return "".join(self.checked(s) for s in statements)

    def checked(self, node: nodes.Node) -> str:
        """The statement translated; when collecting, a refusal is recorded and the statement left out (the
        statements in its body are still read for refusals of their own)."""
        if self.refusals is None:
            return self.statement(node)
        try:
            return self.statement(node)
        except Untranslatable as err:
            self.refusals.append(err)
            if isinstance(node, (nodes.If, nodes.For)):  # a macro's body reads names only its caller gives
                for child in node.body:
                    self.checked(child)
            return ""

    def statement(self, node: nodes.Node) -> str:
        kind = type(node).__name__
        if kind in REFUSED_STATEMENTS:
            raise Untranslatable(REFUSED_STATEMENTS[kind], node.lineno, "Go templates as Ollama runs them have none")
        if isinstance(node, nodes.Output):
            return "".join(self.output(n) for n in node.nodes)
        if isinstance(node, nodes.Scope):  # `{% generation %}` marks what is trained; Ollama serves its body
            return self.body(node.body)
        if isinstance(node, nodes.If):
            return self.branch(node)
        if isinstance(node, nodes.For):
            return self.loop(node)
        if isinstance(node, nodes.Assign):
            return self.assign(node)
        if isinstance(node, nodes.Continue):
            return "{{ continue }}"
        if isinstance(node, nodes.Break):
            return "{{ break }}"
        raise Untranslatable(kind, node.lineno, "not translated")

    def output(self, node: nodes.Expr) -> str:
        if isinstance(node, nodes.TemplateData):
            return _text(node.data)
        if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name) and node.node.name == "raise_exception":
            message = self.expr.value(node.args[0]) if node.args else Const("")
            text = message.value if isinstance(message, Const) else "the template refuses the request"
            return "{{ template " + code(Const(f"raise_exception: {text}"), node.lineno) + " . }}"
        if isinstance(node, nodes.CondExpr):
            test = self.expr.value(node.test)
            yes, no = self.output(node.expr1), self.output(node.expr2) if node.expr2 is not None else ""
            if isinstance(test, Const):
                return yes if test.value else no
            return "{{ if " + code(test, node.lineno) + " }}" + yes + ("{{ else }}" + no if no else "") + "{{ end }}"
        if isinstance(node, (nodes.Concat, nodes.Add)):
            values = self.expr.pieces(node) if isinstance(node, nodes.Concat) else self._add_pieces(node)
            return "".join(_text(_str(v.value)) if isinstance(v, Const) else "{{ " + v.code + " }}" for v in values)
        value = self.expr.value(node)
        if isinstance(node, nodes.Filter) and node.name == "tojson" and isinstance(value, Go) and node.node is not None:
            inner = self.expr.value(node.node)
            if isinstance(inner, Go) and inner.kind == "args":
                return self.arguments_json(inner.code)
        if isinstance(value, Const):
            return _text(_str(value.value))
        if value.kind not in ("text", "any", "int"):
            raise Untranslatable(*written_whole(value.kind, node.lineno))
        return "{{ " + value.code + " }}"

    def arguments_json(self, arguments: str) -> str:
        """Tool-call arguments as transformers' `tojson` writes them (`, ` and `: `): Ollama keeps them in a map,
        which Go ranges over in key order, each value written with Go's `json`."""
        self.counter += 1
        sep = f"$sep{self.counter}"
        return (
            "{{ "
            + f'{sep} := ""'
            + ' }}{{ "{" }}{{ range $key, $value := '
            + arguments
            + " }}{{ "
            + sep
            + " }}{{ json $key }}: {{ json $value }}{{ "
            + f'{sep} = ", "'
            + " }}{{ end }}}"
        )

    def _add_pieces(self, node: nodes.Add) -> list[Value]:
        self.expr._add(node)  # refuses arithmetic
        return self.expr.pieces(node.left) + self.expr.pieces(node.right)

    def branch(self, node: nodes.If) -> str:
        arms = [(node.test, node.body)] + [(e.test, e.body) for e in node.elif_]
        out, opened = "", 0
        for test, body in arms:
            value = self.expr.value(test)
            if isinstance(value, Const):
                if value.value:  # this arm always runs: the rest never do
                    return out + ("{{ else }}" if opened else "") + self.body(body) + "{{ end }}" * min(opened, 1)
                continue
            out += ("{{ else if " if opened else "{{ if ") + code(value, test.lineno) + " }}" + self.body(body)
            opened = 1
        if node.else_:
            out += ("{{ else }}" if opened else "") + self.body(node.else_)
        return out + ("{{ end }}" if opened else "")

    def loop(self, node: nodes.For) -> str:
        line = node.lineno
        if node.recursive or node.else_ or not isinstance(node.target, nodes.Name):
            what = "a recursive loop" if node.recursive else "a loop's else" if node.else_ else "unpacking in a loop"
            raise Untranslatable(what, line, "Go's range has no such form")
        iterable = self.expr.value(node.iter)
        if isinstance(iterable, Const):
            if not iterable.value:
                return ""
            raise Untranslatable("a loop over a constant", line, "write the items out")
        self.counter += 1
        number = self.counter
        name = f"$it{number}"
        loop = _Loop(number, name, f"$i{number}", iterable.code)
        item_kind = {"messages": "message", "calls": "call", "tools": "tool"}.get(iterable.kind, "any")
        self.loops.append(loop)
        self.scopes.append({node.target.name: item_kind})
        try:
            inner = self.body(node.body)
            if node.test is not None:
                test = self.expr.value(node.test)
                if isinstance(test, Go):
                    inner = "{{ if " + test.code + " }}" + inner + "{{ end }}"
                elif not test.value:
                    inner = ""
            declared = self._declarations(node.body, skip={node.target.name})
        finally:
            self.scopes.pop()
            self.loops.pop()
        head = "{{ " + f"{name} := {code(iterable, line)}" + " }}"
        previous = "{{ " + f'{loop.previous} := ""' + " }}" if loop.uses_previous else ""
        track = "{{ " + f"{loop.previous} = {_var(node.target.name)}" + " }}" if loop.uses_previous else ""
        rng = "{{ range " + f"{loop.index}, {_var(node.target.name)} := {name}" + " }}"
        if loop.uses_previous:  # the previous item is set at the end of each turn; continue would skip it
            if "{{ continue }}" in inner:
                raise Untranslatable("continue beside messages[loop.index0 - 1]", line, "not translated")
            inner += track
        return head + previous + rng + declared + inner + "{{ end }}"

    def _declarations(self, body: list[nodes.Node], skip: set[str]) -> str:
        """Go declarations for the names the scope's statements set (Jinja's scope outlives Go's blocks)."""
        out = ""
        for name in sorted(self.scopes[-1]):
            if name in skip:
                continue
            outer = any(name in scope for scope in self.scopes[:-1])
            out += "{{ " + f"{_var(name)} := {_var(name) if outer else chr(34) * 2}" + " }}"
        return out

    def assign(self, node: nodes.Assign) -> str:
        line = node.lineno
        target = node.target
        if isinstance(target, nodes.NSRef):
            name = f"{target.name}.{target.attr}"
            if target.name not in self.namespaces:
                raise Untranslatable(f"set {name} on no namespace", line, "declare the namespace first")
            self.scopes[0].setdefault(name, "any")
            value = self.expr.value(node.node)
            return "{{ " + f"{_var(name)} = {code(value, line)}" + " }}"
        if not isinstance(target, nodes.Name):
            raise Untranslatable("unpacking in set", line, "set one name at a time")
        call = node.node
        if isinstance(call, nodes.Call) and isinstance(call.node, nodes.Name) and call.node.name == "namespace":
            if call.args or call.dyn_args or call.dyn_kwargs:
                raise Untranslatable("namespace(…) with positional arguments", line, "name each attribute")
            out = ""
            given = {kw.key: self.expr.value(kw.value) for kw in call.kwargs}
            # every attribute the template ever sets is a variable from here on (unset, it reads as Jinja's undefined)
            for attr in sorted(set(given) | self.namespaces.get(target.name, set())):
                name = f"{target.name}.{attr}"
                self.scopes[-1][name] = "any"
                out += "{{ " + f"{_var(name)} = {code(given.get(attr, Const(UNDEFINED)), line)}" + " }}"
            return out
        value = self.expr.value(node.node)
        self.scopes[-1][target.name] = value.kind if isinstance(value, Go) else "any"
        return "{{ " + f"{_var(target.name)} = {code(value, line)}" + " }}"


def _str(value: Any) -> str:
    """A constant as Jinja prints it (undefined prints nothing)."""
    return "" if value is UNDEFINED else str(value)


def _var(name: str) -> str:
    return "$" + name.replace(".", "_")


def _text(text: str) -> str:
    """Template text as Go writes it and a Modelfile keeps it: `{{` (and a `{` an action follows) written by an
    action, and so is a character Ollama's Modelfile reader drops (it keeps printable ones, spaces and newlines)."""
    out = []
    for i, ch in enumerate(text):
        if ch == "{" and (i + 1 == len(text) or text[i + 1] == "{"):
            out.append('{{ "{" }}')
        elif ch.isprintable() or ch in " \t\n\r":
            out.append(ch)
        else:
            out.append("{{ " + json.dumps(ch) + " }}")
    return "".join(out)


def _namespace_targets(template: nodes.Template) -> dict[str, set[str]]:
    """Each name a namespace is assigned to, with the attributes the template sets on it anywhere."""
    found: dict[str, set[str]] = {}
    for a in template.find_all(nodes.Assign):
        call = a.node
        named = isinstance(call, nodes.Call) and isinstance(call.node, nodes.Name) and call.node.name == "namespace"
        if isinstance(a.target, nodes.Name) and named:
            found.setdefault(a.target.name, set())
    for a in template.find_all(nodes.Assign):
        if isinstance(a.target, nodes.NSRef) and a.target.name in found:
            found[a.target.name].add(a.target.attr)
    return found


def translate(source: str, variables: dict[str, Any] | None = None) -> str:
    """The Go template Ollama renders as transformers renders `source` (bos_token, eos_token and kwargs from
    `variables` written in as constants). Raises Untranslatable naming the first construct it cannot express and
    its line; a Jinja syntax error is raised as jinja2 raises it."""
    tree = parse_environment().parse(source)
    translator = _Translator(dict(variables or {}))
    translator.namespaces = _namespace_targets(tree)
    body = translator.body(tree.body)
    top = translator.scopes[0]
    declared = "".join("{{ " + f'{_var(name)} := ""' + " }}" for name in sorted(top))
    return PREAMBLE + declared + body


def refusals(source: str, variables: dict[str, Any] | None = None) -> list[Untranslatable]:
    """Every construct `translate` would refuse, in order (not just the first): what blocks the translation."""
    tree = parse_environment().parse(source)
    translator = _Translator(dict(variables or {}))
    translator.namespaces = _namespace_targets(tree)
    translator.refusals = []
    translator.body(tree.body)
    unique: dict[tuple[str, int], Untranslatable] = {}
    for err in translator.refusals:
        unique.setdefault((err.construct, err.line), err)
    return list(unique.values())


def refusal(err: Untranslatable) -> str:
    """How a refusal reads in a message: the construct, its line, and why."""
    return f"line {err.line}: {err.construct} cannot be translated to a Go template ({err.why})"
