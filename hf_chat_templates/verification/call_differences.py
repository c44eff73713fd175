"""How a tool call read back from a rendering (`call_syntax.read_call`) differs from the data, per argument:
missing, written twice, its type, quoting or escaping changed. A string is compared as the value it decodes to, so
non-ASCII escaped as `\\u` in JSON is the same value; an XML parameter's text is read as its argument's type asks."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from typing import Any

from .call_syntax import JSON_LITERALS, Bare, Reading, Text


@dataclass(frozen=True)
class _PythonLiteral:
    """An XML parameter's text that is no JSON but a Python literal (`True`, `None`, `{'a': 1}`): what `| string`
    writes of a value that is not a string."""

    raw: str
    value: Any


def _text_value(raw: str, expected: Any) -> Any:
    """An XML parameter's text as the argument's type reads it: a string as it is, anything else as JSON (what
    `| tojson` writes, and what the parsers of these formats read); a Python literal is kept apart to be named."""
    if isinstance(expected, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        pass
    try:
        return _PythonLiteral(raw.strip(), ast.literal_eval(raw.strip()))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return Text(raw)


def _kind(value: Any) -> str:
    if isinstance(value, (Bare, Text)):
        return f"the bare text {value.word if isinstance(value, Bare) else value.raw!r}"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {_short(value)}"
    if isinstance(value, dict):
        return "an object"
    return "a list"


def _short(value: str, width: int = 50) -> str:
    return repr(value if len(value) <= width else value[: width - 1] + "…")


def mismatch(expected: Any, got: Any, syntax: str) -> str | None:
    """How `got` (read back in `syntax`) differs from `expected`, in words; None when it is the same value."""
    if isinstance(got, Text):
        got = _text_value(got.raw, expected)
    if isinstance(got, _PythonLiteral):
        written = json.dumps(expected, ensure_ascii=False)
        same = "" if _same(expected, got.value) else f" (read as Python: {_kind(got.value)})"
        return (
            f"{_kind(expected)}, written as the Python literal {_short(got.raw)}{same} where the syntax writes "
            f"JSON ({_short(written)}): the model learns Python's spelling, which a JSON parser does not read"
        )
    if isinstance(got, Bare):
        if isinstance(expected, str) and got.word == expected:
            return "a string written without quotes (a bare word where the call needs a string literal)"
        if got.word in JSON_LITERALS and JSON_LITERALS[got.word] is expected:
            return f"written as JSON's {got.word!r} inside a Python call, where Python writes {expected!r}"
        if got.word in ("True", "False", "None") and syntax != "Python call":
            return f"{_kind(expected)}, written as the Python literal {got.word!r} where the syntax writes JSON's"
        return f"written as {got.word!r}, which is no literal"
    if isinstance(got, Text):
        return f"{_kind(expected)}, written as {got.raw!r}, which reads as no value of its type"
    if isinstance(expected, dict) and isinstance(got, dict):
        return _object_mismatch(expected, got, syntax)
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        for i, (e, g) in enumerate(zip(expected, got)):
            if (why := mismatch(e, g, syntax)) is not None:
                return f"item {i}: {why}"
        return None
    if _same(expected, got):
        return None
    if isinstance(got, str) and not isinstance(expected, str):
        try:
            if _same(expected, json.loads(got)):
                return f"{_kind(expected)}, written as the string {_short(got)} (its JSON inside a string)"
        except ValueError:
            pass
        return f"{_kind(expected)}, written as the string {_short(got)}"
    return f"{_kind(expected)}, written as {_kind(got)}"


def _object_mismatch(expected: dict[str, Any], got: dict[str, Any], syntax: str) -> str | None:
    for k, e in expected.items():
        if k not in got:
            extra = sorted(set(got) - set(expected))
            return f"its key {k!r} is missing" + (
                f" (the rendering has {', '.join(map(repr, extra))})" if extra else ""
            )
        if (why := mismatch(e, got[k], syntax)) is not None:
            return f"its key {k!r}: {why}"
    return None


def _same(expected: Any, got: Any) -> bool:
    if isinstance(expected, bool) or expected is None or isinstance(got, bool) or got is None:
        return expected is got
    if isinstance(expected, (int, float)):
        return isinstance(got, (int, float)) and expected == got
    return type(expected) is type(got) and expected == got


def differences(reading: Reading, arguments: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, what is wrong) for each argument the reading does not give back as the data says, in the data's
    order; keys the data does not have are named where they stand for a missing one."""
    found = []
    extra = [k for k in reading.values if k not in arguments]
    for key, expected in arguments.items():
        if key not in reading.values:
            instead = f" (the call has {', '.join(map(repr, extra))} instead)" if extra else ""
            found.append((key, f"missing from the call{instead}"))
            continue
        if key in reading.repeated:
            found.append((key, "written twice"))
            continue
        why = mismatch(expected, reading.values[key], reading.syntax)
        if why is not None:
            found.append((key, why))
    return found
