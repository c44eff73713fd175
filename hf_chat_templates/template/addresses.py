"""HCT-S014: URLs, domains, e-mail addresses and where money goes (an IBAN, a Bitcoin or Ethereum address) in text a
template writes. No published chat template writes one
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
# The countries whose banks use IBANs, the ones payment fraud names most
_IBAN_COUNTRIES = "AT|BE|CH|CY|CZ|DE|DK|EE|ES|FI|FR|GB|GR|HR|HU|IE|IT|LT|LU|LV|MT|NL|NO|PL|PT|RO|SE|SI|SK|TR|AE|SA|IL"
ADDRESS = re.compile(
    r"(?P<email>[\w.+-]+@[^\W_][\w-]*(?:\.[\w-]+)+)"  # an internationalized (look-alike) domain too
    r"|(?P<url>\b(?:https?|ftp|wss?|file|data|javascript)://[^\s'\"<>)\]]+)"
    r"|(?P<www>\bwww\.[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)"
    r"|(?P<ip>(?<![\d.])(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}\b(?![.\d]))"
    rf"|(?P<domain>\b[A-Za-z0-9][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*\.(?:{_TLDS})\b(?![.\w(]))"
    # where money goes: an IBAN (grouped by fours or not), a Bitcoin or an Ethereum address
    rf"|(?P<iban>\b(?:{_IBAN_COUNTRIES})\d{{2}}(?: ?[A-Z0-9]{{4}}){{3,7}}(?: ?[A-Z0-9]{{1,3}})?\b)"
    r"|(?P<wallet>\b(?:0x[0-9a-fA-F]{40}|bc1[02-9ac-hj-np-z]{25,59})\b)"
)
_WHAT = {
    "email": "e-mail address",
    "url": "URL",
    "www": "domain",
    "domain": "domain",
    "ip": "IP address",
    "iban": "bank account (IBAN)",
    "wallet": "crypto wallet address",
}


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


# An e-mail address given as an identity to configure (`git config user.email`, "as the user.email"): the name a
# tool signs with, not a place the model is steered to send anything (Devstral's default prompt names its scaffold's)
_IDENTITY = re.compile(r"user\.email|git config|--author|committer|author email", re.I)


def severity_of(text: str, what: str, address: str) -> str:
    """'info' for an e-mail address the text gives as an identity to configure; '' (the rule's warning) else."""
    at = text.find(address)
    around = text[max(0, at - 40) : at + len(address) + 40] if at >= 0 else ""
    return "info" if what == "e-mail address" and _IDENTITY.search(around) else ""


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
                "can be steered to repeat (no published chat template writes one)"
                + (", given as an identity to configure" if (level := severity_of(value, what, address)) else ""),
                severity=level,
                construct=address,
            )
