"""What a template does to message content on its way to the model, read from the syntax tree and folded constants:

    HCT-S015  content rewritten: `|replace(old, new)`, `.replace(old, new)` or `.split(old) | join(new)` on message
              content or a tool call's arguments, where `new` brings words or numbers `old` did not have
              (`replace('approve', 'reject')`, `replace('acct-1', 'acct-9')`); the model is trained or served words
              the speaker did not write. Removing a flag (`replace('/think', '')`) or escaping (`replace('\n',
              '\\n')`) brings none and is not one. A replacement computed at render time (`'%x' | format(n)`, a
              variable the template sets from the clock) is one, whatever it spells; so is `| map('replace', …)` over
              content's words, and a loop over content's words that writes other text in place of some
              (`{% for w in content.split() %}{{ addr if w.startswith('0x') else w }}`). A replacement the caller
              passes or the tokenizer defines (`bos_token`) is read, not computed.
    HCT-S012  prose joined to content through a list (`[message.content, 'Remember: …'] | join(' ')`) or a
              replacement that adds a sentence (`replace('.', '. Buy AcmeCloud.')`)

Nothing is rendered."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jinja2.nodes as nodes

from .folding import UNKNOWN, Folding
from .growth_rules import replace_args
from .safety_findings import SafetyFinding, Source, const_string, literal_value, prose, short
from .trigger_rules import _reads, given_of, taint_of

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
    if any(n.name in ("tools", "documents") for n in [node, *node.find_all(nodes.Name)] if isinstance(n, nodes.Name)):
        return True  # the tools' or documents' JSON: what the caller gave, as the model reads it
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
    elif isinstance(node, nodes.Filter) and node.name == "map" and len(node.args) >= 3 and node.node is not None:
        if const_string(node.args[0]) == "replace" and _reads_data(node.node, tainted):
            return node.args[1], node.args[2], "`| map('replace', …)`"
    elif isinstance(node, nodes.Filter) and node.name == "join" and node.args and isinstance(node.node, nodes.Call):
        split: Any = node.node.node
        splits = isinstance(split, nodes.Getattr) and split.attr == "split" and node.node.args
        if splits and _reads_data(split.node, tainted):
            return node.node.args[0], node.args[0], "`.split(…) | join(…)`"
    return None


def _caller_text(node: nodes.Node, given: set[str]) -> bool:
    """A replacement the caller passes or the tokenizer defines (`bos_token`, a keyword), not one the template
    computes: a name no `{% set %}`, loop or macro of the template binds."""
    while isinstance(node, (nodes.Getattr, nodes.Getitem)):
        node = node.node
    return isinstance(node, nodes.Name) and node.name in given


def _swaps(ast: nodes.Template, src: Source, tainted: dict[str, str]) -> Iterator[SafetyFinding]:
    """A loop over the words of content that writes something else in place of some of them: `{% for w in
    content.split() %}{{ addr if w.startswith('0x') else w }}`."""
    for loop in ast.find_all(nodes.For):
        split: Any = loop.iter.node if isinstance(loop.iter, (nodes.Call, nodes.Filter)) else None
        splits = isinstance(loop.iter, nodes.Filter) and loop.iter.name in ("split", "list", "wordwrap")
        splits = splits or (isinstance(split, nodes.Getattr) and split.attr in ("split", "splitlines", "rsplit"))
        if not (splits and isinstance(loop.target, nodes.Name) and _reads_data(loop.iter, tainted)):
            continue
        word = loop.target.name
        kinds = (nodes.CondExpr, nodes.If)
        for choice in (c for stmt in loop.body for c in [stmt, *stmt.find_all(kinds)] if isinstance(c, kinds)):
            branches: list[Any] = (
                [choice.expr1, choice.expr2]
                if isinstance(choice, nodes.CondExpr)
                else [choice.body, *(e.body for e in choice.elif_), choice.else_]
            )
            reads = [_names(b, word) for b in branches]
            if _names(choice.test, word) and any(reads) and not all(reads) and _writes(branches, reads):
                yield SafetyFinding(
                    "HCT-S015",
                    choice.lineno,
                    src.column(choice.lineno, word),
                    f"a loop over the words of message content (line {loop.lineno}) writes other text in place of "
                    f"some words (condition at line {choice.lineno}): the model is trained or served words the "
                    "conversation did not have",
                    construct=f"swap:{loop.lineno}:{choice.lineno}",
                )


def _names(node: Any, name: str) -> bool:
    parts = node if isinstance(node, list) else [node]
    return any(
        isinstance(n, nodes.Name) and n.name == name
        for p in parts
        if p is not None
        for n in [p, *p.find_all(nodes.Name)]
    )


def _writes(branches: list[Any], reads: list[bool]) -> bool:
    """Whether a branch that does not write the word writes something other than whitespace."""
    for branch, read in zip(branches, reads, strict=True):
        if read or branch is None:  # `w if …` without `else` writes nothing there
            continue
        if isinstance(branch, nodes.Expr):
            written = [branch]
        else:
            written = [e for stmt in branch for out in [stmt, *stmt.find_all(nodes.Output)]
                       if isinstance(out, nodes.Output) for e in out.nodes]  # fmt: skip
        for expr in written:
            value = literal_value(expr) if isinstance(expr, (nodes.Const, nodes.TemplateData)) else UNKNOWN
            if not (isinstance(value, str) and not value.strip()):
                return True
    return False


_NEGATION = re.compile(r"\b(?:not|never|no|cannot|can't|won't|don't|refuse|reject|decline)\b", re.IGNORECASE)


def _unnegated(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    """HCT-S015 (a warning) at a replacement of constants, on any text, whose old string says `not` (`never`,
    `refuse`) more often than the new one: a rule turned around (`replace(', but you will not', ', and you will')`
    on the template's own safety preamble). Markup removed or escaped says no negation."""
    for node in ast.find_all((nodes.Filter, nodes.Call)):
        if (replaced := replace_args(node)) is None:
            continue
        before, after = (folding.value(a) for a in replaced[1][:2])
        if not (isinstance(before, str) and isinstance(after, str)):
            continue
        if len(_NEGATION.findall(before)) > len(_NEGATION.findall(after)) and prose(after or before, words=2):
            yield SafetyFinding(
                "HCT-S015",
                node.lineno,
                src.column(node.lineno, "replace"),
                f"the template replaces {short(before, 60)} with {short(after, 60)}: a negation taken out of text "
                "(a rule of the model's turned around: 'will not provide' made 'will provide')",
                severity="warning",
                construct=f"unnegated {node.lineno}",
            )


def rewrites(ast: nodes.Template, src: Source, folding: Folding) -> Iterator[SafetyFinding]:
    tainted = taint_of(folding)
    yield from _swaps(ast, src, tainted)
    yield from _unnegated(ast, src, folding)
    given = given_of(folding)
    for node, scope in folding.walk():
        found = _replacement(node, tainted)
        if found is not None:
            yield from _rewrite(node, found, src, folding, scope, given)
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
    given: set[str],
) -> Iterator[SafetyFinding]:
    old_node, new_node, how = found
    old, new = folding.value(old_node, scope), folding.value(new_node, scope)
    column = src.column(node.lineno, "replace" if "replace" in how else "split")
    if new is UNKNOWN and not _caller_text(new_node, given):
        yield SafetyFinding(
            "HCT-S015",
            node.lineno,
            column,
            f"{how} rewrites what a message carries with a replacement computed at render time: each {old!r} in it "
            "becomes text no reader of the template can see, so the model is trained or served words the "
            "conversation did not have",
            construct=f"{old}\0<computed>"[:120],
        )
        return
    if old is UNKNOWN and isinstance(new, str) and _new_words("", new):  # `replace(args.to, vault)`: a value swapped
        yield SafetyFinding(
            "HCT-S015",
            node.lineno,
            column,
            f"{how} rewrites what a message carries: a value read from it becomes {new!r}, so the model is trained "
            "or served words the conversation did not have",
            construct=f"<data>\0{new}"[:120],
        )
        return
    if not (isinstance(old, str) and isinstance(new, str)) or not _new_words(old, new):
        return
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
