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


# A format-string field, `{name}` or `${name}`, never part of a Jinja `{{ … }}`.
FIELD = re.compile(r"(?<!\{)\$?\{[A-Za-z_][A-Za-z0-9_]{0,40}\}(?!\})")
# A letter or a digit: prose, where a syntax description holds markup alone.
_WORDY = re.compile(r"[^\W_]")


def _laid_out(line: str) -> bool:
    """A line of fields and markup alone: at least one field, and no letter or digit outside the fields."""
    return FIELD.search(line) is not None and _WORDY.search(FIELD.sub("", line)) is None


def syntax_description(text: str, at: int) -> str | None:
    """The lines around `at` when the placeholder there is one of several format-string fields laid out by markup
    alone, with no prose between them: `<{start_tag}={function_name}>{parameters}{end_tag}` or `>>>${recipient}` over
    `${content}`. Such lines describe a syntax (the shape of a call the model is to write), and the model is meant to
    read the fields as written; a field alone on its line, or one in a sentence (`You are {system_message}.`), is a
    value left unfilled. None when the placeholder at `at` is not such a field."""
    if FIELD.match(text, at) is None:  # `{{ tools }}`, `{% … %}`, `$SYSTEM`: never a field of a syntax
        return None
    lines = text.split("\n")
    index = text.count("\n", 0, at)
    if not _laid_out(lines[index]):
        return None
    first, last = index, index
    while first > 0 and _laid_out(lines[first - 1]):
        first -= 1
    while last + 1 < len(lines) and _laid_out(lines[last + 1]):
        last += 1
    run = lines[first : last + 1]
    fields = sum(len(FIELD.findall(line)) for line in run)
    markup = "".join(FIELD.sub("", line) for line in run).strip()
    return "\n".join(run) if fields >= 2 and markup else None
