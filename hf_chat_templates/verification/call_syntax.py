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
  `<arg_key>k</arg_key><arg_value>v</arg_value>` (GLM), each value its text;
- Gemma 4's `call:name{k:<|"|>v<|"|>,n:3}`: strings between `<|"|>`, other values as in JSON. It comes first when
  its opening stands before a JSON object: JSON inside its braces is the arguments written in the wrong syntax.

A syntax recognised by its opening that then does not parse is `Unreadable`, with where and why; a call no syntax
recognises is None (its values cannot be checked).

`call_differences.differences` then says how what the rendering gives back differs from the data.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")
JSON_LITERALS = {"true": True, "false": False, "null": None}


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


def _read_xml(text: str, start: int, end: int, name: str) -> Reading | None:
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


# ---- Gemma's calls ------------------------------------------------------------------------------------------------

_QUOTE = '<|"|>'


class _Stop(Exception):
    def __init__(self, pos: int, reason: str) -> None:
        super().__init__(reason)
        self.pos, self.reason = pos, reason


class _Unknown(Exception):
    """A bare value the syntax has no reading for (a string between other quotes than Gemma's)."""


def _bare_value(word: str) -> Any:
    if word in JSON_LITERALS:
        return JSON_LITERALS[word]
    if word in ("True", "False", "None"):
        return Bare(word)
    try:
        return json.loads(word)
    except ValueError:
        raise _Unknown(word) from None


class _GemmaCall:
    """Gemma 4's `call:name{key:value,...}`: strings between `<|"|>`, objects and lists as in JSON, keys bare."""

    def __init__(self, text: str, pos: int, end: int) -> None:
        self.text, self.pos, self.end = text, pos, end
        self.repeated: list[str] = []

    def _quoted(self) -> str:
        close = self.text.find(_QUOTE, self.pos + len(_QUOTE), self.end)
        if close < 0:
            raise _Stop(self.pos, 'a string is never closed with <|"|>')
        found = self.text[self.pos + len(_QUOTE) : close]
        self.pos = close + len(_QUOTE)
        return found

    def value(self) -> Any:
        if self.text.startswith(_QUOTE, self.pos):
            return self._quoted()
        if self.text[self.pos : self.pos + 1] == "{":
            return self.object()
        if self.text[self.pos : self.pos + 1] == "[":
            items: list[Any] = []
            self.pos += 1
            while self.text[self.pos : self.pos + 1] != "]":
                items.append(self.value())
                self._separator("]")
            self.pos += 1
            return items
        word = re.compile(r"[^,}\]]*").match(self.text, self.pos, self.end)
        assert word is not None
        self.pos = word.end()
        return _bare_value(word.group(0))

    def _separator(self, closing: str) -> None:
        if self.text[self.pos : self.pos + 1] == ",":
            self.pos += 1
        elif self.text[self.pos : self.pos + 1] != closing:
            raise _Stop(self.pos, f"',' or {closing!r} expected, found {self.text[self.pos : self.pos + 12]!r}")

    def object(self, top: bool = False) -> dict[str, Any]:
        found: dict[str, Any] = {}
        self.pos += 1
        while self.text[self.pos : self.pos + 1] != "}":
            if self.text.startswith(_QUOTE, self.pos):
                key = self._quoted()
            else:
                word = re.compile(r"[^:{}\[\],<]+").match(self.text, self.pos, self.end)
                if word is None:
                    raise _Stop(self.pos, f"a key expected, found {self.text[self.pos : self.pos + 12]!r}")
                key, self.pos = word.group(0), word.end()
            if self.text[self.pos : self.pos + 1] != ":":
                raise _Stop(self.pos, f"':' expected after the key {key!r}")
            self.pos += 1
            if key in found and top:
                self.repeated.append(key)
            found[key] = self.value()
            self._separator("}")
        self.pos += 1
        return found


def _read_gemma(text: str, start: int, end: int, name: str) -> Reading | Unreadable | None:
    match = re.compile(rf"call:{re.escape(name)}\{{").search(text, start, end)
    if match is None:
        return None
    call = _GemmaCall(text, match.end() - 1, end)
    try:
        values = call.object(top=True)
    except _Unknown:
        return None
    except (_Stop, IndexError) as e:
        pos = e.pos if isinstance(e, _Stop) else call.pos
        reason = e.reason if isinstance(e, _Stop) else "it ends before its closing '}'"
        return Unreadable("Gemma call", pos, f"it does not parse as a Gemma call: {reason}")
    return Reading("Gemma call", match.start(), values, repeated=tuple(call.repeated))


# ---- reading one call ---------------------------------------------------------------------------------------------


def read_call(
    text: str, start: int, end: int, name: str, key: str | None, sentinel: str | None
) -> Reading | Unreadable | None:
    """The call of `name` read back from text[start:end]: the first syntax that reads a value set, else why the
    syntax it looks like does not parse, else None. `key` and `sentinel`: the argument that tells this call from
    others (its value holds the sentinel)."""
    reading = _read_json(text, start, end, name, key, sentinel)
    gemma = _read_gemma(text, start, end, name)
    if gemma is not None and (reading is None or text.find(f"call:{name}{{", start, end) < reading.pos):
        return gemma  # JSON inside `call:name{...}` is the arguments written in the wrong syntax, not a JSON call
    if reading is not None:
        return reading
    python = _read_python(text, start, end, name)
    if isinstance(python, Reading):
        return python
    xml = _read_xml(text, start, end, name)
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
