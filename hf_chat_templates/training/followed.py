"""Strings of the data followed through a template: `Taint` is a string that renders as a marker (`@@7@@`) and
knows what it stands for in any record of its shape (a function of the record's strings).

What a template does to one is recorded on its shape's `Tracker`: a change (`trim`, `replace`, a slice, a piece of
`split`, its JSON escaping in `tojson`) gets a marker of its own standing for the change; a question (`in`,
`startswith`, `==`, truthiness, `length`) is kept with the answer the template got, for each record to answer the
same way; joining (`+`, `~`, a macro's output, a `{% set %}` block) keeps the parts; what cannot be followed
(iterating its characters, hashing it, `%` with it as the format) is named on the tracker. `shapes` renders with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

MARKER = "@@{}@@"
MARKERS = re.compile(r"@@(\d+)@@")

Values = Sequence[str]
RealFn = Callable[[Values], Any]


class Tracker:
    """One shape's markers (what each stands for, as a function of the record's strings) and the questions the
    template asked of its strings, with the answers it got. `ids` numbers the markers by what they stand for; the
    trackers of one renderer share it, so one value has one marker in every shape (a rendering of a conversation's
    first messages can then serve every shape that starts with them). `log` collects, while it is a `RenderLog`,
    what one rendering used."""

    def __init__(self, ids: dict[Any, int] | None = None) -> None:
        self.ids = ids if ids is not None else {}
        self.fns: dict[int, RealFn] = {}
        self.memo: dict[Any, Taint] = {}
        self.checks: dict[Any, tuple[RealFn, Any]] = {}
        self.untracked = ""
        self.log: RenderLog | None = None

    def marked(self, key: Any, fn: RealFn) -> Taint:
        """The value `key` names with a marker of its own (the same one in every render of the shape)."""
        taint = self.memo.get(key)
        if taint is None:
            number = self.ids.setdefault(key, len(self.ids))
            taint = self.memo[key] = Taint.make(MARKER.format(number), self, key, fn)
            self.fns[number] = fn
        if self.log is not None:
            self.log.fns[self.ids[key]] = fn
        return taint

    def check(self, key: Any, fn: RealFn, observed: Any) -> Any:
        self.checks.setdefault(key, (fn, observed))
        if self.log is not None:
            self.log.checks.setdefault(key, (fn, observed))
        return observed

    def lost(self, what: str) -> None:
        self.untracked = self.untracked or what
        if self.log is not None:
            self.log.untracked = self.log.untracked or what

    def replay(self, log: RenderLog) -> None:
        """What another shape's rendering of the same messages used, taken as this shape's own."""
        self.fns.update(log.fns)
        for key, check in log.checks.items():
            self.checks.setdefault(key, check)
        self.untracked = self.untracked or log.untracked


class RenderLog:
    """The markers, questions and what could not be followed of one rendering."""

    def __init__(self) -> None:
        self.fns: dict[int, RealFn] = {}
        self.checks: dict[Any, tuple[RealFn, Any]] = {}
        self.untracked = ""


def _real(x: Any, values: Values) -> Any:
    return x.fn(values) if isinstance(x, Taint) else x


def _key(x: Any) -> Any:
    return x.key if isinstance(x, Taint) else ("=", x)


def raw_text(x: Any) -> Any:
    return str.__str__(x) if isinstance(x, Taint) else x


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_CHANGES = _names("strip lstrip rstrip lower upper capitalize casefold swapcase replace removeprefix removesuffix")
_CHANGES += _names("center ljust rjust zfill expandtabs")
_QUESTIONS = _names("__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __contains__ __len__ startswith endswith find rfind")
_QUESTIONS += _names("count isalnum isalpha isascii isdecimal isdigit isidentifier islower isnumeric isprintable")
_QUESTIONS += _names("isspace istitle isupper")
_PIECES = ("split", "rsplit", "splitlines", "partition", "rpartition")
_UNFOLLOWED = _names("__iter__ __hash__ __mod__ __repr__ index rindex encode format format_map translate")


class Taint(str):
    """A string of the shape: its text is markers (and text around them); `fn` gives what it is for a record."""

    key: Any
    fn: RealFn
    tracker: Tracker

    @staticmethod
    def make(raw: str, tracker: Tracker, key: Any, fn: RealFn) -> Taint:
        taint = str.__new__(Taint, raw)
        taint.key, taint.fn, taint.tracker = key, fn, tracker
        return taint

    def _derived(self, key: Any, raw: Any, fn: RealFn) -> Any:
        """A value computed from this string: a string holding a marker gets its own; any other value is a question
        whose answer the record must repeat."""
        if isinstance(raw, str) and MARKERS.search(raw):
            return self.tracker.marked(key, fn)
        return self.tracker.check(key, fn, raw)

    def __add__(self, other: Any) -> Any:
        if not isinstance(other, str):
            return NotImplemented
        fn, a = self.fn, other

        def joined(values: Values) -> str:
            return str(fn(values)) + str(_real(a, values))

        return Taint.make(raw_text(self) + raw_text(other), self.tracker, ("+", self.key, _key(other)), joined)

    def __radd__(self, other: Any) -> Any:
        if not isinstance(other, str):
            return NotImplemented
        fn, a = self.fn, other

        def joined(values: Values) -> str:
            return str(_real(a, values)) + str(fn(values))

        return Taint.make(raw_text(other) + raw_text(self), self.tracker, ("+", _key(other), self.key), joined)

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, (int, slice)):
            return str.__getitem__(self, index)
        at = (index.start, index.stop, index.step) if isinstance(index, slice) else index
        fn = self.fn
        return self._derived(("[]", self.key, at), raw_text(self)[index], lambda values: fn(values)[index])

    def __str__(self) -> str:  # what jinja2 writes out stays a string of the data (a macro's output is one too)
        return self

    def __bool__(self) -> bool:
        fn = self.fn
        return bool(self.tracker.check(("bool", self.key), lambda values: bool(fn(values)), bool(raw_text(self))))

    def __format__(self, spec: str) -> str:
        if spec:
            self.tracker.lost("a format spec applied to a string")
        return raw_text(self) if not spec else format(raw_text(self), spec)

    __hash__ = str.__hash__  # replaced below, with the others that cannot be followed


def _change(name: str) -> Callable[..., Any]:
    method = getattr(str, name)

    def change(self: Taint, *args: Any) -> Any:
        try:
            key = (name, self.key, tuple(map(_key, args)))
            hash(key)
        except TypeError:
            self.tracker.lost(f"str.{name} with an argument that is not a string")
            return method(raw_text(self), *map(raw_text, args))
        fn = self.fn

        def real(values: Values) -> Any:
            return method(fn(values), *(_real(a, values) for a in args))

        return self._derived(key, method(raw_text(self), *map(raw_text, args)), real)

    change.__name__ = name
    return change


def _pieces(name: str) -> Callable[..., Any]:
    method = getattr(str, name)

    def pieces(self: Taint, *args: Any, **kwargs: Any) -> Any:
        if kwargs or any(isinstance(a, Taint) for a in args):
            self.tracker.lost(f"str.{name} by a string of the data")
            return method(raw_text(self), *map(raw_text, args), **kwargs)
        raw = method(raw_text(self), *args)
        fn = self.fn
        self.tracker.check((name, "#", self.key, args), lambda values: len(method(fn(values), *args)), len(raw))

        def piece_of(k: int) -> RealFn:
            return lambda values: method(fn(values), *args)[k]

        out = [self._derived((name, k, self.key, args), piece, piece_of(k)) for k, piece in enumerate(raw)]
        return tuple(out) if isinstance(raw, tuple) else out

    pieces.__name__ = name
    return pieces


def _unfollowed(name: str) -> Callable[..., Any]:
    method = getattr(str, name)

    def unfollowed(self: Taint, *args: Any, **kwargs: Any) -> Any:
        self.tracker.lost(f"str.{name}" if not name.startswith("__") else f"{name.strip('_')}() of a string")
        return method(raw_text(self), *args, **kwargs)

    unfollowed.__name__ = name
    return unfollowed


for _name in _CHANGES + _QUESTIONS:
    setattr(Taint, _name, _change(_name))
for _name in _PIECES:
    setattr(Taint, _name, _pieces(_name))
for _name in _UNFOLLOWED:
    setattr(Taint, _name, _unfollowed(_name))


# ---- tojson on a shape: each string becomes a marker that stands for its JSON escaping -------------------------


def _json_ready(value: Any, ensure_ascii: bool) -> tuple[Any, bool]:
    """`value` with each string of the data replaced by the marker of its JSON-escaped text; whether any was."""
    if isinstance(value, Taint):
        fn, tracker = value.fn, value.tracker

        def escaped(values: Values) -> str:
            return json.dumps(fn(values), ensure_ascii=ensure_ascii)[1:-1]

        return raw_text(tracker.marked(("json", ensure_ascii, value.key), escaped)), True
    if isinstance(value, dict):
        if any(isinstance(k, Taint) for k in value):
            next(k for k in value if isinstance(k, Taint)).tracker.lost("tojson of a mapping keyed by data")
        pairs = [(k, _json_ready(v, ensure_ascii)) for k, v in value.items()]
        return ({k: v for k, (v, _) in pairs}, True) if any(t for _, (_, t) in pairs) else (value, False)
    if isinstance(value, (list, tuple)):
        items = [_json_ready(v, ensure_ascii) for v in value]
        return ([v for v, _ in items], True) if any(t for _, t in items) else (value, False)
    return value, False


def shape_concat(parts: Any) -> str:
    """jinja2's `concat` (a macro's output, a `{% set %}` block, the rendering): a string of the data when any of
    the parts is one."""
    parts = list(parts)
    if not any(isinstance(p, Taint) for p in parts):
        return "".join(parts)
    tracker = next(p for p in parts if isinstance(p, Taint)).tracker

    def joined(values: Values) -> str:
        return "".join(str(_real(p, values)) for p in parts)

    return Taint.make("".join(parts), tracker, ("cat", tuple(map(_key, parts))), joined)


def shape_join(items: Any) -> str:
    """The `~` operator (jinja2's `str_join`): each item made a string, then `shape_concat`."""
    return shape_concat([x if isinstance(x, str) else str(x) for x in items])


def shape_tojson(tojson: Any) -> Any:
    """transformers' `tojson`, writing markers for the data's strings (the values it gets on a shape)."""

    plain: list[Any] = [None]  # the last value found to hold none (the tools, serialized again in each render)

    def filter_(x: Any, ensure_ascii: bool = False, *args: Any, **kwargs: Any) -> Any:
        if x is plain[0]:
            return tojson(x, ensure_ascii, *args, **kwargs)
        try:  # a value holding no string of the data serializes without a marker: the fast way to know
            if "@@" not in json.dumps(x, ensure_ascii=False):
                plain[0] = x
                return tojson(x, ensure_ascii, *args, **kwargs)
        except (TypeError, ValueError):
            pass
        ready, tainted = _json_ready(x, ensure_ascii)
        return tojson(ready if tainted else x, ensure_ascii, *args, **kwargs)

    return filter_
