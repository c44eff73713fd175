"""The jinja2 environment a shape renders in (`loading.compile_template(shapes=True)`): what a template does with a
string of the data (`followed.Taint`) outside the string's own methods is followed here, or refused.

- filters and tests: an allow-list (`FOLLOWED_FILTERS`, `FOLLOWED_TESTS`) of those that reach a string only through
  its own methods and operators; `length`, `count`, `join`, `tojson`, `in`, `sequence` and `iterable` are replaced
  by versions that follow it; any other (`title`, `indent`, `escape`, one a later jinja2 or transformers adds)
  given a string of the data, anywhere in its arguments, makes the shape rendered directly;
- `in` and `not in` (`contains`, written by `_compat.join_generator`), `%` (`shape_binop`), `~` and jinja2's
  joins (`shape_join`, `shape_concat`), and calls of the template's own strings' methods (`shape_call`);
- text that holds the data's markers without being a string of the data (`tojson`'s output, a list made a string)
  is made one again (`retainted`), so what is asked of it is followed; a question on such text that cannot be
  (the template's own text searched for it) raises `Unfollowable`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .followed import MARKERS, Length, Taint, Tracker, Values, names, raw_text, real


class Unfollowable(Exception):
    """Raised where a rendering cannot even say which string of the data it reads (a value too deep to search): the
    shape is then rendered directly, as for any error on a shape."""


def unfollowed(what: str) -> Any:
    """What `_compat.join_generator` writes for an expression shapes cannot follow: the shape rendered directly."""
    raise Unfollowable(what)


MAX_SEARCHED = 100_000  # values searched for a string of the data in one filter's arguments


def taint_in(values: Any) -> Taint | None:
    """The first string of the data in `values` (searched through lists, tuples and mappings, keys included)."""
    stack, searched = [values], 0
    while stack:
        value = stack.pop()
        if isinstance(value, Taint):
            return value
        searched += 1
        if searched > MAX_SEARCHED:
            raise Unfollowable("a filter's arguments too large to search for the data's strings")
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return None


# jinja2's filters that reach a string only through the string's own methods and operators, which `Taint` follows
# or refuses (vetted against jinja2 3.1's code: `trim` is `str.strip`, `reverse` a slice, `sort` comparisons and
# `lower`, `unique` a hash, `first` an iterator). `length`, `count`, `join` and `tojson` are replaced below. Any
# other filter (`title`, `indent`, `truncate`, `escape`, `int`, `format`, `safe`, one a later jinja2 or transformers
# adds) given a string of the data, anywhere in its arguments, makes the shape rendered directly.
FOLLOWED_FILTERS = frozenset(
    names("attr batch capitalize center d default dictsort first groupby items last list lower map max min reject")
    + names("rejectattr replace reverse select selectattr slice sort string sum trim unique upper")
)
# Of those, the ones that hand their other arguments on to a followed filter or test, or return them as they are;
# the others given a string of the data as an argument while their value is the template's own text (`'hello' |
# replace(content, '')`) read the marker: the shape is rendered directly
PASSING_FILTERS = frozenset(names("batch d default map reject rejectattr select selectattr sum"))
# jinja2's tests, which read a value through its type, comparisons and `str.islower`/`isupper` only; `in` is
# replaced (a string of the data in the template's own text is a question of its own), `number` and `integer` say
# of a `Length` what they say of an int. Any other test given a string of the data makes the shape rendered directly
# (`sameas`: two equal strings of the data may be one object; `escaped`: a string of the data has `__html__`).
FOLLOWED_TESTS = frozenset(
    names("!= < <= == > >= boolean callable defined divisibleby eq equalto even false filter float ge")
    + names("greaterthan gt integer iterable le lessthan lower lt mapping ne none number odd sequence")
    + names("string test true undefined upper")
)


def _unfollowed_filter(name: str, original: Any, kind: str = "filter", value_followed: bool = False) -> Any:
    """A filter (or test) not known to follow the data's strings: given one, anywhere in its arguments, the shape
    cannot be followed; given none, it is the filter. With `value_followed` (a followed filter), only a string of the
    data among its other arguments while its value is the template's own text (`'hello' | replace(content, '')`)
    cannot be. Its jinja2 calling convention is kept."""
    passes = getattr(original, "jinja_pass_arg", None)
    what = f"the {kind} {name!r} on the template's text given" if value_followed else f"the {kind} {name!r} on"

    def filter_(*args: Any, **kwargs: Any) -> Any:
        given = args[1:] if passes is not None else args
        if value_followed:
            searched = [given[1:], kwargs] if given and not isinstance(given[0], Taint) else None
        else:
            searched = [given, kwargs]
        tainted = taint_in(searched) if searched is not None else None
        if tainted is not None:
            tainted.tracker.lost(f"{what} a string of the data")
            return original(*args, **kwargs)
        return unheld(original(*args, **kwargs), f"the {kind} {name!r}")

    if passes is not None:
        filter_.jinja_pass_arg = passes  # type: ignore[attr-defined]
    return filter_


def retainted(text: str, tracker: Tracker) -> str:
    """`text` holding markers of `tracker`'s shape (what `tojson` wrote, a list's repr) as a string of the data
    joined from them, so what is asked of it is followed; a marker not of this shape cannot be."""
    parts: list[str] = []
    at = 0
    for found in MARKERS.finditer(text):
        taint = tracker.by_number.get(int(found.group(1)))
        if taint is None:
            raise Unfollowable("text holding a marker of another shape")
        parts += (text[at : found.start()], taint)
        at = found.end()
    return shape_concat([*parts, text[at:]]) if parts else text


def _held(text: Any) -> bool:
    """Whether a plain string holds a marker: text made from the data without being a string of the data."""
    return isinstance(text, str) and not isinstance(text, Taint) and "@@" in text


def unheld(value: Any, what: str) -> Any:
    """`value`, unless it is text made from the data's strings without being one of them (a namespace's repr, a
    method of the template's text reading an attribute of one): nothing could follow what is asked of it."""
    if _held(value) or (isinstance(value, (list, tuple)) and any(_held(x) for x in value)):
        raise Unfollowable(f"{what} made text from the data's strings that cannot be followed")
    return value


def contains(item: Any, container: Any) -> bool:
    """The `in` operator on a shape (`_compat.join_generator` writes `x in y` as this): a string of the data in the
    template's text is a question, answered as the record the shape is built from answers it."""
    if _held(container):
        if not isinstance(item, Taint):
            raise Unfollowable("the template's text searched for in text made from the data")
        container = retainted(container, item.tracker)
    if _held(item):
        raise Unfollowable("text made from the data searched for")
    if isinstance(item, Taint) and isinstance(container, str) and not isinstance(container, Taint):
        fn, tracker = item.fn, item.tracker
        answer = fn(tracker.values) in container
        return bool(tracker.check(("in", item.key, str.__str__(container)), lambda v: fn(v) in container, answer))
    return item in container


_PERCENT = re.compile(r"%%|%s")


def percent(template: str, args: Any) -> str | None:
    """`template % args` as a string of the data when `template` writes only `%s` (and `%%`) and the arguments are
    strings; None when it writes anything else (a width, `%r`, `%d`: not followed)."""
    values = args if isinstance(args, tuple) else (args,)
    pieces = _PERCENT.split(template)
    if "%" in "".join(pieces) or not all(isinstance(v, str) for v in values):
        return None
    directives = _PERCENT.findall(template)
    if sum(d == "%s" for d in directives) != len(values):
        return None
    parts: list[str] = [pieces[0]]
    queue = iter(values)
    for directive, piece in zip(directives, pieces[1:]):
        parts += (next(queue) if directive == "%s" else "%", piece)
    return shape_concat(parts)


def shape_binop(binop: Any) -> Any:
    """The sandbox's `call_binop` for `%` on a shape (`intercepted_binops`): the template's text formatted with the
    data's strings by `%s` keeps them followed; any other formatting of them makes the shape rendered directly."""

    def call_binop(context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "%" and type(left) is str:  # `Markup % x` escapes x: `Taint.__html__` refuses that
            tainted = taint_in(right)
            if tainted is not None:
                formatted = percent(left, right)
                if formatted is not None:
                    return formatted
                tainted.tracker.lost("%-formatting of a string of the data")
        return binop(context, operator, left, right)

    return call_binop


def _shape_format(original: Any) -> Any:
    """jinja2's `format` filter (`value % args`) as `shape_binop` does `%`."""

    def format_(value: Any, *args: Any, **kwargs: Any) -> Any:
        tainted = taint_in([value, args, kwargs])
        if tainted is not None:
            formatted = percent(value, args) if isinstance(value, str) and not kwargs else None
            if formatted is not None and not isinstance(value, Taint):
                return formatted
            tainted.tracker.lost("the filter 'format' on a string of the data")
        return original(value, *args, **kwargs)

    return format_


def shape_call(call: Any) -> Any:
    """The sandbox's `call` on a shape: a method of the template's own text given a string of the data (`', '.join(
    parts)`, `'{}'.format(x)`) reads the marker's text, so only `join` is followed (its parts kept); the others
    make the shape rendered directly."""

    def call_(context: Any, obj: Any, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(obj, "__self__", None)
        if isinstance(owner, str) and not isinstance(owner, Taint):
            name = getattr(obj, "__name__", "")
            if _held(owner):
                raise Unfollowable(f"str.{name} of text made from the data")
            if name == "join" and len(args) == 1 and not isinstance(args[0], (str, dict, list, tuple)):
                args = (list(args[0]),)  # a generator or iterator: its items searched, then handed on
            # jinja2 hands the loop's and block's variables along as keyword arguments, for context functions
            given = {k: v for k, v in kwargs.items() if k not in ("_loop_vars", "_block_vars")}
            tainted = taint_in([args, given])
            if tainted is not None:
                if type(owner) is str and name == "join" and len(args) == 1 and not given:
                    items = list(args[0])
                    if all(isinstance(x, str) for x in items):
                        return shape_concat([p for k, x in enumerate(items) for p in ((owner, x) if k else (x,))])
                tainted.tracker.lost(f"str.{name} of the template's text given a string of the data")
                return call(context, obj, *args, **kwargs)
            return unheld(call(context, obj, *args, **kwargs), f"str.{name}")
        return call(context, obj, *args, **kwargs)

    return call_


def _shape_join(join: Any) -> Any:
    """jinja2's `join` filter keeping the data's strings followed (`shape_concat` of the parts)."""

    def join_(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> Any:
        from jinja2.filters import make_attrgetter

        if attribute is not None:
            value = map(make_attrgetter(eval_ctx.environment, attribute), value)
        items = [x if isinstance(x, str) else str(x) for x in value]
        if eval_ctx.autoescape or not (isinstance(d, Taint) or any(isinstance(x, Taint) for x in items)):
            return join(eval_ctx, items, d)
        sep = d if isinstance(d, str) else str(d)
        return shape_concat([p for k, x in enumerate(items) for p in ((sep, x) if k else (x,))])

    join_.jinja_pass_arg = join.jinja_pass_arg  # type: ignore[attr-defined]
    return join_


def shape_filters(filters: dict[str, Any], tests: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The environment's filters and tests for rendering shapes: `length` of a string of the data is a `Length`, a
    string of the data is a sequence and iterable (as any string), `join` and `in` keep it followed, and every
    filter or test not in FOLLOWED_FILTERS / FOLLOWED_TESTS is guarded."""
    length = filters["length"]

    def shape_length(value: Any) -> Any:
        return Length.of(value) if isinstance(value, Taint) else length(unheld(value, "the filter 'length'"))

    def is_sequence(value: Any) -> bool:
        return True if isinstance(value, Taint) else bool(tests["sequence"](value))

    def is_iterable(value: Any) -> bool:
        return True if isinstance(value, Taint) else bool(tests["iterable"](value))

    string = filters["string"]

    def shape_string(value: Any) -> Any:
        text = string(value)
        tainted = None if isinstance(value, str) or not _held(text) else taint_in(value)
        return retainted(text, tainted.tracker) if tainted is not None else text

    def as_int(test: Any) -> Any:
        return lambda value: True if isinstance(value, Length) else test(value)

    own_filters = {"length": shape_length, "count": shape_length, "join": _shape_join(filters["join"])}
    own_filters |= {"string": shape_string, "format": _shape_format(filters["format"])}
    own_filters["tojson"] = filters["tojson"]  # `shape_tojson` already

    def followed(name: str, f: Any) -> Any:
        if name in PASSING_FILTERS:
            return f
        return _unfollowed_filter(name, f, value_followed=name in FOLLOWED_FILTERS)

    new_filters = {name: own_filters.get(name) or followed(name, f) for name, f in filters.items()}
    own_tests = {"sequence": is_sequence, "iterable": is_iterable, "in": contains}
    own_tests |= {"number": as_int(tests["number"]), "integer": as_int(tests["integer"])}
    new_tests = {
        name: own_tests.get(name) or (t if name in FOLLOWED_TESTS else _unfollowed_filter(name, t, "test"))
        for name, t in tests.items()
    }
    return new_filters, new_tests


# ---- tojson on a shape: each string becomes a marker that stands for its JSON escaping -------------------------


def _json_ready(value: Any, ensure_ascii: bool) -> tuple[Any, Tracker | None]:
    """`value` with each string of the data replaced by the marker of its JSON-escaped text (a length by its exact
    value), and the shape's tracker if any was."""
    if isinstance(value, Taint):
        fn, tracker = value.fn, value.tracker

        def escaped(values: Values) -> str:
            return json.dumps(fn(values), ensure_ascii=ensure_ascii)[1:-1]

        return raw_text(tracker.marked(("json", ensure_ascii, value.key), escaped)), tracker
    if isinstance(value, Length):
        return value.exactly(), None
    if isinstance(value, dict):
        if any(isinstance(k, Taint) for k in value):
            next(k for k in value if isinstance(k, Taint)).tracker.lost("tojson of a mapping keyed by data")
        pairs = [(k, _json_ready(v, ensure_ascii)) for k, v in value.items()]
        found = next((t for _, (_, t) in pairs if t is not None), None)
        return {k: v for k, (v, _) in pairs}, found
    if isinstance(value, (list, tuple)):
        items = [_json_ready(v, ensure_ascii) for v in value]
        return [v for v, _ in items], next((t for _, t in items if t is not None), None)
    return value, None


def shape_concat(parts: Any) -> str:
    """jinja2's `concat` (a macro's output, a `{% set %}` block, the rendering): a string of the data when any of
    the parts is one."""
    parts = list(parts)
    if not any(isinstance(p, Taint) for p in parts):
        return "".join(parts)
    tracker = next(p for p in parts if isinstance(p, Taint)).tracker

    def joined(values: Values) -> str:
        return "".join(str(real(p, values)) for p in parts)

    return Taint.make("".join(parts), tracker, None, joined, parts)


def shape_join(items: Any) -> str:
    """The `~` operator (jinja2's `str_join`): each item made a string (a list of the data's strings written as a
    string of the data), then `shape_concat`."""
    return shape_concat([x if isinstance(x, str) else _written(x) for x in items])


def _written(value: Any) -> str:
    text = str(value)
    if not _held(text):
        return text
    tainted = taint_in(value)
    if tainted is None:
        raise Unfollowable("a value holding the data's strings written as text")
    return retainted(text, tainted.tracker)


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
        ready, tracker = _json_ready(x, ensure_ascii)
        if tracker is None:
            return tojson(ready, ensure_ascii, *args, **kwargs)
        return retainted(tojson(ready, ensure_ascii, *args, **kwargs), tracker)

    return filter_
