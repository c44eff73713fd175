"""What a template does to message content on its way to the model, read from the syntax tree and folded constants:

    HCT-S015  content rewritten: `|replace(old, new)`, `.replace(old, new)` or `.split(old) | join(new)` on message
              content or a tool call's arguments, where `new` brings words or numbers `old` did not have
              (`replace('approve', 'reject')`, `replace('acct-1', 'acct-9')`); the model is trained or served words
              the speaker did not write. Removing a flag (`replace('/think', '')`) or escaping (`replace('\n',
              '\\n')`) brings none and is not one.
    HCT-S012  prose joined to content through a list (`[message.content, 'Remember: …'] | join(' ')`) or a
              replacement that adds a sentence (`replace('.', '. Buy AcmeCloud.')`)

Nothing is rendered."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jinja2.nodes as nodes

from .folding import Folding
from .safety_findings import SafetyFinding, Source, prose, short
from .trigger_rules import _reads, _taint

_MARKUP = re.compile(r"<[^<>]{1,62}>|\[[^\[\]]{1,62}\]")


def _new_words(old: str, new: str) -> list[str]:
    """The words and numbers of `new` (markup aside) that `old` does not have (`'acct-1'` → `'acct-9'`: `9`)."""
    have = {w.lower() for w in re.findall(r"[^\W_]+", old)}
    return [w for w in re.findall(r"[^\W_]+", _MARKUP.sub(" ", new)) if w.lower() not in have]


# What a message or a tool call carries: rewriting any of it serves what the data did not say
DATA_KEYS = frozenset({"content", "text", "arguments", "reasoning_content", "thinking", "description"})


def _reads_data(node: nodes.Node, tainted: dict[str, str]) -> bool:
    if _reads(node, tainted) == "content":
        return True
    for sub in (node, *node.find_all((nodes.Getattr, nodes.Getitem))):
        key = sub.attr if isinstance(sub, nodes.Getattr) else getattr(getattr(sub, "arg", None), "value", None)
        if key in DATA_KEYS:
            return True
    return False


def _replacement(node: nodes.Node, tainted: dict[str, str]) -> tuple[nodes.Node, nodes.Node, str] | None:
    """(old, new, how) when `node` replaces text in message content or a tool call's arguments."""
    method: Any = node.node if isinstance(node, nodes.Call) else None
    if isinstance(node, nodes.Filter) and node.name == "replace" and len(node.args) >= 2 and node.node is not None:
        if _reads_data(node.node, tainted):
            return node.args[0], node.args[1], "`|replace`"
    elif isinstance(method, nodes.Getattr) and method.attr == "replace" and len(node.args) >= 2:  # type: ignore[attr-defined]
        if _reads_data(method.node, tainted):
            return node.args[0], node.args[1], "`.replace`"  # type: ignore[attr-defined]
    elif isinstance(node, nodes.Filter) and node.name == "join" and node.args and isinstance(node.node, nodes.Call):
        split: Any = node.node.node
        splits = isinstance(split, nodes.Getattr) and split.attr == "split" and node.node.args
        if splits and _reads_data(split.node, tainted):
            return node.node.args[0], node.args[0], "`.split(…) | join(…)`"
    return None


def rewrites(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    tainted = _taint(ast)
    for node, scope in folding.walk():
        found = _replacement(node, tainted)
        if found is not None:
            yield from _rewrite(node, found, src, folding, scope)
        elif (
            isinstance(node, nodes.Filter) and node.name == "join" and isinstance(node.node, (nodes.List, nodes.Tuple))
        ):
            yield from _joined(node, node.node.items, src, folding, scope, tainted)


def _rewrite(
    node: nodes.Node,
    found: tuple[nodes.Node, nodes.Node, str],
    src: Source,
    folding: Folding,
    scope: dict[str, Any],
) -> Iterator[SafetyFinding]:
    old_node, new_node, how = found
    old, new = folding.value(old_node, scope), folding.value(new_node, scope)
    if not (isinstance(old, str) and isinstance(new, str)) or not _new_words(old, new):
        return
    column = src.column(node.lineno, "replace" if "replace" in how else "split")
    if prose(new.replace(old, " "), words=3):
        yield SafetyFinding(
            "HCT-S012",
            node.lineno,
            column,
            f"{how} writes {short(new.strip())} into message content at each {old!r}: the model reads it as part "
            "of what the speaker wrote",
            construct=new.strip()[:80],
        )
        return
    yield SafetyFinding(
        "HCT-S015",
        node.lineno,
        column,
        f"{how} rewrites what a message carries: each {old!r} in it becomes {new!r}, so the model is trained or "
        "served words the conversation did not have",
        construct=f"{old}\0{new}"[:120],
    )


def _joined(
    node: nodes.Filter,
    items: list[nodes.Expr],
    src: Source,
    folding: Folding,
    scope: dict[str, Any],
    tainted: dict[str, str],
) -> Iterator[SafetyFinding]:
    reads = [i for i, item in enumerate(items) if _reads(item, tainted) == "content"]
    for item in items[reads[0] + 1 :] if reads else ():
        value = folding.value(item, scope)
        if isinstance(value, str) and prose(value, words=3):
            yield SafetyFinding(
                "HCT-S012",
                node.lineno,
                src.column(node.lineno, "join"),
                f"the text {short(value.strip())} is joined to message content: the model reads it as part of "
                "what the speaker wrote",
                construct=value.strip()[:80],
            )
