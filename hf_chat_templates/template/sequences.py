"""Folding of the filters that put a constant list in order or pick from its items: `sort(attribute=…)`,
`map(attribute=…)`, `dictsort`, `unique`, `min`, `max`, and `.items()` of a constant dict; and of the byte codecs.
Jinja's own semantics on constants only (`attribute='0'` reads item 0, as Jinja's attribute getter does); anything
else is `UNKNOWN`.

    >>> fold_sequence("sort", [[2, 'b'], [1, 'a']], [], {"attribute": "0"}, unknown=None)
    [[1, 'a'], [2, 'b']]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jinja2.nodes as nodes

_SEQUENCE_FILTERS = frozenset({"sort", "map", "dictsort", "unique", "min", "max", "items"})
# Filters `map` applies to each string of a list, as Jinja would
_TEXT_MAPS: dict[str, Callable[[str], str]] = {
    "reverse": lambda v: v[::-1],
    "upper": str.upper,
    "lower": str.lower,
    "title": str.title,
    "capitalize": str.capitalize,
    "trim": str.strip,
    "string": str,
}


def _getter(attribute: Any) -> Any:
    parts: list[Any] = [int(p) if p.isdigit() else p for p in str(attribute).split(".")]

    def get(item: Any) -> Any:
        for part in parts:
            if isinstance(item, dict) or (isinstance(item, (list, tuple, str)) and isinstance(part, int)):
                item = item[part]
            else:
                raise LookupError(part)
        return item

    return get


def hashable(value: Any) -> Any:
    """A folded list used as a dict key (`{('pip', 'npm'): …}`) as the tuple Jinja makes of it."""
    return tuple(hashable(v) for v in value) if isinstance(value, list) else value


def fold_sequence(name: str, value: Any, args: list[Any], kwargs: dict[str, Any], *, unknown: Any) -> Any:
    """The value of `value | name(*args, **kwargs)` for the filters above, or `unknown`."""
    texts = isinstance(value, list) and all(isinstance(v, str) for v in value)
    if name == "map" and len(args) == 1 and args[0] in _TEXT_MAPS and not kwargs and texts:
        return [_TEXT_MAPS[args[0]](v) for v in value]  # `words | map('reverse')`: each word written backwards
    if name not in _SEQUENCE_FILTERS or args:
        return unknown
    try:
        if name in ("dictsort", "items") and isinstance(value, dict) and not kwargs:
            pairs = [[k, v] for k, v in value.items()]
            return sorted(pairs, key=lambda p: str(p[0])) if name == "dictsort" else pairs
        if not isinstance(value, list):
            return unknown
        key = _getter(kwargs["attribute"]) if "attribute" in kwargs else None
        if name == "map" and key is not None:
            return [key(v) for v in value]
        if name == "sort" and set(kwargs) <= {"attribute", "reverse", "case_sensitive"}:
            return sorted(value, key=key, reverse=bool(kwargs.get("reverse")))
        if name in ("min", "max") and value and set(kwargs) <= {"attribute"}:
            return (min if name == "min" else max)(value, key=key)
        if name == "unique" and not kwargs:
            return list(dict.fromkeys(hashable(v) for v in value))
    except (LookupError, TypeError, ValueError):
        return unknown
    return unknown


def bind(target: nodes.Node, item: Any) -> dict[str, Any]:
    """The names a loop's target binds to one item: `x`, or `k, v` unpacking a pair (`for k, v in d | dictsort`)."""
    if isinstance(target, nodes.Name):
        return {target.name: item}
    names = [str(getattr(t, "name", "")) for t in getattr(target, "items", [])]
    if isinstance(item, (list, tuple)) and len(item) == len(names) and all(names):
        return dict(zip(names, item, strict=True))
    return {}


def fold_table(base: str, method: str, args: list[Any], *, unknown: Any) -> Any:
    """`a.maketrans(x, y)` (a table of code points) and `s.translate(table)` on constants: a substitution cipher
    decoded as Python would, so the rules read the text it spells."""
    if method == "maketrans" and len(args) == 2 and all(isinstance(a, str) for a in args):
        return str.maketrans(args[0], args[1]) if len(args[0]) == len(args[1]) else unknown
    if method == "translate" and len(args) == 1 and isinstance(args[0], dict):
        table = args[0]
        small = all(isinstance(k, int) and (v is None or isinstance(v, int) or len(v) <= 4) for k, v in table.items())
        try:  # a value of up to 4 characters keeps the text within 4 times the literal's size
            return base.translate(table) if small else unknown
        except (TypeError, ValueError):
            return unknown
    return unknown


# Methods that turn text into bytes and back (`'e2808b'.encode().fromhex('e2808b').decode()`): folded with the
# codecs below, so that characters decoded at render time are read as the ones a literal would spell
CODEC_METHODS = frozenset({"encode", "decode", "fromhex", "hex"})
_CODECS = frozenset({"utf-8", "utf8", "ascii", "latin-1", "latin1", "unicode_escape", "raw_unicode_escape", "utf-16"})


def fold_codec(base: str | bytes, method: str, args: list[Any], *, unknown: Any) -> Any:
    """`.encode`, `.decode`, `.fromhex`, `.hex` on constants, with the codecs above."""
    codec = str(args[0] if args else "utf-8")
    if len(args) > 1 or (method in ("encode", "decode") and codec.lower() not in _CODECS):
        return unknown
    if method == "encode" and isinstance(base, str):
        return base.encode(codec)
    if method == "decode" and isinstance(base, bytes):
        return base.decode(codec)
    if method == "fromhex" and len(args) == 1 and isinstance(args[0], str):
        return bytes.fromhex(args[0])
    return base.hex() if method == "hex" and isinstance(base, bytes) and not args else unknown
