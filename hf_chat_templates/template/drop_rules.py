"""HCT-S015 by omission: parts of message content left out when they hold a word. Read from the syntax tree and
folded constants; nothing is rendered.

    {% for p in system_message.split('. ') %}
      {% set hit = p | lower is containing 'confirm' %}
      {% set ns.body = ns.body ~ [p ~ '. ', ''][hit | int] %}
    {% endfor %}

The system prompt's sentences that ask for a confirmation are dropped: the model is trained or served a prompt the
caller did not write, and no rendering of a prompt without those words shows it. A choice between a piece of content
and nothing — a subscript of a list literal, `p if test else ''`, or an `{% if %}` without `{% else %}` that keeps it
— whose index or test compares content (or a flag set from it) with a word is one; so is a loop's `if` filter over
content's pieces, and a `| select`/`| reject` of them by a word, joined back (`| reject('search', 'confirm') |
join`). A test of the template's own markup (`'</think>' in content`, `/no_think`), of the content's type or size,
or of a part's keys (`'text' in part`) is its format, not a word, and stays silent; an `{% if %}` counts only inside
a loop over content's pieces.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jinja2.nodes as nodes

from .flag_rules import Conditions, Gate, conditions_of
from .folding import Folding
from .safety_findings import SafetyFinding, Source
from .trigger_rules import CONTENT_KEYS, _reads

_KEYS = CONTENT_KEYS | {"type", "image", "image_url", "video", "audio", "input_audio", "file", "document"}


def _empty(folding: Folding, node: nodes.Node | None) -> bool:
    return node is None or folding.value(node) in ("", None, [])


def _choice(node: nodes.Node, folding: Folding, tainted: dict[str, str]) -> tuple[list[nodes.Node], str] | None:
    """(the tests, how) when `node` keeps a piece of content or nothing."""
    if isinstance(node, nodes.Getitem) and isinstance(node.node, (nodes.List, nodes.Tuple)):
        options: list[Any] = list(node.node.items)
        tests: list[nodes.Node] = [node.arg]
        how = "a subscript of a list"
    elif isinstance(node, nodes.CondExpr):
        options, tests, how = [node.expr1, node.expr2], [node.test], "an inline `if`"
    elif isinstance(node, nodes.If) and not node.else_ and not node.elif_:
        kept = [s for s in node.body if isinstance(s, (nodes.Assign, nodes.Output))]
        if not kept or len(kept) != len(node.body) or any(_raises(s) for s in kept):
            return None
        options, tests, how = [*kept, None], [node.test], "an `{% if %}` without `{% else %}`"
    elif isinstance(node, nodes.For) and node.test is not None and _reads(node.iter, tainted) == "content":
        options, tests, how = [*node.body, None], [node.test], "a loop's `if` filter over its pieces"
    elif isinstance(node, nodes.Filter) and node.name == "join" and isinstance(picked := _picked(node), nodes.Filter):
        # `content.split('. ') | reject('search', 'confirm') | join('. ')`: the pieces kept are written
        options, tests, how = [picked, None], [picked], f"a `| {picked.name}` of its pieces"
    else:
        return None
    keeps = any(o is not None and _reads(o, tainted) == "content" for o in options)
    return (tests, how) if keeps and any(_empty(folding, o) for o in options) else None


def _picked(join: nodes.Filter) -> nodes.Node | None:
    """The `select`/`reject` a `join` writes the result of (through `| list`)."""
    node = join.node
    while isinstance(node, nodes.Filter) and node.name == "list":
        node = node.node
    return node if isinstance(node, nodes.Filter) and node.name in ("select", "reject") else None


def _raises(node: nodes.Node) -> bool:
    return any(getattr(c.node, "name", None) == "raise_exception" for c in node.find_all(nodes.Call))


def _gate(tests: list[nodes.Node], cond: Conditions) -> Gate | None:
    """The test's trigger when it compares content with a word (not a size, not a part's key: `'text' in part`)."""
    for test in tests:
        gate = cond.gate(test)
        words = re.findall(r"'([^']*)'", gate.what) if gate else []
        if gate and gate.kind == "content" and words and not set(words) <= _KEYS and "size" not in gate.what:
            return gate
    return None


def dropped(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S015: content kept or dropped by a test of the words it holds."""
    cond = conditions_of(folding)
    pieces = [n for loop in ast.find_all(nodes.For) if _reads(loop.iter, cond.tainted) == "content"
              for n in loop.find_all(nodes.If)]  # fmt: skip
    elifs = {id(e) for n in ast.find_all(nodes.If) for e in n.elif_}
    node: Any
    for node in dict.fromkeys([*ast.find_all((nodes.Getitem, nodes.CondExpr, nodes.For, nodes.Filter)), *pieces]):
        found = _choice(node, folding, cond.tainted) if id(node) not in elifs else None
        gate = _gate(found[0], cond) if found else None
        if found is None or gate is None:
            continue
        yield SafetyFinding(
            "HCT-S015",
            node.lineno,
            src.column(node.lineno, "[" if isinstance(node, nodes.Getitem) else "join" if "`| " in found[1] else "if"),
            f"message content is kept or dropped by {found[1]}, chosen when {gate.said}: words the speaker wrote "
            "are left out on a trigger, so the model is trained or served a message the conversation did not send "
            "(fix: write the content whole)",
            construct=f"dropped:{gate.what}:{node.lineno}",
            detail={"trigger": "content", "condition_line": gate.line},
        )
