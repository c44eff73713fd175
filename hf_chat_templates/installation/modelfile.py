"""Ollama Modelfiles: written for a translated template (FROM, TEMPLATE, one PARAMETER stop line per stop token)
and read back for `verify --ollama-modelfile` (its TEMPLATE and stops).

Ollama's Modelfile reader (parser/parser.go) takes a value in `\"\"\"…\"\"\"` as it is, newlines included, but ends it
at the first `\"\"\"` and keeps only printable characters, spaces and newlines: a template or stop token it would
change is refused (`ModelfileError`), never written changed. The translation writes any other character with an
action (`gotemplate._text`), so only a literal `\"\"\"` can be refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import HfChatTemplatesError

TRIPLE = '"""'


class ModelfileError(HfChatTemplatesError):
    """A Modelfile that cannot carry the template or stop tokens unchanged, or one that cannot be read."""


@dataclass(frozen=True)
class Modelfile:
    base: str
    template: str | None
    stops: tuple[str, ...] = ()

    def text(self) -> str:
        """The Modelfile, as Ollama's reader takes it back unchanged (raises ModelfileError where it would not)."""
        lines = [f"FROM {_value(self.base, 'FROM')}"]
        if self.template is not None:
            _kept(self.template, "the template")
            if TRIPLE in self.template:
                at = self.template.index(TRIPLE)
                raise ModelfileError(
                    f'the template holds """ at character {at}: a Modelfile\'s TEMPLATE """…""" ends there',
                    hint='write the three quotes with an action, e.g. {{ "\\"\\"\\"" }}',
                )
            lines.append(f"TEMPLATE {TRIPLE}{self.template}{TRIPLE}")
        for stop in self.stops:
            _value(stop, "a stop token")
            lines.append(f"PARAMETER stop {TRIPLE}{stop}{TRIPLE}" if '"' in stop else f'PARAMETER stop "{stop}"')
        return "\n".join(lines) + "\n"


def _kept(text: str, what: str) -> None:
    for at, ch in enumerate(text):
        if not (ch.isprintable() or ch in " \t\n\r"):
            raise ModelfileError(
                f"{what} holds {ch!r} (U+{ord(ch):04X}) at character {at}: Ollama's Modelfile reader drops it",
                hint='write it with an action ({{ "\\uXXXX" }}) instead of as text',
            )


def _value(value: str, what: str) -> str:
    """A one-line value: quoted when it has spaces or quotes at its ends (Ollama's own `quote`)."""
    _kept(value, what)
    if "\n" in value or "\r" in value:
        raise ModelfileError(f"{what} {value!r} holds a newline: a Modelfile value on one line cannot")
    if value.startswith(" ") or value.endswith(" ") or value.startswith('"'):
        if TRIPLE in value:
            raise ModelfileError(f'{what} {value!r} holds """ and spaces at its ends: a Modelfile cannot quote it')
        return f"{TRIPLE}{value}{TRIPLE}" if '"' in value else f'"{value}"'
    return value


_COMMAND = re.compile(r"^(FROM|TEMPLATE|PARAMETER|SYSTEM|ADAPTER|LICENSE|MESSAGE|REQUIRES|RENDERER|PARSER)\s", re.I)


def read_modelfile(text: str) -> Modelfile:
    """FROM, TEMPLATE and the stop parameters of a Modelfile (other commands are read past). Raises
    ModelfileError naming the line of an unterminated quote."""
    base, template, stops = "", None, []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        match = _COMMAND.match(line)
        i += 1
        if not match:
            continue
        rest = line[match.end() :].lstrip(" \t")
        value, i = _read_value(rest, lines, i)
        name = match.group(1).upper()
        if name == "FROM":
            base = value
        elif name == "TEMPLATE":
            template = value
        elif name == "PARAMETER":
            key, _, arg = value.partition(" ")
            if key.lower() == "stop":
                stops.append(_unquote_one(arg.strip()))
    return Modelfile(base, template, tuple(stops))


def _read_value(rest: str, lines: list[str], i: int) -> tuple[str, int]:
    for quote in (TRIPLE, '"'):
        if rest.startswith(quote):
            body = rest[len(quote) :]
            start = i
            while quote not in body:
                if i >= len(lines):
                    raise ModelfileError(f"line {start}: a value opened with {quote} is never closed")
                body += lines[i]
                i += 1
            return body[: body.index(quote)], i
    return rest.strip(), i


def _unquote_one(value: str) -> str:
    for quote in (TRIPLE, '"'):
        if value.startswith(quote) and value.endswith(quote) and len(value) >= 2 * len(quote):
            return value[len(quote) : -len(quote)]
    return value
