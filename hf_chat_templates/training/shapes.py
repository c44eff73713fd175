"""Rendering by shape: one render of the template per conversation shape, then text put in place for each record.

Records of a data set share a few shapes (the roles in order, the keys each message has, the tools), and a chat
template mostly copies their text into fixed places. A shape is rendered once, its strings replaced by markers
(`@@7@@`) that carry what they stand for; the rendering, its assistant spans (`template.spans`, by rendering
differences as always) and the marker positions make the shape's skeleton. Each record of that shape is then its
own strings put in place of the markers, spans shifted by the lengths: no Jinja at all.

What the template does with a string is tracked, so a skeleton is used only where it holds:
- a string a template changes (`trim`, `replace`, `lower`, a slice, `split` into pieces, `tojson`) gets a marker of
  its own that stands for the change, replayed on the record's string;
- a question it asks of a string (`'</think>' in content`, `content.startswith(...)`, `content == ''`, `length`) is
  recorded with the answer the markers gave; a record whose strings answer any of them differently is rendered
  directly (its control flow would differ), and the report counts those records;
- what cannot be followed (iterating a string's characters, hashing it, a filter that reads raw text such as
  `title` or `escape`) makes the shape, or for filters the whole template, rendered directly, with the reason.
The spans: where finding them met only prefixes (every prompt a prefix of the conversation, every turn closed by
the stop token), that holds for any text put in place, so the shape's spans serve, moved. Where it met a message
without a span or a closing token standing in for the stop token, the outcome may depend on the text (a generation
prompt ending in `<think>\n` that an answer may or may not start with): the shape keeps its prefix renderings as
skeletons and each record's spans are found again on its own filled-in texts. A rendering of a conversation's
first messages is kept and serves every shape that starts with the same messages (agent data: the system prompt
and tools rendered once, not once per shape).

Only what is known is followed (`followed`): the str methods, jinja2 filters and tests, operators and calls it
follows are an allow-list, and any other use of a string of the data (`title()`, `indent`, a method of the
template's own text given one) makes the shape rendered directly, with the reason.

It is also checked through the whole run, not only at its start: the first `SAMPLE_RECORDS` records, the first
record of every new shape and one record in `check_every` after that are rendered both ways and compared (text and
spans); the first difference turns shapes off for the rest of the run, naming the record and position, and the
caller renders that batch again directly (`TrainingFeatures.render_part`).

Strings under the keys `role` and `type` and empty strings stay part of the shape (templates branch on them); so do
numbers, booleans, keys and the tools (serialized as the shape's key).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from .. import _compat
from ..template.spans import Span, assistant_spans
from .followed import MARKERS, RealFn, RenderLog, Tracker, Values, raw_text
from .loading import compile_template
from .shape_environment import Unfollowable

SAMPLE_RECORDS = 16
CHECK_EVERY = 256  # one record in this many rendered both ways through the run
MAX_SHAPES = 2048
CACHE_CHARS = 32 * 2**20  # skeleton (and rendering) characters kept, least recently used out first
MAX_MARKERS = 1_000_000
PLAIN_KEYS = frozenset({"role", "type"})


# ---- shapes -----------------------------------------------------------------------------------------------------


def _signature(value: Any, key: Any, leaves: list[str]) -> Any:
    """The shape of `value` (strings of the data left out, collected in `leaves` in order). Text that stays in the
    shape (keys, roles, types) may not spell a marker."""
    if isinstance(value, str):
        if key in PLAIN_KEYS or not value:
            if "@@" in value:
                raise _NotAShape
            return value
        leaves.append(value)
        return None
    if isinstance(value, dict):
        parts: list[Any] = ["{"]
        for k, v in value.items():  # strings inline: most values are
            if "@@" in k:
                raise _NotAShape
            if type(v) is str and v and k not in PLAIN_KEYS:
                leaves.append(v)
                parts += (k, None)
            else:
                parts += (k, _signature(v, k, leaves))
        return tuple(parts)
    if isinstance(value, list):
        return ("[", *(_signature(v, key, leaves) for v in value))
    if isinstance(value, float):  # -0.0 == 0.0, nan != nan: a float's shape is how it is written
        return ("float", repr(value))
    return (type(value).__name__, value)


class _NotAShape(Exception):
    """A record the markers cannot stand in for (its shape's own text spells a marker)."""


def _tainted(value: Any, key: Any, tracker: Tracker, count: list[int]) -> Any:
    """`value` with each string of the data replaced by its leaf's marker (the order `_signature` collects them)."""
    if isinstance(value, str):
        if key in PLAIN_KEYS or not value:
            return value
        k = count[0]
        count[0] += 1
        return tracker.marked(("leaf", k), lambda values: values[k])
    if isinstance(value, dict):
        return {k: _tainted(v, k, tracker, count) for k, v in value.items()}
    if isinstance(value, list):
        return [_tainted(v, key, tracker, count) for v in value]
    return value


@dataclass(frozen=True)
class Shape:
    """A shape's rendering: the text between markers, what each marker stands for, the assistant spans (in the
    skeleton's characters) and the questions a record's strings must answer as the markers did."""

    pieces: tuple[str, ...]
    fns: tuple[RealFn, ...]
    starts: tuple[int, ...]  # where each marker starts in the skeleton
    widths: tuple[int, ...]
    spans: tuple[Span, ...]
    checks: tuple[tuple[RealFn, Any], ...]
    untracked: str = ""  # why records of this shape are rendered directly
    # The renderings of the first messages, by (how many, with the generation prompt), when the spans depend on the
    # text (a message without a span, a closing token standing in for the stop token): each record's spans are then
    # found again on its own texts, filled in
    prefixes: dict[tuple[int, bool], Shape] | None = None

    @property
    def size(self) -> int:
        return sum(map(len, self.pieces)) + 64 * len(self.fns) + 32

    def fits(self, values: Values) -> bool:
        for fn, observed in self.checks:
            try:
                answer = fn(values)
            except Exception:
                return False
            if type(answer) is not type(observed) or answer != observed:
                return False
        return True

    def fill(self, values: Values) -> tuple[str, tuple[Span, ...]]:
        reals = [str(fn(values)) for fn in self.fns]
        parts = [self.pieces[0]]
        for real, piece in zip(reals, self.pieces[1:]):
            parts += (real, piece)
        shifts = [0]
        for real, width in zip(reals, self.widths):
            shifts.append(shifts[-1] + len(real) - width)

        def moved(at: int) -> int:
            return at + shifts[bisect.bisect_right(self.starts, at - 1)] if self.starts else at

        spans = tuple(Span(s.message, moved(s.start), moved(s.end), s.closing) for s in self.spans)
        return "".join(parts), spans


def skeleton(text: str, spans: tuple[Span, ...], tracker: Tracker) -> Shape:
    """The shape's rendering cut at its markers."""
    pieces, fns, starts, widths, at = [], [], [], [], 0
    for found in MARKERS.finditer(text):
        pieces.append(text[at : found.start()])
        fns.append(tracker.fns[int(found.group(1))])
        starts.append(found.start())
        widths.append(found.end() - found.start())
        at = found.end()
    pieces.append(text[at:])
    inside = [s for s in spans for a in (s.start, s.end) for b, w in zip(starts, widths) if b < a < b + w]
    untracked = tracker.untracked or ("a span boundary inside a string of the data" if inside else "")
    checks = tuple(tracker.checks.values())
    return Shape(tuple(pieces), tuple(fns), tuple(starts), tuple(widths), spans, checks, untracked)


@dataclass
class ShapeStats:
    """Records filled in from a shape (`built` of them rendered a new shape first), and records rendered directly
    while shapes were on (their strings answer the template's questions differently, or their shape cannot be
    followed). Stats add up with `+`."""

    filled: int = 0
    built: int = 0
    direct: int = 0
    checked: int = 0  # filled in and also rendered directly, and found equal (or the difference turned shapes off)

    def __add__(self, other: ShapeStats) -> ShapeStats:
        return ShapeStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @classmethod
    def of(cls, hows: Sequence[str]) -> ShapeStats:
        """From each record's `how` (`ShapeRenderer.render_record`)."""
        filled = sum(h.startswith(("shape", "new")) for h in hows)
        built, direct = sum(h.startswith("new") for h in hows), sum(h == "direct" for h in hows)
        return cls(filled, built, direct, sum(h.endswith(CHECKED) for h in hows))

    def describe(self, off: str) -> str:
        if off:
            return f"off: {off} (each record rendered directly)"
        total = self.filled + self.direct
        line = f"on ({self.filled:,} of {total:,} records filled in from {self.built:,} shapes"
        line += f", {self.checked:,} of them also rendered directly and equal"
        if self.direct:
            line += (
                f"; {self.direct:,} rendered directly: the template tests their text and it answers otherwise, "
                "or what it does with their shape cannot be followed"
            )
        return line + ")"

    def to_dict(self, off: str) -> dict[str, Any]:
        return {"on": not off, "off_reason": off or None, **vars(self)}


def _signature_of(messages: list[dict[str, Any]], tools: Any, leaves: list[str]) -> Any:
    signature = _signature(messages, None, leaves)
    tools_key = json.dumps(tools, ensure_ascii=False) if tools is not None else None
    if tools_key is not None and "@@" in tools_key:
        raise _NotAShape
    hash(signature)
    return signature, tools_key


def first_difference(a: str, b: str) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


CHECKED = "+checked"  # the end of a record's `how` when it was also rendered directly and compared
Direct = Callable[[], tuple[str, tuple[Span, ...]]]
Render = Callable[[dict[str, Any]], str]


class ShapeRenderer:
    """Records rendered by shape (see the module docstring). `render(variables)` renders the template compiled
    with `shape_tojson`; `render_tools` the one transformers uses for a conversation given tools, if any."""

    def __init__(
        self,
        render: Render,
        render_tools: Render | None,
        stop_tokens: Sequence[str],
        control_tokens: Sequence[str],
        off: str = "",
        check_every: int = CHECK_EVERY,
    ) -> None:
        self.render, self.render_tools = render, render_tools
        self.stops, self.controls = tuple(stop_tokens), tuple(control_tokens)
        # Data spelling one of these is rendered directly: a span ends at the last closing token in its part
        tokens = sorted({*self.stops, *self.controls} - {""}, key=len, reverse=True)
        self.spelled = re.compile("|".join(map(re.escape, tokens)) or "(?!)")
        self.shapes: OrderedDict[Any, Shape] = OrderedDict()
        self.chars = 0
        self.ids: dict[Any, int] = {}  # marker numbers, shared by every shape's tracker
        self.renders: OrderedDict[Any, tuple[str, RenderLog]] = OrderedDict()  # by (first messages, prompt, tools)
        self.render_chars = 0
        self.proven = 0
        self.check_every = max(1, check_every)
        self.filled = 0  # records filled in from a shape so far
        self.off = off

    def render_record(
        self, messages: list[dict[str, Any]], tools: Any, direct: Direct, whole: Callable[[], str] | None = None
    ) -> tuple[str, Any, str]:
        """(text, spans, how): how is "shape" (filled in), "new" (a shape rendered for it, then filled in),
        "direct" (rendered directly although shapes are on) or "" (shapes off); a filled-in record also rendered
        directly and compared has `CHECKED` added. `whole()` renders the record's conversation alone: the first
        record of a new shape is compared with it (text), the sampled ones with `direct()` (text and spans, a
        rendering per assistant turn)."""
        if self.off:
            return (*direct(), "")
        leaves: list[str] = []
        try:
            key = _signature_of(messages, tools, leaves)
        except (_NotAShape, TypeError, ValueError):
            return (*direct(), "direct")
        if self.spelled.search("\0".join(leaves)):
            return (*direct(), "direct")
        shape, how = self.shapes.get(key), "shape"
        if shape is None:
            shape, how = self._build(messages, tools, key, leaves), "new"
            self._keep(key, shape)
        else:
            self.shapes.move_to_end(key)
        if shape.untracked or not shape.fits(leaves):
            return (*direct(), "direct")
        text, filled = shape.fill(leaves)
        spans = filled if shape.prefixes is None else self._spans_again(shape.prefixes, leaves, messages, text)
        if spans is None or any(s.end <= s.start for s in spans):  # a change left a span nothing: not followed
            return (*direct(), "direct")
        self.filled += 1
        if self.proven < SAMPLE_RECORDS or self.filled % self.check_every == 0 or (how == "new" and whole is None):
            self.proven += 1
            expected = direct()
            if expected != (text, spans):
                self.off = self._difference(expected, (text, spans))
                return (*expected, "")
            how += CHECKED
        elif how == "new" and whole is not None:
            rendered = whole()
            if rendered != text:
                self.off = self._difference((rendered, spans), (text, spans))
                return (*direct(), "")
            how += CHECKED
        return text, spans, how

    def _spans_again(
        self, prefixes: dict[tuple[int, bool], Shape], values: Values, messages: list[dict[str, Any]], text: str
    ) -> tuple[Span, ...] | None:
        """A record's spans by rendering differences on its own texts (its shape's renderings, filled in)."""

        def render(prefix: list[dict[str, Any]], add_generation_prompt: bool) -> str:
            return prefixes[(len(prefix), add_generation_prompt)].fill(values)[0]

        try:
            return assistant_spans(render, messages, self.stops, self.controls, full=text).spans
        except KeyError:
            return None

    def _difference(self, expected: tuple[str, Any], got: tuple[str, Any]) -> str:
        if expected[0] != got[0]:
            at = first_difference(expected[0], got[0])
            return (
                f"a checked record renders differently from its shape at character {at} "
                f"({expected[0][at : at + 20]!r} rendered, {got[0][at : at + 20]!r} from the shape)"
            )
        return f"a checked record's assistant spans differ from its shape's ({expected[1]} vs {got[1]})"

    def _build(self, messages: list[dict[str, Any]], tools: Any, key: Any, values: Values) -> Shape:
        if len(self.ids) > MAX_MARKERS:  # numbers start over, and the renderings written with them go
            self.ids.clear()
            self.renders.clear()
            self.render_chars = 0
        tracker = Tracker(values, self.ids)
        tainted = _tainted(messages, None, tracker, [0])
        render_with = self.render_tools if tools is not None and self.render_tools is not None else self.render
        signatures, tools_key = key[0][1:], key[1]

        def render(prefix: list[dict[str, Any]], add_generation_prompt: bool) -> str:
            """The prefix rendered, or taken from another shape's rendering of the same messages."""
            at = (signatures[: len(prefix)], add_generation_prompt, tools_key)
            kept = self.renders.get(at)
            if kept is not None and tracker.agrees(kept[1]):  # rendered for a record that answers alike
                self.renders.move_to_end(at)
                tracker.replay(kept[1])
                return kept[0]
            tracker.log = RenderLog()
            try:
                variables = {"messages": prefix, "tools": tools, "add_generation_prompt": add_generation_prompt}
                text = raw_text(render_with(variables))  # plain text: comparing renderings asks nothing of the data
                self._keep_render(at, text, tracker.log)
            finally:
                tracker.log = None
            return text

        try:
            found = assistant_spans(render, tainted, self.stops, self.controls)
            if not (found.untrained or any(s.closing not in (None, *self.stops) for s in found.spans)):
                return skeleton(found.text, found.spans, tracker)
            # The spans depend on the text: every prefix a record's spans may need, kept as a skeleton of its own
            assistants = [i for i, m in enumerate(tainted) if m.get("role") == "assistant"]
            wanted = {(i, True) for i in assistants} | {(i + 1, False) for i in assistants}
            texts = {(n, gp): render(tainted[:n], gp) for n, gp in sorted(wanted)}
        except Unfollowable as err:
            return Shape((), (), (), (), (), (), str(err))
        except Exception as err:  # rendered directly, where the record's own error is reported
            return Shape((), (), (), (), (), (), f"the template raised {type(err).__name__} on its shape")
        prefixes = {at: skeleton(text, (), tracker) for at, text in texts.items()}
        return dataclasses.replace(skeleton(found.text, found.spans, tracker), prefixes=prefixes)

    def _keep_render(self, at: Any, text: str, log: RenderLog) -> None:
        self.renders[at] = (text, log)
        self.render_chars += len(text)
        while self.renders and self.render_chars > CACHE_CHARS:
            _, (dropped, _) = self.renders.popitem(last=False)
            self.render_chars -= len(dropped)

    def _keep(self, key: Any, shape: Shape) -> None:
        self.shapes[key] = shape
        self.chars += shape.size
        while self.shapes and (len(self.shapes) > MAX_SHAPES or self.chars > CACHE_CHARS):
            _, dropped = self.shapes.popitem(last=False)
            self.chars -= dropped.size


def static_reason(template: str, variables: dict[str, Any]) -> str:
    """Why this template is rendered directly for every record, read from its source, or ""."""
    if "@@" in template or "@@" in repr(variables):
        return "the template or its variables spell '@@', the shape markers"
    return ""


def shape_renderer(
    plain: str,
    tool_use: str | None,
    variables: dict[str, Any],
    stops: Sequence[str],
    controls: Sequence[str],
    check_every: int = CHECK_EVERY,
) -> ShapeRenderer:
    """The renderer by shape for a template (and the one transformers uses given tools), compiled to follow the
    data's strings (`loading.compile_template(shapes=True)`), or off with the reason its source gives."""

    def renderer(source: str) -> Render:
        compiled = compile_template(source, shapes=True)
        return _compat.fast_renderer(compiled, {**compiled.globals, **variables, "documents": None})

    sources = (plain, tool_use) if tool_use is not None else (plain,)
    off = next(filter(None, (static_reason(t, variables) for t in sources)), "")
    tools_renderer = renderer(tool_use) if tool_use is not None else None
    return ShapeRenderer(renderer(plain), tools_renderer, stops, controls, off, check_every)
