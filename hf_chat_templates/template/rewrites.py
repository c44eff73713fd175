"""Source rewrites that make a chat template portable: each turns one construct an engine lacks or renders otherwise
into text every engine renders the same, and returns None where the template does not use that construct.

A rewrite here only proposes text. `verification.port` keeps one only where it is proven on every probe
conversation: transformers renders the rewritten template byte for byte as the original, and the engines render it
at least as transformers does as before.

- `whitespace`: transformers renders with `trim_blocks` and `lstrip_blocks`, TGI's minijinja with neither; the
  newline after a `{% ... %}` tag and the indentation before one, which transformers drops, move inside the tag
  (`{% endif\\n%}`, `{%    set x %}`), where no engine writes them (a newline that transformers would then drop in
  its turn is written as `{{ '\\n' }}`).
- `tojson-ensure-ascii`: `tojson(ensure_ascii=False)`: transformers' `tojson` writes non-ASCII as it is already;
  TGI's takes no such argument.
- `is-sameas`: `is sameas true|false|none` (llama.cpp cannot parse `sameas`) as `is true|false|none`.
- `string-methods`: Python string methods transformers' sandbox allows (`.strip()`, `.lower()`, `.upper()`,
  `.replace(a, b)`) as the Jinja filters every engine has.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["REWRITES", "Rewrite", "segments"]


@dataclass(frozen=True)
class Rewrite:
    """One rewrite: its name, the construct it replaces (as findings name it), and the function proposing text."""

    name: str
    construct: str
    apply: Callable[[str], str | None]


_TAG_OPEN = re.compile(r"\{[{%#]")
_CLOSERS = {"{{": "}}", "{%": "%}", "{#": "#}"}
_KINDS = {"{{": "var", "{%": "block", "{#": "comment"}


def _tag_end(src: str, start: int, closer: str) -> int:
    """The index just past the tag opened at `start`, skipping quoted strings inside it; -1 when unclosed."""
    i = start + 2
    while i < len(src):
        char = src[i]
        if closer != "#}" and char in "'\"":
            j = i + 1
            while j < len(src) and src[j] != char:
                j += 2 if src[j] == "\\" else 1
            i = j + 1
            continue
        if src.startswith(closer, i):
            return i + 2
        i += 1
    return -1


def segments(src: str) -> list[tuple[str, str]] | None:
    """The template as (kind, text) pieces in order: "data", "var", "block", "comment"; None when a tag is never
    closed or a `{% raw %}` block holds text the scan cannot tell from tags."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(src):
        m = _TAG_OPEN.search(src, i)
        if m is None:
            out.append(("data", src[i:]))
            break
        if m.start() > i:
            out.append(("data", src[i : m.start()]))
        opener = m.group()
        end = _tag_end(src, m.start(), _CLOSERS[opener])
        if end < 0:
            return None
        text = src[m.start() : end]
        if opener == "{%" and re.match(r"\{%[-+]?\s*raw\b", text):
            return None
        out.append((_KINDS[opener], text))
        i = end
    return out


def _controls(tag: str) -> tuple[str, str]:
    """The whitespace control on each side of a tag: '-', '+' or ''."""
    left = tag[2] if tag[2:3] in ("-", "+") else ""
    right = tag[-3] if tag[-3:-2] in ("-", "+") else ""
    return left, right


def _trims(kind: str) -> bool:
    return kind in ("block", "comment")


def _whitespace(src: str) -> str | None:
    pieces = segments(src)
    if pieces is None:
        return None
    kinds = [kind for kind, _ in pieces]
    texts = [text for _, text in pieces]
    # Decided on the original text, as jinja2's lexer decides: lstrip_blocks drops the indentation before a tag
    # when only spaces or tabs stand between it and the line's start; trim_blocks drops one newline after it.
    lstrip = [False] * len(pieces)
    trim = [False] * len(pieces)
    for k, (kind, tag) in enumerate(pieces):
        if kind not in ("block", "comment"):
            continue
        left, right = _controls(tag)
        if not left and k > 0 and kinds[k - 1] == "data":
            data = texts[k - 1]
            cut = data.rfind("\n") + 1
            line_start = cut > 0 or k - 1 == 0 or (k > 1 and trim[k - 1])
            lstrip[k - 1] = line_start and data[cut:] != "" and not data[cut:].strip(" \t")
        if not right and k + 1 < len(pieces) and kinds[k + 1] == "data":
            trim[k + 1] = texts[k + 1].startswith(("\n", "\r\n"))
    # The whitespace transformers drops moves inside the tag (`{%    set x %}`, `{% endif\n%}`), where every
    # engine reads it as the tag's own spacing: the template keeps its layout and renders the same everywhere.
    for k, kind in enumerate(kinds):
        if kind != "data":
            continue
        data = texts[k]
        stripped_after = k + 1 < len(pieces) and _controls(texts[k + 1])[0] == "-"
        if lstrip[k]:
            cut = data.rfind("\n") + 1
            texts[k + 1] = texts[k + 1][:2] + data[cut:] + texts[k + 1][2:]
            data = data[:cut]
        if trim[k]:
            newline = "\r\n" if data.startswith("\r\n") else "\n"
            texts[k - 1] = texts[k - 1][:-2].rstrip(" ") + newline + texts[k - 1][-2:]
            data = data[len(newline) :]
            if data.startswith(("\n", "\r")) and not (stripped_after and not data.strip()):
                # transformers would drop this newline too, now that it follows the tag: written as an expression
                first = "\r\n" if data.startswith("\r\n") else data[0]
                data = "{{ " + repr(first) + " }}" + data[len(first) :]
        texts[k] = data
    out = "".join(texts)
    return out if out != src else None


_ENSURE_ASCII = re.compile(r"tojson\(\s*ensure_ascii\s*=\s*(?:false|False)\s*\)|,\s*ensure_ascii\s*=\s*(?:false|False)")
_ENSURE_ASCII_FIRST = re.compile(r"(tojson\(\s*)ensure_ascii\s*=\s*(?:false|False)\s*,\s*")


def _ensure_ascii(src: str) -> str | None:
    out = _ENSURE_ASCII_FIRST.sub(r"\1", src)
    out = _ENSURE_ASCII.sub(lambda m: "tojson" if m.group().startswith("tojson") else "", out)
    return out if out != src else None


_SAMEAS = re.compile(r"\bis(\s+not)?\s+sameas\s+(true|false|none|True|False|None)\b")


def _sameas(src: str) -> str | None:
    out = _SAMEAS.sub(lambda m: f"is{m.group(1) or ''} {m.group(2).lower()}", src)
    return out if out != src else None


# A postfix chain a method is called on: a name, then attributes and subscripts without nested brackets.
_CHAIN = r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[[^\[\]]*\])*)"
_METHOD_FILTERS = (
    (re.compile(_CHAIN + r"\.strip\(\s*\)"), "trim"),
    (re.compile(_CHAIN + r"\.lower\(\s*\)"), "lower"),
    (re.compile(_CHAIN + r"\.upper\(\s*\)"), "upper"),
)
_REPLACE = re.compile(_CHAIN + r"\.replace\(([^()]*)\)")


def _string_methods(src: str) -> str | None:
    pieces = segments(src)
    if pieces is None:
        return None
    out = []
    for kind, text in pieces:
        if kind in ("var", "block"):
            for pattern, name in _METHOD_FILTERS:
                text = pattern.sub(rf"(\1 | {name})", text)
            text = _REPLACE.sub(r"(\1 | replace(\2))", text)
        out.append(text)
    rewritten = "".join(out)
    return rewritten if rewritten != src else None


REWRITES = (
    Rewrite("whitespace", "a `{% ... %}` tag or `{# ... #}` comment without whitespace control", _whitespace),
    Rewrite("tojson-ensure-ascii", "`tojson(ensure_ascii=False)`", _ensure_ascii),
    Rewrite("is-sameas", "`is sameas true|false|none`", _sameas),
    Rewrite(
        "string-methods", "Python string methods (`.strip()`, `.lower()`, `.upper()`, `.replace()`)", _string_methods
    ),
)
