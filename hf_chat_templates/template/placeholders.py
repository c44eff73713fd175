"""Placeholders a template writes as text: `{system_message}`, `{{ tools }}`, `{content}`, `$SYSTEM`, `{% … %}`.

A template that copies a prompt from a model card, or nests a Jinja expression inside a string literal, writes the
placeholder itself into the prompt: the model reads the braces, never the value they name. A placeholder counts only
where the template's own literals hold it (so message content, tool schemas and JSON never count)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from .syntax import template_literals

# `{{ tools }}` / `{{- x.y -}}`, `{% … %}`, `{name}` (a format-string field: an identifier alone in braces, never
# JSON, whose keys are quoted), `$SYSTEM` / `${SYSTEM}` (three capitals or more: not a price, not `$x`).
PLACEHOLDER = re.compile(
    r"\{\{-?[ \t]*[A-Za-z_][\w.\[\]'\"]*[ \t]*-?\}\}"
    r"|\{%-?[^\n%]{1,80}-?%\}"
    r"|\{[A-Za-z_][A-Za-z0-9_]{0,40}\}"
    r"|\$\{[A-Z][A-Z0-9_]{2,40}\}|\$[A-Z][A-Z0-9_]{2,40}\b"
)


@lru_cache(maxsize=32)
def literal_placeholders(template: str) -> frozenset[str]:
    """Every placeholder the template's literals hold."""
    try:
        literals = template_literals(template)
    except Exception:  # a template that does not parse writes nothing; `renders` reports it
        return frozenset()
    return frozenset(PLACEHOLDER.findall(literals))


def placeholders_written(template: str, text: str, own: str = "") -> Iterator[tuple[int, str]]:
    """(position, placeholder) for each placeholder in the rendering `text` that the template's literals hold and
    `own` (what the conversation itself brings: its contents and tools, as text) does not."""
    wanted = literal_placeholders(template)
    if not wanted:
        return
    for match in PLACEHOLDER.finditer(text):
        if match.group() in wanted and match.group() not in own:
            yield match.start(), match.group()
