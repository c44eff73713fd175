"""Strings of the data followed through a template: `Taint` is a string that renders as a marker (`@@7@@`) and
knows what it stands for in any record of its shape (a function of the record's strings).

What a template does to one is recorded on its shape's `Tracker`: a change (`trim`, `replace`, a slice, a piece of
`split`, its JSON escaping in `tojson`) gets a marker of its own standing for the change; a question (`in`,
`startswith`, `==`, truthiness, `length`) is kept with the answer the template got, for each record to answer the
same way; joining (`+`, `~`, a macro's output, a `{% set %}` block) keeps the parts; what cannot be followed
(iterating its characters, hashing it, `%` with it as the format) is named on the tracker. `shapes` renders with it.
"""

from __future__ import annotations

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

    def __init__(self, values: Values = (), ids: dict[Any, int] | None = None) -> None:
        self.values = values  # the strings of the record the shape is built from: they answer the questions
        self.ids = ids if ids is not None else {}
        self.fns: dict[int, RealFn] = {}
        self.memo: dict[Any, Taint] = {}
        self.by_number: dict[int, Taint] = {}  # this shape's markers, by number (`retainted`)
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
            self.by_number[number] = taint
        if self.log is not None:
            self.log.fns[self.ids[key]] = fn
        return taint

    def check(self, key: Any, fn: RealFn, observed: Any) -> Any:
        if self.checks.setdefault(key, (fn, observed))[1] != observed:  # never, unless a rendering was reused amiss
            self.lost("a question answered two ways")
        if self.log is not None:
            self.log.checks.setdefault(key, (fn, observed))
        return observed

    def lost(self, what: str) -> None:
        self.untracked = self.untracked or what
        if self.log is not None:
            self.log.untracked = self.log.untracked or what

    def agrees(self, log: RenderLog) -> bool:
        """Whether the strings of this shape's record answer another rendering's questions as it was answered."""
        try:
            return all(fn(self.values) == observed for fn, observed in log.checks.values())
        except Exception:
            return False

    def replay(self, log: RenderLog) -> None:
        """What another shape's rendering of the same messages used, taken as this shape's own."""
        self.fns.update(log.fns)
        for key, (fn, observed) in log.checks.items():
            self.check(key, fn, observed)
        self.untracked = self.untracked or log.untracked


class RenderLog:
    """The markers, questions and what could not be followed of one rendering."""

    def __init__(self) -> None:
        self.fns: dict[int, RealFn] = {}
        self.checks: dict[Any, tuple[RealFn, Any]] = {}
        self.untracked = ""


def real(x: Any, values: Values) -> Any:
    return x.fn(values) if isinstance(x, Taint) else x


def _key(x: Any) -> Any:
    return x.key if isinstance(x, Taint) else ("=", x)


def raw_text(x: Any) -> Any:
    return str.__str__(x) if isinstance(x, Taint) else x


def names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_CHANGES = names("strip lstrip rstrip lower upper capitalize casefold swapcase replace removeprefix removesuffix")
_CHANGES += names("center ljust rjust zfill expandtabs")
_QUESTIONS = names("__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __contains__ __len__ startswith endswith find rfind")
_QUESTIONS += names("count isalnum isalpha isascii isdecimal isdigit isidentifier islower isnumeric isprintable")
_QUESTIONS += names("isspace istitle isupper")
_CHANGES += names("split rsplit splitlines partition rpartition")  # pieces, see `_derived`
# What `Taint` defines itself (followed, below) and the object machinery that never reads the text. Every other
# attribute of `str` (`title`, `join`, `*`, `%`, `translate`, copying, one added to `str` in a later Python) is
# not followed: it reads the marker's text, so using it on a string of the data makes the shape rendered directly.
_OWN = names("__add__ __radd__ __getitem__ __str__ __bool__ __repr__ __format__")
STR_INERT = names("__class__ __delattr__ __dir__ __doc__ __getattribute__ __init__ __init_subclass__ __new__")
STR_INERT += names("__setattr__ __sizeof__ __subclasshook__")
STR_FOLLOWED = frozenset(_CHANGES + _QUESTIONS + _OWN)
_UNFOLLOWED = tuple(name for name in dir(str) if name not in STR_FOLLOWED and name not in STR_INERT)


class Taint(str):
    """A string of the shape: its text is markers (and text around them); `fn` gives what it is for a record."""

    _key: Any
    _parts: list[Any] | None
    fn: RealFn
    tracker: Tracker

    @staticmethod
    def make(raw: str, tracker: Tracker, key: Any, fn: RealFn, parts: list[Any] | None = None) -> Taint:
        """`key` names the value in every render of its shape; a join may give its `parts` instead, named only
        when something asks (a rendering's whole text is one, and nothing asks of it)."""
        taint = str.__new__(Taint, raw)
        taint._key, taint._parts, taint.fn, taint.tracker = key, parts, fn, tracker
        return taint

    @property
    def key(self) -> Any:
        if self._key is None:
            self._key = ("cat", tuple(map(_key, self._parts or ())))
        return self._key

    def _derived(self, key: Any, fn: RealFn) -> Any:
        """A value computed from this string: a string gets a marker of its own; any other value is a question,
        answered by the record the shape is built from, whose answer every record filled in must repeat."""
        answer = fn(self.tracker.values)
        if isinstance(answer, str):
            return self.tracker.marked(key, fn)
        if isinstance(answer, (list, tuple)):  # pieces: how many is the question, each piece a string of its own
            self.tracker.check(("#", key), lambda values: len(fn(values)), len(answer))
            out = [self.tracker.marked((k, key), _piece(fn, k)) for k in range(len(answer))]
            return tuple(out) if isinstance(answer, tuple) else out
        return self.tracker.check(key, fn, answer)

    def __add__(self, other: Any) -> Any:
        if not isinstance(other, str):
            return NotImplemented
        fn, a = self.fn, other

        def joined(values: Values) -> str:
            return str(fn(values)) + str(real(a, values))

        return Taint.make(raw_text(self) + raw_text(other), self.tracker, ("+", self.key, _key(other)), joined)

    def __radd__(self, other: Any) -> Any:
        if not isinstance(other, str):
            return NotImplemented
        fn, a = self.fn, other

        def joined(values: Values) -> str:
            return str(real(a, values)) + str(fn(values))

        return Taint.make(raw_text(other) + raw_text(self), self.tracker, ("+", _key(other), self.key), joined)

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, (int, slice)):
            return str.__getitem__(self, index)
        at = (index.start, index.stop, index.step) if isinstance(index, slice) else index
        fn = self.fn
        try:
            return self._derived(("[]", self.key, at), lambda values: fn(values)[index])
        except IndexError:  # as the string itself would raise, for every record of the shape alike
            self.tracker.check(("len", self.key), lambda values: len(fn(values)), len(fn(self.tracker.values)))
            raise

    def __str__(self) -> str:  # what jinja2 writes out stays a string of the data (a macro's output is one too)
        return self

    def __bool__(self) -> bool:
        fn = self.fn
        return bool(self._derived(("bool", self.key), lambda values: bool(fn(values))))

    def __repr__(self) -> str:  # a mapping of the data made a string (`| string`) writes its strings' reprs
        fn = self.fn
        return str(self._derived(("repr", self.key), lambda values: repr(fn(values))))

    def __format__(self, spec: str) -> str:
        if spec:
            self.tracker.lost("a format spec applied to a string")
        return raw_text(self) if not spec else format(raw_text(self), spec)

    def __html__(self) -> str:
        """markupsafe escapes a string with this (`Markup` + a string, `'<b>'|safe` joined or formatted with one):
        escaping reads the text, so the shape cannot be followed."""
        self.tracker.lost("markup escaping of a string of the data")
        return str.__str__(self)

    __hash__ = str.__hash__  # replaced below, with the others that cannot be followed


def _piece(fn: RealFn, k: int) -> RealFn:
    return lambda values: fn(values)[k]


def _change(name: str) -> Callable[..., Any]:
    """A str method, followed: what it gives for the record the shape is built from decides (see `_derived`)."""
    method = getattr(str, name)

    def change(self: Taint, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            self.tracker.lost(f"str.{name} with keyword arguments")
            return method(raw_text(self), *map(raw_text, args), **kwargs)
        try:
            key = (name, self.key, tuple(map(_key, args)))
            hash(key)
        except TypeError:
            self.tracker.lost(f"str.{name} with an argument that is not a string")
            return method(raw_text(self), *map(raw_text, args))
        fn = self.fn

        def changed(values: Values) -> Any:
            return method(fn(values), *(real(a, values) for a in args))

        return self._derived(key, changed)

    change.__name__ = name
    return change


def _unfollowed(name: str) -> Callable[..., Any]:
    method = getattr(str, name)

    def unfollowed(self: Taint, *args: Any, **kwargs: Any) -> Any:
        self.tracker.lost(f"str.{name}" if not name.startswith("__") else f"{name.strip('_')}() of a string")
        return method(raw_text(self), *args, **kwargs)

    unfollowed.__name__ = name
    return unfollowed


for _name in _CHANGES + _QUESTIONS:
    setattr(Taint, _name, _change(_name))
for _name in _UNFOLLOWED:
    setattr(Taint, _name, _unfollowed(_name))


# ---- filters and tests on a shape -------------------------------------------------------------------------------


class Length:
    """The length of a string of the data (`| length`): a comparison is a question (`| length > 0`), answered by the
    record the shape is built from; any other use (arithmetic, printing it, `range(n)`, an index, `'%d' % n`) asks
    for that very length. Not an `int` subclass: Python reads an int's value without asking it (`range`, indexing,
    `%d`, `json`), so every use goes through a method here."""

    __slots__ = ("fn", "key", "tracker", "value")

    def __init__(self, value: int, key: Any, fn: RealFn, tracker: Tracker) -> None:
        self.value, self.key, self.fn, self.tracker = value, key, fn, tracker

    @staticmethod
    def of(taint: Taint) -> Length:
        fn = taint.fn
        return Length(len(fn(taint.tracker.values)), ("len", taint.key), lambda values: len(fn(values)), taint.tracker)

    def exactly(self) -> int:
        """The length itself, which every record filled in must then have."""
        return int(self.tracker.check(self.key, self.fn, self.value))


def _plain(x: Any) -> Any:
    return x.exactly() if isinstance(x, Length) else x


def _compare(name: str) -> Callable[..., Any]:
    method = getattr(int, name)

    def compare(self: Length, other: Any) -> Any:
        if isinstance(other, Length) or not isinstance(other, (int, float)) or isinstance(other, bool):
            return method(self.exactly(), _plain(other))
        fn = self.fn
        answer = method(self.value, other)
        return self.tracker.check((name, self.key, other), lambda values: method(fn(values), other), answer)

    compare.__name__ = name
    return compare


def _exact(name: str) -> Callable[..., Any]:
    method = getattr(int, name)

    def exact(self: Length, *args: Any) -> Any:
        return method(self.exactly(), *map(_plain, args))

    exact.__name__ = name
    return exact


def _exact_value(name: str) -> property:
    return property(lambda self: getattr(self.exactly(), name))


def _nonzero(self: Length) -> bool:
    """`{% if content | length %}`: whether it is empty, the question."""
    fn = self.fn
    return bool(self.tracker.check(("bool", self.key), lambda values: fn(values) != 0, self.value != 0))


# A comparison is a question; any other use of `int` (arithmetic, printing, `bit_length`, `real`, one added to
# `int` later) asks for the exact length
LENGTH_COMPARED = names("__eq__ __ne__ __lt__ __le__ __gt__ __ge__")
INT_INERT = (*STR_INERT, "from_bytes")
for _name in dir(int):
    if _name in INT_INERT or _name == "__slots__":
        continue
    if _name == "__bool__":
        setattr(Length, _name, _nonzero)
    elif _name in LENGTH_COMPARED:
        setattr(Length, _name, _compare(_name))
    elif callable(getattr(int, _name)):
        setattr(Length, _name, _exact(_name))
    else:
        setattr(Length, _name, _exact_value(_name))
