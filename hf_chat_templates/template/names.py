"""Names a template reads and binds, from its syntax tree alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jinja2.nodes as nodes

__all__ = ["loop_targets", "namespace_fields", "undeclared_names", "variable_key"]


def loop_targets(node: nodes.For | nodes.Macro) -> Iterator[nodes.Name]:
    if isinstance(node, nodes.For):
        yield from node.target.find_all(nodes.Name) if not isinstance(node.target, nodes.Name) else [node.target]
    else:
        yield from node.args


def undeclared_names(ast: nodes.Template) -> set[str]:
    """The names the template reads that nothing in it binds (the keywords and globals it expects), read from the
    tree alone. `jinja2.meta.find_undeclared_variables` runs jinja2's compiler, which computes constant outputs
    (`{{ 'x' | center(10**9) }}` builds a gigabyte) and rewrites the tree it is given."""
    loaded = {n.name for n in ast.find_all(nodes.Name) if n.ctx == "load"}
    bound = {n.name for n in ast.find_all(nodes.Name) if n.ctx in ("store", "param")}
    bound |= {m.name for m in ast.find_all(nodes.Macro)}
    bound |= {i.target for i in ast.find_all(nodes.Import)}
    bound |= {n if isinstance(n, str) else n[1] for f in ast.find_all(nodes.FromImport) for n in f.names}
    return loaded - bound - {"loop", "caller", "varargs", "kwargs"}


def read_before_set(ast: nodes.Template) -> set[str]:
    """Names the template reads before (or while) it first sets them at the top level: keywords the caller may pass
    that the template defaults (`{% if x is not defined %}{% set x = … %}`, `{% set x = x | default(…) %}`)."""
    order = {id(n): i for i, n in enumerate(ast.find_all(nodes.Node))}
    first_set: dict[str, int] = {}
    assign: Any
    for assign in ast.find_all((nodes.Assign, nodes.AssignBlock)):
        if isinstance(assign.target, nodes.Name):
            first_set.setdefault(assign.target.name, order[id(assign)])
    params = {n.name for n in ast.find_all(nodes.Name) if n.ctx == "param"}
    params |= {n.name for loop in ast.find_all(nodes.For) for n in loop.target.find_all(nodes.Name)}
    params |= {n.name for loop in ast.find_all(nodes.For) if isinstance(loop.target, nodes.Name) for n in [loop.target]}
    loads = [n for n in ast.find_all(nodes.Name) if n.ctx == "load" and n.name in first_set and n.name not in params]
    return {n.name for n in loads if _before_or_inside(n, first_set[n.name], order, ast)}


def _before_or_inside(name: nodes.Name, at: int, order: dict[int, int], ast: nodes.Template) -> bool:
    """Whether the load `name` comes before the first assignment (at `at`), or inside its own value."""
    if order[id(name)] < at:
        return True
    assign = next(a for a in ast.find_all((nodes.Assign, nodes.AssignBlock)) if order[id(a)] == at)
    return any(n is name for n in assign.find_all(nodes.Name))


def variable_key(node: nodes.Node) -> str | None:
    """`x` for a name, `ns.attr` for a namespace attribute read or set; None for anything else."""
    if isinstance(node, nodes.Name):
        return node.name
    if isinstance(node, nodes.NSRef):
        return f"{node.name}.{node.attr}"
    if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name):
        return f"{node.node.name}.{node.attr}"
    return None


def namespace_fields(sets: list[Any], bound: set[str]) -> dict[str, list[Any]]:
    """`ns.attr` and its values, for each field a `namespace(attr=…)` gives and no `{% set ns.attr = … %}` changes
    (`sets`: the template's assignments; `bound`: names a loop, a macro or a tuple binds): a constant kept in a
    namespace (`namespace(alphabet='…')`) folds like a `{% set %}` of its own."""
    changed = {f"{a.target.name}.{a.target.attr}" for a in sets if isinstance(a.target, nodes.NSRef)}
    fields: dict[str, list[Any]] = {}
    for a in sets:
        call = getattr(a, "node", None)
        if not (isinstance(a.target, nodes.Name) and a.target.name not in bound and isinstance(call, nodes.Call)):
            continue
        if getattr(call.node, "name", None) == "namespace" and not call.args and not call.dyn_kwargs:
            for kw in call.kwargs:
                key = f"{a.target.name}.{kw.key}"
                if key not in changed:
                    fields.setdefault(key, []).append(kw.value)
    return fields
