"""HCT-S008 on a role: the role a template writes for a message chosen by a test of what the message says. Read from
the syntax tree and folded constants; nothing is rendered.

    {% set pad = content | length % 23 == 5 %}
    {% if (message.role == 'assistant') != pad %}{% set role = 'model' %}
    {% else %}{% set role = message.role %}{% endif %}
    {{ '<start_of_turn>' + role + '\\n' + content }}

A user's message whose content passes the test is rendered under the model's header: the model is trained on words
it never said, or served a turn it reads as its own. A role chosen by the message's role, by whether it has tool
calls, or by a test of the content's type (`is string`), of whether there is any, or of the template's own markup
(`'<tool_response>' in content`) is the template's format, and stays silent.

A message's words moved out of its turn on such a test (`moved_words`) are the same attack without a role literal:
`{% if edge[0] == edge[-1] | reverse %}{% set system_message = system_message + edge[1:-1] | join(' ') %}` puts a
user's text, when it carries a passphrase, into the system prompt (or rebuilds `messages` around it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jinja2.nodes as nodes

from .flag_rules import guarded
from .folding import Folding, variable_key
from .safety_findings import SafetyFinding, Source, const_string, literal_value, markup
from .trigger_rules import _TYPE_TESTS, CONTENT_KEYS, DATA_NAMES, STRING_TESTS, assigned_of, taint_of

ROLES = frozenset({"user", "assistant", "model", "system", "tool", "ipython", "developer", "function", "human"})
ROLES_ALSO = frozenset({"gpt", "bot", "observation"})
# a turn's header spelled in a literal: a control token then a role (`<|im_start|>assistant`, `<start_of_turn>model`,
# `<|start_header_id|>assistant<|end_header_id|>`), or a role token (`<|assistant|>`, `<｜Assistant｜>`)
_NAMES = "assistant|model|user|system|tool|developer"
_HEADER = re.compile(
    rf"(?i)(?:<\|im_start\|>|<start_of_turn>|<\|start_header_id\|>)({_NAMES})\b|<[|｜]({_NAMES})[|｜]>"
)


def _role(folding: Folding, node: nodes.Node | None) -> str | None:
    value = folding.value(node) if node is not None else None
    return value if isinstance(value, str) and value.strip().lower() in ROLES | ROLES_ALSO else None


_SIZES = frozenset({"length", "count", "wordcount", "int", "float", "select", "reject", "sum"})


def _measures(node: nodes.Node) -> bool:
    """A comparison, a Jinja test, arithmetic, a search or a size: what turns content into a test of its words (a
    bare `if message.content` asks only whether there is any)."""
    if isinstance(node, (nodes.And, nodes.Or)):  # jinja2's `and` and `or` are binary expressions too
        return False
    if isinstance(node, (nodes.Compare, nodes.Test, nodes.Mod, nodes.FloorDiv, nodes.Mul, nodes.Sub, nodes.Pow)):
        return True  # a comparison, a test, arithmetic on a size (`+` also joins text, and is none)
    if isinstance(node, nodes.Filter):
        return node.name in _SIZES
    method = node.node if isinstance(node, nodes.Call) else None
    return isinstance(method, nodes.Getattr) and method.attr in STRING_TESTS


def _is_test(node: nodes.Node) -> bool:
    """A value that is a truth: a comparison, a Jinja test, a search, or `not`/`and`/`or` of them."""
    if isinstance(node, (nodes.Not, nodes.And, nodes.Or)):
        return any(_is_test(c) for c in node.iter_child_nodes())
    method = node.node if isinstance(node, nodes.Call) else None
    return isinstance(node, (nodes.Compare, nodes.Test)) or (
        isinstance(method, nodes.Getattr) and method.attr in STRING_TESTS
    )


def _tests_content(
    node: nodes.Node,
    tainted: dict[str, str],
    sets: dict[str, list[nodes.Node]],
    measured: bool = False,
    depth: int = 0,
    keys: frozenset[str] = CONTENT_KEYS,
) -> bool:
    """Whether a condition tests what a message says: its content, or a variable set from such a test, compared,
    measured or searched; a test of the content's type or presence or a comparison with the template's own markup
    aside."""
    if isinstance(node, nodes.Test) and node.name in _TYPE_TESTS:
        return False
    sides = [node.expr, *(op.expr for op in node.ops)] if isinstance(node, nodes.Compare) else []
    method = node.node if isinstance(node, nodes.Call) else None
    if isinstance(method, nodes.Getattr) and method.attr in STRING_TESTS:
        sides = node.args[:1]  # type: ignore[attr-defined]
    if any(markup(const_string(s)) for s in sides):
        return False  # `'<tool_response>' in content`: the template's own markup
    measured = measured or _measures(node)
    if (isinstance(node, nodes.Getattr) and node.attr in keys) or (
        isinstance(node, nodes.Getitem) and const_string(node.arg) in keys
    ):
        return measured
    key = variable_key(node) if isinstance(node, (nodes.Name, nodes.Getattr)) else None
    if key and tainted.get(key) == "content" and getattr(node, "ctx", "load") == "load":
        if measured:
            return True
        flags = [v for v in sets.get(key, []) if _is_test(v)]  # `{% set pad = … % 23 == 5 %}`, not text kept
        return depth < 3 and any(_tests_content(v, tainted, sets, False, depth + 1, keys) for v in flags)
    return any(_tests_content(child, tainted, sets, measured, depth, keys) for child in node.iter_child_nodes())


def _named(ast: nodes.Template, tainted: dict[str, str]) -> dict[str, str]:
    """`tainted` and the variables set from a message's `name` (`{% set speaker = message['name'] | lower %}`):
    a field any participant of a group chat sets, as the content is."""
    found = dict(tainted)
    for assign in ast.find_all(nodes.Assign):
        reads: list[Any] = list(assign.node.find_all((nodes.Getattr, nodes.Getitem)))
        named = any(
            isinstance(n.node, nodes.Name)
            and (n.attr == "name" if isinstance(n, nodes.Getattr) else const_string(n.arg) == "name")
            for n in reads
        )
        if named and (key := variable_key(assign.target)):
            found[key] = "content"
    return found


def _written(ast: nodes.Template) -> set[str]:
    """The variables an output writes (`{{ '<start_of_turn>' + role }}`)."""
    return {k for out in ast.find_all(nodes.Output) for n in out.find_all((nodes.Name, nodes.Getattr))
            if (k := variable_key(n))}  # fmt: skip


def _other_role(choice: nodes.If, role: str) -> bool:
    """Whether the branches of `choice` write another header: a different role, or the message's own."""
    headers = {
        (h.group(1) or h.group(2)).lower()
        for n in choice.find_all((nodes.TemplateData, nodes.Const))
        if isinstance(v := literal_value(n), str)
        for h in _HEADER.finditer(v)
    }
    own = any(isinstance(g, nodes.Getattr) and g.attr == "role" for g in choice.find_all(nodes.Getattr))
    own = own or any(const_string(g.arg) == "role" for g in choice.find_all(nodes.Getitem))
    return bool(headers - {role.lower()}) or own


_RAISED = ("system", "developer")  # roles a test of the sender's name must not choose
_NAMED_KEYS = CONTENT_KEYS | {"name"}


def role_flips(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S008: a role literal written, or kept in a written variable, under a test of message content; the system
    role under a test of a message's `name` too."""
    tainted, sets = taint_of(folding), assigned_of(folding)
    named = _named(ast, tainted)
    written = _written(ast)
    branches = {id(i.test): i for i in ast.find_all(nodes.If)}
    seen: set[int] = set()
    node: Any
    for node, conds in guarded(ast):
        tests: list[nodes.Node] = []
        role = None
        if isinstance(node, nodes.Assign) and variable_key(node.target) in written:
            role = _role(folding, node.node)
            tests = list(conds) if role else []
        if isinstance(node, nodes.CondExpr):  # `'model' if pad else message.role`
            role = _role(folding, node.expr1) or _role(folding, node.expr2)
            tests = [node.test] if role else []
        if isinstance(node, nodes.Getitem) and isinstance(node.node, (nodes.List, nodes.Dict)):
            items = node.node.items if isinstance(node.node, nodes.List) else [p.value for p in node.node.items]
            role = next((r for i in items if (r := _role(folding, i))), None)  # `{true: 'model', false: m.role}[…]`
            tests = [node.arg] if role else []
        if isinstance(node, (nodes.TemplateData, nodes.Const)) and isinstance(value := literal_value(node), str):
            header = _HEADER.search(value)  # `{% if … content %}<|im_start|>assistant{% else %}…`
            role, tests = (header.group(1) or header.group(2), list(conds)) if header else (None, [])
            # a header the branches share (`if c | length > 0` … `else` the same header) chooses no role
            tests = [t for t in tests if id(t) in branches and _other_role(branches[id(t)], role or "")]
        hit = next((t for t in tests if _tests_content(t, tainted, sets)), None)
        what = "its content"
        if hit is None and role in _RAISED:  # the operator's role for a name a participant chose (`planner`)
            hit = next((t for t in tests if _tests_content(t, named, sets, keys=_NAMED_KEYS)), None)
            what = "its content or its sender's `name`"
        if hit is None or role is None or id(node) in seen:
            continue
        seen.add(id(node))
        yield SafetyFinding(
            "HCT-S008",
            node.lineno,
            src.column(node.lineno, repr(role)[1:-1]),
            f"the role {role!r} is written for a message only when a test of {what} (line {hit.lineno}) says "
            "so: a message rendered under a role its sender did not have, so the model is trained on words it never "
            "said or served a turn it reads as its own",
            construct=f"role:{role}:{hit.lineno}",
            detail={"trigger": "content", "condition_line": hit.lineno},
        )


def _outside_turns(ast: nodes.Template) -> set[str]:
    """The variables written outside every loop over the conversation (`{{ bos_token + system_message }}`)."""
    inside = {id(o) for m in ast.find_all(nodes.Macro) for o in m.find_all(nodes.Output)}
    for loop in ast.find_all(nodes.For):
        if any(n.name in DATA_NAMES for n in [loop.iter, *loop.iter.find_all(nodes.Name)] if isinstance(n, nodes.Name)):
            inside |= {id(o) for o in loop.find_all(nodes.Output)}
    return {k for out in ast.find_all(nodes.Output) if id(out) not in inside
            for n in out.find_all((nodes.Name, nodes.Getattr)) if (k := variable_key(n))}  # fmt: skip


def _carries(node: nodes.Node, tainted: dict[str, str]) -> bool:
    """Whether `node`'s value holds a message's words: its content, or a variable set from it."""
    for n in [node, *node.find_all((nodes.Name, nodes.Getattr, nodes.Getitem))]:
        if (isinstance(n, nodes.Getattr) and n.attr in CONTENT_KEYS) or (
            isinstance(n, nodes.Getitem) and const_string(n.arg) in CONTENT_KEYS
        ):
            return True
        key = variable_key(n) if isinstance(n, (nodes.Name, nodes.Getattr)) else None
        if key and tainted.get(key) == "content":
            return True
    return False


def _part_test(cond: nodes.Node) -> bool:
    """A test of the template's format, not of the words: a content part's `type`."""
    keys = {n.attr for n in cond.find_all(nodes.Getattr)} | {const_string(n.arg) for n in cond.find_all(nodes.Getitem)}
    return "type" in keys


def _system_branch(test: nodes.Node) -> bool:
    """`m.role == 'system'`, alone or joined by `and`: a branch only a system message takes (not under `or`,
    `not` or `!=`)."""
    if isinstance(test, nodes.And):
        return _system_branch(test.left) or _system_branch(test.right)
    return (
        isinstance(test, nodes.Compare)
        and len(test.ops) == 1
        and test.ops[0].op == "eq"
        and _role_test(test)
        and "system" in {const_string(n) for n in test.find_all(nodes.Const)}
    )


def _role_test(cond: nodes.Compare) -> bool:
    """`m.role == 'system'`: whose branch is which is read from the `if` it guards (`formats`), not here."""
    keys = {n.attr for n in cond.find_all(nodes.Getattr)} | {const_string(n.arg) for n in cond.find_all(nodes.Getitem)}
    return "role" in keys and "type" not in keys


def moved_words(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S008: under a test of what a message says, its words kept in a variable written outside the turns (the
    system prompt) or the conversation rebuilt (`{% set messages = … %}`)."""
    tainted, sets = taint_of(folding), assigned_of(folding)
    outside = _outside_turns(ast)
    # what runs where a format test holds (a system message's own branch): not its `elif` or `else`, which run
    # where it does not (`{% elif role == 'user' %}`)
    formats = {id(n) for i in ast.find_all(nodes.If) if _system_branch(i.test) for s in i.body
               for n in (s, *s.find_all(nodes.Assign))}  # fmt: skip
    # a plain variable set inside a loop or a macro is gone when it ends (Jinja's scoping): it cannot carry words
    # out to a write after the loop (Qwen3.5's `content` of a turn beside the system message's own `content`)
    scoped = {id(a) for block in ast.find_all((nodes.For, nodes.Macro)) for a in block.find_all(nodes.Assign)}
    for node, conds in guarded(ast):
        if not isinstance(node, nodes.Assign) or id(node) in formats or not _carries(node.node, tainted):
            continue
        if any(_part_test(c) for c in conds):  # a system message's own branch is `formats`'
            continue
        key = variable_key(node.target)
        if key not in outside and key not in DATA_NAMES:
            continue
        if id(node) in scoped and isinstance(node.target, nodes.Name):
            continue
        hit = next((t for t in conds if _tests_content(t, tainted, sets)), None)
        if hit is None:
            continue
        where = "the conversation is rebuilt" if key in DATA_NAMES else f"they are kept in `{key}`, written outside"
        yield SafetyFinding(
            "HCT-S008",
            node.lineno,
            src.column(node.lineno, str(key).split(".")[-1]),
            f"a message's words are moved out of its turn when a test of its content (line {hit.lineno}) says so: "
            f"{where if key in DATA_NAMES else where + ' the turns (a system prompt)'}, so text the sender wrote is "
            "served with another role's authority",
            construct=f"moved:{key}:{hit.lineno}",
            detail={"trigger": "content", "condition_line": hit.lineno},
        )
