"""Which Jinja construct makes an engine fail or render differently, and the portable way to write it.

`blame_error` reads an engine's error (a parse error, an unknown filter, test or method) and `blame_difference`
a rendering that differs from transformers' (llama.cpp's `format` that writes `%s` as it is, TGI's `tojson` that
escapes `'<>&`); each returns a `Blame` naming the construct, where the template writes it, and the rewrite every
engine renders the same, or None when nothing known explains it. An engine's own documented behaviour, which no
rewrite of the construct avoids, is a `Blame` with `behaviour=True`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Blame:
    """The construct to blame (`is sameas true`), its first line in the template (None when not found there), the
    portable rewrite, and whether it is the engine's documented behaviour rather than a construct it lacks."""

    construct: str
    line: int | None
    rewrite: str
    behaviour: bool = False

    def describe(self, engine: str) -> str:
        where = f" (template line {self.line})" if self.line else ""
        if self.behaviour:
            return f"{self.construct}{where}: {self.rewrite}"
        return f"{engine} does not support {self.construct}{where}; write {self.rewrite}"


# Python string methods transformers' sandbox allows, and what every engine renders the same instead.
_METHOD_REWRITES = {
    "strip": "`| trim`",
    "lstrip": "`| trim` (or slicing once the prefix is known)",
    "rstrip": "`| trim` (or slicing once the suffix is known)",
    "upper": "`| upper`",
    "lower": "`| lower`",
    "title": "`| title`",
    "capitalize": "`| capitalize`",
    "replace": "`| replace(old, new)`",
    "startswith": "a slice comparison: `s[:3] == 'abc'`",
    "endswith": "a slice comparison: `s[-3:] == 'abc'`",
    "removeprefix": "a slice once tested: `s[3:] if s[:3] == 'abc' else s`",
    "removesuffix": "a slice once tested: `s[:-3] if s[-3:] == 'abc' else s`",
    "split": "`| split` where the engine has it, or a loop over the string computed before rendering",
    "format": "concatenation with `~`: `'<' ~ x ~ '>'`",
    "join": "`| join(sep)`",
    "items": "a loop over the keys: `{% for k in d %}{{ d[k] }}{% endfor %}`",
    "get": "`d[key] if key in d else default`",
}
_FILTER_REWRITES = {
    "escape": "nothing: a chat template writes text as it is, never HTML-escaped",
    "e": "nothing: a chat template writes text as it is, never HTML-escaped",
    "wordcount": "a count computed before rendering, passed as a kwarg",
}
_ENGINE_ERRORS = (
    # llama.cpp: "Callee is not a function: got Undefined (hint: 'removeprefix')"; minijinja: "string has no method
    # named removeprefix"
    (re.compile(r"hint: '(\w+)'|has no method named (\w+)"), "method"),
    (re.compile(r"[Uu]nknown \(built-in\) filter '(\w+)'|unknown filter: filter (\w+) is unknown"), "filter"),
    (re.compile(r"[Uu]nknown test '(\w+)'|unknown test: test (\w+) is unknown"), "test"),
    (re.compile(r"unknown keyword argument '(\w+)'"), "keyword"),
)
# A filter the engine has, applied to a null value the engine passes as given: llama.cpp's "Unknown (built-in)
# filter 'length' for type None", transformers.js's 'Cannot apply filter "length" to type: UndefinedValue'.
_ON_NULL = re.compile(
    r"filter '(\w+)' for type (?:None|Undefined)|apply filter \"(\w+)\" to type: (?:UndefinedValue|NullValue)"
)
_SAMEAS = re.compile(r"\bis\s+(?:not\s+)?sameas\s+(\w+)")
_MAP_FILTER = re.compile(r"map\(\s*['\"](\w+)['\"]")
_FORMAT = re.compile(r"\|\s*format\s*\(")
# A block tag or comment that does not trim both sides: transformers' trim_blocks/lstrip_blocks eat the whitespace
# there.
_UNTRIMMED = re.compile(r"\{([%#])(?!-)[^%#]*[%#]\}|\{([%#])-[^%#]*(?<!-)[%#]\}")
_TOJSON_ESCAPES = {"\\u0027": "'", "\\u003c": "<", "\\u003e": ">", "\\u0026": "&"}


def _line(template: str, pattern: re.Pattern[str] | str) -> int | None:
    found = re.search(pattern, template)
    return template.count("\n", 0, found.start()) + 1 if found else None


def blame_error(engine: str, template: str, error: str) -> Blame | None:
    """The construct an engine's error points at, found in the template, with its portable rewrite."""
    if (m := _SAMEAS.search(template)) and engine == "llama.cpp" and "arser" in error:
        target = m.group(1)
        rewrite = "`is none`" if target.lower() == "none" else f"`is {target.lower()}` or `== {target.lower()}`"
        return Blame(f"`is sameas {target}`", _line(template, _SAMEAS), rewrite)
    if (m := _MAP_FILTER.search(template)) and "filter-mapping" in error:
        name = m.group(1)
        rewrite = (
            f"a loop: `{{% for x in items %}}{{{{ x | {name} }}}}{{% if not loop.last %}}, {{% endif %}}{{% endfor %}}`"
        )
        return Blame(f"`map('{name}')`", _line(template, _MAP_FILTER), rewrite)
    if m := _ON_NULL.search(error):
        name = next(g for g in m.groups() if g)
        if "Undefined" not in m.group():
            return Blame(
                f"the filter `| {name}` applied to a null value",
                _line(template, rf"\|\s*{name}\b"),
                f"`(x or []) | {name}`, or test `x is not none` first ({engine} passes null fields such as "
                "tool_calls: null and content: null as given, where transformers drops them)",
            )
        return Blame(  # the engine does not say which: a null it passes as given, or a key the data leaves out
            f"the filter `| {name}` applied to a null or missing value",
            _line(template, rf"\|\s*{name}\b"),
            f"`(x or []) | {name}`, or test `x is defined and x is not none` first ({engine} passes null fields such "
            "as tool_calls: null as given, and raises on a filter of a key the data leaves out, such as a tool's "
            "`parameters`, where transformers renders it as empty)",
        )
    for pattern, kind in _ENGINE_ERRORS:
        if (m := pattern.search(error)) is None:
            continue
        name = next(g for g in m.groups() if g)
        return _named(engine, template, kind, name)
    return None


def _named(engine: str, template: str, kind: str, name: str) -> Blame:
    if kind == "method":
        rewrite = _METHOD_REWRITES.get(name, "a Jinja filter every engine has, or a value computed before rendering")
        return Blame(f"the Python method `.{name}()`", _line(template, rf"\.{name}\s*\("), rewrite)
    if kind == "filter":
        rewrite = _FILTER_REWRITES.get(name, "a filter every engine has (trim, replace, join, tojson, length, ...)")
        return Blame(f"the filter `| {name}`", _line(template, rf"\|\s*{name}\b"), rewrite)
    if kind == "test":
        return Blame(f"the test `is {name}`", _line(template, rf"\bis\s+(?:not\s+)?{name}\b"), "`==` or `is defined`")
    if name in ("ensure_ascii", "separators", "sort_keys") and engine == "tgi":
        return Blame(
            f"`tojson({name}=...)`",
            _line(template, rf"tojson\s*\([^)]*{name}"),
            "`| tojson` (TGI's tojson takes only `indent`, and writes non-ASCII text as it is)",
        )
    return Blame(f"the keyword argument `{name}=`", _line(template, rf"\b{name}\s*="), "the call without it")


def blame_difference(engine: str, template: str, ours: str, theirs: str, pos: int) -> Blame | None:
    """What explains the engine's rendering `theirs` differing from transformers' `ours` at `pos`."""
    if _FORMAT.search(template) and re.match(r"%[sdrf]", theirs[pos : pos + 2]):
        return Blame("`'...%s...' | format(x)`", _line(template, _FORMAT), "concatenation with `~`: `'<' ~ x ~ '>'`")
    if engine == "tgi" and theirs[pos : pos + 1].isspace() and (line := _line(template, _UNTRIMMED)):
        return Blame(
            "a `{% ... %}` tag or `{# ... #}` comment without whitespace control",
            line,
            "`{%- ... -%}` (`{#- ... -#}`) where the line break and indentation around it must not be written: "
            "transformers renders with trim_blocks and lstrip_blocks, TGI with neither",
        )
    if any(theirs.startswith(code, pos) for code in _TOJSON_ESCAPES):
        unescaped = theirs
        for code, char in _TOJSON_ESCAPES.items():
            unescaped = unescaped.replace(code, char)
        if unescaped == ours:
            return Blame(
                "`| tojson`",
                _line(template, r"tojson"),
                f"{engine}'s own tojson writes ' < > & as \\u0027 \\u003c \\u003e \\u0026 (HTML-safe JSON, "
                "documented minijinja behaviour): the same JSON value, but other text than the model was trained "
                "on; no template rewrite avoids it, so train on what the engine serves or keep these characters "
                "out of tool schemas and JSON-written values",
                behaviour=True,
            )
    return None
