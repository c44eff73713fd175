"""Tool calls read back from a rendering, in whatever syntax the template writes them.

`read_call` looks in one span of the rendering (the call's message) for the call's arguments, trying each syntax in
turn and keeping the first that reads a value set:

- JSON: an object holding the call's name and its `arguments` (or `parameters`), or an object holding the call's
  first string argument (Hermes `<tool_call>{...}</tool_call>`, Kimi-K2 `<|tool_call_argument_begin|>{...}`,
  DeepSeek's fenced ```json blocks, Mistral `[TOOL_CALLS]`/`[ARGS]`, Functionary); a JSON string that holds such an
  object is the arguments encoded twice;
- a Python call, `name(a=1, b="x")` (Llama 3.2/4 pythonic): its keywords read as Python literals, a bare word as
  the word it is (a string written without quotes);
- XML parameters: `<parameter=k>v</parameter>` (Qwen3-Coder), `<parameter name="k">v</parameter>` (MiniMax-M2),
  `<arg_key>k</arg_key><arg_value>v</arg_value>` (GLM), each value its text.

`differences` then says, per argument, how what the rendering gives back differs from the data: missing, written
twice, its type or quoting changed. A string is compared as the value it decodes to, so non-ASCII escaped as `\\u`
in JSON is the same value.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")
_JSON_LITERALS = {"true": True, "false": False, "null": None}


@dataclass(frozen=True)
class Bare:
    """A bare word where a Python call wants a literal: `city=Paris`, `exact=true`."""

    word: str


@dataclass(frozen=True)
class Text:
    """An XML parameter's text: untyped, read as the argument's type asks."""

    raw: str


class _Object(dict[str, Any]):
    """A decoded JSON object that remembers the keys it holds more than once."""

    def __init__(self) -> None:
        super().__init__()
        self.repeated: list[str] = []


def _pairs(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object()
    for key, value in pairs:
        if key in obj:
            obj.repeated.append(key)
        obj[key] = value
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs)


@dataclass(frozen=True)
class Reading:
    """A call read back: the syntax, where its arguments start, the values by key, what the syntax itself says
    (`encoded_twice`: a JSON string holding the JSON object; `repeated`: keys written more than once)."""

    syntax: str
    pos: int
    values: dict[str, Any]
    encoded_twice: bool = False
    repeated: tuple[str, ...] = ()


@dataclass(frozen=True)
class Unreadable:
    """A call whose syntax is recognised but does not parse: why, and where."""

    syntax: str
    pos: int
    reason: str


def anchor(arguments: dict[str, Any], sentinels: list[str]) -> tuple[str, str] | None:
    """The first argument whose string value holds one of `sentinels`: (key, sentinel)."""
    for key, value in arguments.items():
        if isinstance(value, str):
            found = next((s for s in sentinels if s in value), None)
            if found is not None:
                return key, found
    return None


# ---- JSON ---------------------------------------------------------------------------------------------------------


def _decoded(text: str, start: int, end: int) -> Iterator[tuple[int, Any]]:
    """(position, value) of each JSON object (or JSON string that starts like one) in text[start:end], outermost
    first, none inside another."""
    pos = start
    while pos < end:
        match = re.compile(r'\{|"[{\[]').search(text, pos, end)
        if match is None:
            return
        try:
            value, stop = _DECODER.raw_decode(text, match.start())
        except ValueError:
            pos = match.start() + 1
            continue
        if stop > end:
            pos = match.start() + 1
            continue
        yield match.start(), value
        pos = stop


def _holders(value: Any, twice: bool = False) -> Iterator[tuple[dict[str, Any], bool]]:
    """Every object inside a decoded value, with whether it came out of a JSON string (encoded twice)."""
    if isinstance(value, dict):
        yield value, twice
        for v in value.values():
            yield from _holders(v, twice)
    elif isinstance(value, list):
        for v in value:
            yield from _holders(v, twice)
    elif isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            inner = _DECODER.decode(value)
        except ValueError:
            return
        yield from _holders(inner, True)


def _json_reading(obj: dict[str, Any], twice: bool, name: str, key: str | None, sentinel: str | None) -> Any:
    """The arguments `obj` holds for the call: (values, encoded twice) or None."""
    called = obj.get("name") if isinstance(obj.get("name"), str) else None
    if called is None and isinstance(obj.get("function"), dict):
        called = obj["function"].get("name")
    if called == name:
        for k in _ARGUMENT_KEYS:
            if k in obj:
                args = obj[k]
                if isinstance(args, str):
                    try:
                        return _DECODER.decode(args), True
                    except ValueError:
                        return None
                if isinstance(args, dict) and not (args.get("type") == "object" and "properties" in args):
                    return args, twice  # (a JSON schema is a tool's definition, not its call)
    if key is not None and sentinel is not None and sentinel in str(obj.get(key, "")):
        return obj, twice
    return None


def _read_json(text: str, start: int, end: int, name: str, key: str | None, sentinel: str | None) -> Reading | None:
    found: list[Reading] = []
    for pos, value in _decoded(text, start, end):
        for obj, twice in _holders(value):
            got = _json_reading(obj, twice, name, key, sentinel)
            if got is None:
                continue
            values, encoded_twice = got
            repeated = tuple(getattr(values, "repeated", ()))
            found.append(Reading("JSON", pos, dict(values), encoded_twice, repeated))
            break
    return _best(found, key, sentinel)


def _best(found: list[Reading], key: str | None, sentinel: str | None) -> Reading | None:
    """The reading that holds the call's anchor, else the first one."""
    for reading in found:
        if key is not None and sentinel is not None and sentinel in str(reading.values.get(key, "")):
            return reading
    return found[0] if found else None


# ---- Python calls -------------------------------------------------------------------------------------------------


def _python_value(node: ast.expr) -> Any:
    if isinstance(node, ast.Name):
        return Bare(node.id)
    return ast.literal_eval(node)


def _read_python(text: str, start: int, end: int, name: str) -> Reading | Unreadable | None:
    match = re.compile(rf"(?<![\w.]){re.escape(name)}\(").search(text, start, end)
    if match is None:
        return None
    error: SyntaxError | None = None
    for close in [m.start() for m in re.finditer(r"\)", text[match.end() : end])][:200]:
        source = text[match.start() : match.end() + close + 1]
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as e:
            error = e
            continue
        if not isinstance(tree.body, ast.Call):
            continue
        values: dict[str, Any] = {}
        for keyword in tree.body.keywords:
            if keyword.arg is None:
                continue
            try:
                values[keyword.arg] = _python_value(keyword.value)
            except ValueError:
                values[keyword.arg] = Bare(ast.unparse(keyword.value))
        return Reading("Python call", match.start(), values)
    if error is None:
        return Unreadable("Python call", match.start(), "the call is never closed with ')'")
    offset = match.start() + (error.offset or 1) - 1
    return Unreadable("Python call", offset, f"it does not parse as a Python call ({error.msg})")


# ---- XML parameters -----------------------------------------------------------------------------------------------

_PARAMETERS = (
    re.compile(r"<parameter=([^>\s]+)>(.*?)</parameter>", re.DOTALL),
    re.compile(r"<parameter name=\"([^\"]+)\">(.*?)</parameter>", re.DOTALL),
    re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL),
)


def _openings(name: str) -> re.Pattern[str]:
    n = re.escape(name)
    return re.compile(rf"<function={n}>|<invoke name=\"{n}\">|<tool_call>\s*{n}(?![\w.])|<function name=\"{n}\">")


def _read_xml(text: str, start: int, end: int, name: str, key: str | None, sentinel: str | None) -> Reading | None:
    opening = _openings(name).search(text, start, end)
    if opening is None:
        return None
    closing = re.compile(r"</function>|</invoke>|</tool_call>").search(text, opening.end(), end)
    stop = closing.start() if closing else end
    values: dict[str, Any] = {}
    repeated = []
    for pattern in _PARAMETERS:
        for m in pattern.finditer(text, opening.end(), stop):
            k, raw = m.group(1).strip(), m.group(2)
            raw = raw[1:] if raw.startswith("\n") else raw
            raw = raw[:-1] if raw.endswith("\n") else raw
            if k in values:
                repeated.append(k)
            values[k] = Text(raw)
    if not values and text[opening.end() : stop].strip():
        return None  # `<tool_call>name` and then something else than parameters: not this syntax
    return Reading("XML parameters", opening.start(), values, repeated=tuple(repeated))


# ---- reading one call ---------------------------------------------------------------------------------------------


def read_call(
    text: str, start: int, end: int, name: str, key: str | None, sentinel: str | None
) -> Reading | Unreadable | None:
    """The call of `name` read back from text[start:end]: the first syntax that reads a value set, else why the
    syntax it looks like does not parse, else None. `key` and `sentinel`: the argument that tells this call from
    others (its value holds the sentinel)."""
    reading = _read_json(text, start, end, name, key, sentinel)
    if reading is not None:
        return reading
    python = _read_python(text, start, end, name)
    if isinstance(python, Reading):
        return python
    xml = _read_xml(text, start, end, name, key, sentinel)
    if xml is not None:
        return xml
    if python is not None:
        return python
    return _broken_json(text, start, end, key, sentinel)


def _broken_json(text: str, start: int, end: int, key: str | None, sentinel: str | None) -> Unreadable | None:
    """JSON that does not parse: the call's key written `"key":` before its sentinel, and the object around it
    failing to decode. Where it fails, and why."""
    if key is None or sentinel is None:
        return None
    at = text.find(sentinel, start, end)
    keyed = list(re.finditer(rf'"{re.escape(key)}"\s*:', text[start:at])) if at >= 0 else []
    if not keyed:
        return None
    key_pos = start + keyed[-1].start()
    depth, brace = 0, -1
    for pos in range(key_pos - 1, start - 1, -1):
        if text[pos] == "}":
            depth += 1
        elif text[pos] == "{":
            if depth == 0:
                brace = pos
                break
            depth -= 1
    if brace < 0:
        return None
    try:
        _DECODER.raw_decode(text, brace)
    except json.JSONDecodeError as e:
        return Unreadable("JSON", e.pos, f"it does not parse as JSON ({e.msg})")
    return None


# ---- comparing with the data --------------------------------------------------------------------------------------


def _text_value(raw: str, expected: Any) -> Any:
    """An XML parameter's text as the argument's type reads it: a string as it is, anything else as JSON or a Python
    literal (both are what such templates write: `| tojson`, or `| string` giving True and None)."""
    if isinstance(expected, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        pass
    try:
        return ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError):
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
    if isinstance(got, Bare):
        if isinstance(expected, str) and got.word == expected:
            return "a string written without quotes (a bare word where the call needs a string literal)"
        if got.word in _JSON_LITERALS and _JSON_LITERALS[got.word] is expected:
            return f"written as JSON's {got.word!r} inside a Python call, where Python writes {expected!r}"
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
