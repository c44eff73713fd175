"""HCT-S014: URLs, domains and e-mail addresses in text a template writes. No published chat template writes one
(tests/data/templates and the bundled families), and a link the model is shown is the payload of the published
template backdoors: the model is steered to repeat it, in plain text, an HTML comment or an image."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

import jinja2.nodes as nodes

from .safety_findings import SafetyFinding, Source, literal_value

# Top-level domains an address in a template would use; a bare `word.word` (`functions.get_weather`,
# `browser.search`, `message.content`) is a name, not a domain, unless it ends in one of these.
_TLDS = (  # not `sh`, `zip`, `mov`, `local`: file and code names (`install.sh`) end in them more often than links
    "com|net|org|io|ai|dev|app|co|me|info|biz|xyz|site|online|top|ru|cn|de|uk|fr|jp|in|us|cc|tk|ml|ga|cf|gq|ly|gg|"
    "to|link|click|example|invalid|test|onion"
)
ADDRESS = re.compile(
    r"(?P<email>[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)"
    r"|(?P<url>\b(?:https?|ftp|wss?|file|data|javascript)://[^\s'\"<>)\]]+)"
    r"|(?P<www>\bwww\.[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)"
    r"|(?P<ip>(?<![\d.])(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}\b(?![.\d]))"
    rf"|(?P<domain>\b[A-Za-z0-9][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*\.(?:{_TLDS})\b(?![.\w(]))"
)
_WHAT = {"email": "e-mail address", "url": "URL", "www": "domain", "domain": "domain", "ip": "IP address"}


# A run that may be base64: a published template writes none, and the backdoors hide links in it
_BASE64 = re.compile(r"(?<![\w+/])[A-Za-z0-9+/]{24,}={0,2}(?![\w+/=])")


def _decoded(run: str) -> str | None:
    """The text a base64 run encodes, when it is text (printable, with words or an address)."""
    try:
        text = base64.b64decode(run + "=" * (-len(run) % 4), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    if not text.isprintable() or (len(re.findall(r"[^\W\d_]{3,}", text)) < 2 and not ADDRESS.search(text)):
        return None
    return text


def addresses_in(text: str) -> Iterator[tuple[str, str]]:
    """(what, address) for each URL, domain, IP and e-mail address in `text`, and each base64 run that encodes
    text (`base64 text` and what it decodes to, which may hold an address)."""
    for match in ADDRESS.finditer(text):
        kind = match.lastgroup or "url"
        yield _WHAT[kind], match.group().rstrip(".,;:")
    for match in _BASE64.finditer(text):
        decoded = _decoded(match.group())
        if decoded is not None:
            yield f"base64 text (decoding to {decoded[:80]!r})", match.group()


def written_nodes(ast: nodes.Template) -> set[int]:
    """The ids of the nodes whose value the template writes or keeps to write (in `{{ }}`, raw text, a `{% set %}`),
    leaving out what is only tested (a comparison, a test, a condition, a subscript's key) or raised
    (`raise_exception`). One walk of the tree."""
    written: set[int] = set()

    def tested(node: nodes.Node) -> set[int]:
        """The ids of `node`'s children that are only tested, never written."""
        if isinstance(node, (nodes.Compare, nodes.Test)) or (
            isinstance(node, nodes.Call) and getattr(node.node, "name", None) == "raise_exception"
        ):
            return {id(c) for c in node.iter_child_nodes()}
        if isinstance(node, nodes.Getitem):
            return {id(node.arg)}
        if isinstance(node, (nodes.If, nodes.CondExpr)):
            return {id(node.test)}
        return set()

    def walk(node: nodes.Node, writing: bool) -> None:
        if writing:
            written.add(id(node))
        skipped = tested(node)
        for child in node.iter_child_nodes():
            inside = isinstance(child, (nodes.Output, nodes.Assign, nodes.AssignBlock)) or writing
            walk(child, inside and id(child) not in skipped)

    walk(ast, False)
    return written


def literal_addresses(ast: nodes.Template, src: Source) -> Iterator[SafetyFinding]:
    """HCT-S014 on the literals the template writes (raw text and string constants)."""
    written = written_nodes(ast)
    node: Any
    for node in ast.find_all((nodes.TemplateData, nodes.Const)):
        value = literal_value(node)
        if not isinstance(value, str) or id(node) not in written:
            continue
        for what, address in addresses_in(value):
            row = node.lineno + value[: value.find(address)].count("\n")
            yield SafetyFinding(
                "HCT-S014",
                row,
                src.column(row, address),
                f"the template writes the {what} {address!r}: a link or address the model is shown is one it "
                "can be steered to repeat (no published chat template writes one)",
                construct=address,
            )


def _first_is_system(test: nodes.Node, folding: Any) -> str | None:
    """'else' when `test` asks whether the first message is a system message (`messages[0]['role'] == 'system'`),
    'body' when it asks whether it is not, else None."""
    if not isinstance(test, nodes.Compare) or len(test.ops) != 1 or test.ops[0].op not in ("eq", "ne"):
        return None
    sides = [test.expr, test.ops[0].expr]
    first = any(
        isinstance(s, (nodes.Getattr, nodes.Getitem))
        and (s.attr if isinstance(s, nodes.Getattr) else folding.value(s.arg)) == "role"
        and isinstance(s.node, nodes.Getitem)
        and folding.value(s.node.arg) == 0
        for s in sides
    )
    if not first or "system" not in [folding.value(s) for s in sides]:
        return None
    return "else" if test.ops[0].op == "eq" else "body"


def default_prompts(ast: nodes.Template, folding: Any) -> list[str]:
    """The texts of the template's default system prompt: what it writes or keeps (a literal, a variable of one)
    only when the conversation does not begin with a system message. Any system message the caller gives
    replaces them."""
    texts: list[str] = []
    for node in ast.find_all(nodes.If):
        branch = _first_is_system(node.test, folding)
        if branch is None:
            continue
        for stmt in node.else_ if branch == "else" else node.body:
            for sub in [stmt, *stmt.find_all((nodes.Const, nodes.TemplateData, nodes.Name))]:
                value = folding.value(sub) if isinstance(sub, (nodes.Name, nodes.Const, nodes.TemplateData)) else None
                if isinstance(value, str) and value.strip():
                    texts.append(value)
    return texts
