"""HCT-S014: URLs, domains and e-mail addresses in text a template writes. No published chat template writes one
(tests/data/templates and the bundled families), and a link the model is shown is the payload of the published
template backdoors: the model is steered to repeat it, in plain text, an HTML comment or an image."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jinja2.nodes as nodes

from .safety_findings import SafetyFinding, Source

# Top-level domains an address in a template would use; a bare `word.word` (`functions.get_weather`,
# `browser.search`, `message.content`) is a name, not a domain, unless it ends in one of these.
_TLDS = (
    "com|net|org|io|ai|dev|app|co|me|info|biz|xyz|site|online|top|ru|cn|de|uk|fr|jp|in|us|cc|tk|ml|ga|cf|gq|ly|gg|"
    "sh|to|link|click|example|invalid|test|local|onion|zip|mov"
)
ADDRESS = re.compile(
    r"(?P<email>[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)"
    r"|(?P<url>\b(?:https?|ftp|wss?|file|data|javascript)://[^\s'\"<>)\]]+)"
    r"|(?P<www>\bwww\.[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)"
    rf"|(?P<domain>\b[A-Za-z0-9][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*\.(?:{_TLDS})\b(?![.\w(]))"
)
_WHAT = {"email": "e-mail address", "url": "URL", "www": "domain", "domain": "domain"}


def addresses_in(text: str) -> Iterator[tuple[str, str]]:
    """(what, address) for each URL, domain and e-mail address in `text`."""
    for match in ADDRESS.finditer(text):
        kind = match.lastgroup or "url"
        yield _WHAT[kind], match.group().rstrip(".,;:")


def written_nodes(ast: nodes.Template) -> set[int]:
    """The ids of the nodes whose value the template writes or keeps to write (in `{{ }}`, raw text, a `{% set %}`),
    leaving out what is only tested (a comparison, a test, a subscript's key) or raised (`raise_exception`)."""
    skipped: set[int] = set()
    for node in ast.find_all((nodes.Compare, nodes.Test, nodes.Getitem, nodes.Call, nodes.If, nodes.CondExpr)):
        if isinstance(node, nodes.Getitem):
            parts: list[nodes.Node] = [node.arg]
        elif isinstance(node, nodes.Call):
            callee = node.node
            parts = list(node.iter_child_nodes()) if getattr(callee, "name", None) == "raise_exception" else []
        elif isinstance(node, (nodes.If, nodes.CondExpr)):
            parts = [node.test]
        else:
            parts = [node]
        for part in parts:
            skipped |= {id(n) for n in part.find_all(nodes.Node)} | {id(part)}
    written: set[int] = set()
    for top in ast.find_all((nodes.Output, nodes.Assign, nodes.AssignBlock)):
        for n in top.find_all(nodes.Node):
            if id(n) not in skipped:
                written.add(id(n))
    return written


def literal_addresses(ast: nodes.Template, src: Source) -> Iterator[SafetyFinding]:
    """HCT-S014 on the literals the template writes (raw text and string constants)."""
    written = written_nodes(ast)
    node: Any
    for node in ast.find_all((nodes.TemplateData, nodes.Const)):
        value = node.data if isinstance(node, nodes.TemplateData) else node.value
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
