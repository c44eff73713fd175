"""Conversations to training features: `input_ids`, `attention_mask`, `labels` (-100 outside the trained parts of
the assistant turns), one batch at a time.

`TrainingFeatures` is a plain picklable callable: it loads the tokenizer on first use, so the same object runs in
this process, in `datasets.Dataset.map(batched=True, num_proc=N)`, and in a distributed engine's map over batches
(Spark `mapInPandas`, Ray `map_batches`):

>>> features = TrainingFeatures("path/to/tokenizer", max_length=4096)          # doctest: +SKIP
>>> ds = ds.map(features, batched=True, remove_columns=ds.column_names)        # doctest: +SKIP

Where the spans come from: the folder's `training` template when it has hand-written `{% generation %}` markers
(one render per conversation), otherwise rendering differences computed here (`template.spans.assistant_spans`).
Each batch is encoded by segments (`segments`: the text between control tokens, repeated segments from a cache,
one `encode_batch` for the rest; whole strings where a tokenizer makes segments differ); a span's tokens are found
with `char_to_token` at its two ends, so the mask costs two lookups per assistant turn, not a pass over the tokens.

Which turns train (`train_on`): every assistant turn (`all`), the last one (`last`), or those whose message says so
(`weighted`: `weight` 0 or 1, as tinker-cookbook's supervised data writes it, or `train` true or false; trained when
absent; the keys are taken off the messages before rendering).

Data cannot forge control tokens: a control token spelled in the data (user text holding `<|im_end|>`) is encoded as
text, as `apply_chat_template(..., sanitize_control_tokens=True)` does, unless `allow_control_tokens_in_content`.
One regex over a record's strings finds the few records that spell one; only those are rendered with the spellings
marked and encoded piece by piece, the others take the batched path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

from ..conversations.batches import render_batch
from ..errors import UsageError, option
from ..template.spans import Span
from .cuts import span_cuts
from .left_out import assistant_indices, explain, missing_turns, record_reason, turn_text
from .segments import SegmentStats, return_freed_memory
from .shapes import CHECK_EVERY, ShapeStats
from .spelled_tokens import encode_pieces, mark_spellings, spells, unmark
from .state import FeatureState, load_state, messages_of, prefix_renderer, render_record
from .turns import WEIGHT_KEYS, trained_spans, trains

IGNORE_INDEX = -100
NOTHING = "no assistant turn to train"  # a record without an assistant message
MAX_EXPLAINED = 100  # records per run whose left-out turns are explained by rendering them again (all are counted)
FEATURE_TYPES = {"input_ids": "int32", "attention_mask": "int8", "labels": "int32"}
TRAIN_ON = ("all", "last", "weighted")

Problems = list[tuple[int, str]]  # (index in the batch, why it is left out)


class Rendered(NamedTuple):
    """One record rendered: its text, its assistant spans and which of them train, and the character ranges of
    control tokens the data spells (encoded as text; an empty range only splits the text there)."""

    at: int
    text: str
    spans: tuple[Span, ...]
    trained: tuple[bool, ...]
    literal: tuple[tuple[int, int], ...] = ()
    spells_control: bool = False
    how: str = ""  # from a shape or directly (`ShapeRenderer.render_record`)
    left_out: tuple[tuple[int, str], ...] = ()  # (message, why) of assistant turns without a span (`left_out`)
    left_out_tokens: int = 0  # what those turns hold, in tokens of their text


@dataclass
class BatchStats:
    """What a batch's table holds and what was changed on the way. Stats add up with `+`."""

    truncated: int = 0  # rows cut to max_length
    tokens: int = 0
    trained_tokens: int = 0
    assistant_tokens: int = 0  # what train_on="all" trains in the same records (records it would keep included)
    control_spellings: int = 0  # records whose data spells a control token
    segments: SegmentStats = field(default_factory=SegmentStats)  # the segment cache's lookups and hits
    segments_off: str = ""  # why whole-string encoding was used instead of segments
    encoder_off: str = ""  # why the tokenizer's own encoder ran instead of tiktoken
    shapes: ShapeStats = field(default_factory=ShapeStats)  # records filled in from a shape, or rendered directly
    shapes_off: str = ""  # why every record was rendered directly
    turns_left_out: int = 0  # assistant turns without a span, in records that still train
    tokens_left_out: int = 0
    left_out: list[tuple[int, int, str]] = field(default_factory=list)  # (index in the batch, message, why)

    def __add__(self, other: BatchStats) -> BatchStats:
        return BatchStats(
            *(
                (getattr(self, f.name) or getattr(other, f.name))
                if f.name.endswith("_off")
                else getattr(self, f.name) + getattr(other, f.name)
                for f in fields(self)
            )
        )


def _encodings(
    state: FeatureState, rendered: list[Rendered], problems: Problems, stats: BatchStats
) -> list[tuple[Rendered, Any]]:
    """The records without spelled control tokens by segments (one encode_batch, which releases the GIL, for the
    segments not cached) or whole when segments are off; the others piece by piece."""
    plain = [r for r in rendered if not r.literal]
    texts = [r.text for r in plain]
    if state.segments is not None:
        encodings, stats.segments = state.segments.encode_batch(texts)
        stats.segments_off, stats.encoder_off = state.segments.off, state.segments.engine_off
    else:
        encodings = state.backend.encode_batch(texts, add_special_tokens=False)
    encoded = dict(zip((r.at for r in plain), encodings))
    out = []
    for r in rendered:
        try:
            enc = encode_pieces(state.backend, state.text_backend, r.text, r.literal) if r.literal else encoded[r.at]
        except ValueError as err:
            problems.append((r.at, f"does not encode: {err}"))
        else:
            out.append((r, enc))
    return out


Encoded = tuple[list[tuple["Rendered", Any]], Problems, "BatchStats"]


def encode_texts(state: FeatureState, rendered: list[Rendered], problems: Problems) -> Encoded:
    """A rendered batch encoded, each record beside its encoding (the tokenizer's threads or tiktoken's, without
    the GIL); `assemble` makes the rows and labels of it."""
    stats = BatchStats(
        turns_left_out=sum(len(r.left_out) for r in rendered),
        tokens_left_out=sum(r.left_out_tokens for r in rendered),
        left_out=[(r.at, i, why) for r in rendered for i, why in r.left_out],
        control_spellings=sum(r.spells_control for r in rendered),
        shapes=ShapeStats.of([r.how for r in rendered]),
        shapes_off=state.shapes.off if state.shapes is not None else state.shapes_off,
    )
    return _encodings(state, rendered, problems, stats), problems, stats


def encode_rendered(
    state: FeatureState, rendered: list[Rendered], problems: Problems, max_length: int | None, train_on: str = "all"
) -> tuple[Any, Any, Any, Problems, BatchStats]:
    """`assemble` of `encode_texts`."""
    return assemble(encode_texts(state, rendered, problems), max_length, train_on)


def assemble(encoded: Encoded, max_length: int | None, train_on: str) -> tuple[Any, Any, Any, Problems, BatchStats]:
    """Flat int32 arrays: (row offsets, ids, labels) where row r is ids[offsets[r]:offsets[r + 1]]; the problems,
    sorted; the batch's stats."""
    import numpy as np

    pairs, problems, stats = encoded
    rows, lengths, cuts_of = [], [], []
    sizes = [len(enc) if max_length is None else min(len(enc), max_length) for _, enc in pairs]
    for (r, enc), size, cuts in zip(
        pairs, sizes, span_cuts([enc for _, enc in pairs], [r.spans for r, _ in pairs], sizes)
    ):
        stats.assistant_tokens += sum(end - first for first, end in cuts)
        stats.truncated += size < len(enc)
        kept = [(first, end) for (first, end), trained in zip(cuts, r.trained) if trained and end > first]
        if not kept:
            why = f"no assistant token within the first {max_length} tokens"
            problems.append((r.at, why if any(r.trained) else f"no assistant turn to train (train_on={train_on})"))
            continue
        rows.append(enc.ids if size == len(enc) else enc.ids[:size])
        lengths.append(size)
        cuts_of.append(kept)
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.concatenate([np.asarray(row, np.int32) for row in rows]) if rows else np.zeros(0, np.int32)
    labels = np.full(len(ids), IGNORE_INDEX, np.int32)
    for base, cuts in zip(offsets.tolist(), cuts_of):
        for first, end in cuts:
            labels[base + first : base + end] = ids[base + first : base + end]
    stats.tokens, stats.trained_tokens = len(ids), int(np.count_nonzero(labels != IGNORE_INDEX))
    problems.sort()
    return offsets, ids, labels, problems, stats


def _text_of(rendered: Rendered) -> str:
    return rendered.text


def _capped(problem: str, limit: int = 200) -> str:
    """A render error as a skip reason: the exception's name and at most `limit` characters of its message."""
    if problem.startswith("limit: "):
        return problem
    kind, _, text = problem.partition(": ")
    return f"{kind}: {text[:limit]}" if text else kind


class TrainingFeatures:
    """Conversations to training features, one batch at a time. Picklable: only its settings travel.

    `train_on`: "all" assistant turns, the "last" one, or "weighted" by each assistant message's `weight` / `train`
    key. `allow_control_tokens_in_content`: encode control tokens the data spells as the tokens themselves (by
    default they are encoded as text, as `apply_chat_template(..., sanitize_control_tokens=True)` does)."""

    def __init__(
        self,
        source: str | Path,
        *,
        template: str | None = None,
        kwargs: dict[str, Any] | None = None,
        max_length: int | None = None,
        stop_tokens: Iterable[str] | None = None,
        control_tokens: Iterable[str] | None = None,
        train_on: str = "all",
        allow_control_tokens_in_content: bool = False,
        exact: bool = False,
        check_every: int = CHECK_EVERY,
        per_turn: bool = False,
        allow_unwritten_tokens: bool = False,
    ) -> None:
        if check_every < 1:
            raise UsageError(
                f"{option('check_every')} must be at least 1 (1 checks every record), not {check_every}",
                hint=f"{option('check_every')} {CHECK_EVERY}",
                parameter="check_every",
            )
        if max_length is not None and max_length < 1:
            raise UsageError(
                f"{option('max_length')} must be at least 1, not {max_length}",
                hint=f"{option('max_length')} 4096",
                parameter="max_length",
            )
        if train_on not in TRAIN_ON:
            raise UsageError(
                f"train_on must be one of {', '.join(TRAIN_ON)}, not {train_on!r}",
                hint="train_on='last' trains only the last assistant turn",
                parameter="train_on",
            )
        self.source = str(source)
        self.template = template
        self.kwargs = dict(kwargs or {})
        self.max_length = max_length
        self.stop_tokens = tuple(stop_tokens) if stop_tokens is not None else None
        self.control_tokens = tuple(control_tokens) if control_tokens is not None else None
        # --per-turn: each example's last turn trains; which turns give an example is the caller's train_on
        self.per_turn = train_on if per_turn else None
        self.train_on = "last" if per_turn else train_on
        self.drop = WEIGHT_KEYS if train_on == "weighted" else ()  # taken off the messages before rendering
        self.allow_control_tokens_in_content = allow_control_tokens_in_content
        self.exact = exact
        self.check_every = check_every
        self.allow_unwritten_tokens = allow_unwritten_tokens
        self._state: FeatureState | None = None
        self._explained = 0  # records whose left-out turns were explained (`_left_out`)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_state": None, "_explained": 0}

    @property
    def state(self) -> FeatureState:
        """Loaded on first use, once per process."""
        if self._state is None:
            self._state = load_state(
                self.source,
                self.template,
                self.kwargs,
                self.stop_tokens,
                self.control_tokens,
                self.exact,
                self.check_every,
                self.allow_unwritten_tokens,
            )
            return_freed_memory()  # what loading parsed and dropped (tokenizer.json as Python objects)
        return self._state

    @property
    def spans_from(self) -> str:
        return self.state.spans_from

    def render_one(self, record: dict[str, Any]) -> Rendered:
        """One record rendered (its index left 0), with its spelled control tokens marked when they are not allowed."""
        state = self.state
        drop = self.drop
        tools = record.get("tools")
        # the control tokens of the template that renders the record, as transformers takes them
        pattern = state.spelled_tools if tools is not None and state.spelled_tools is not None else state.spelled
        spelled = spells(pattern, record["messages"], tools)
        if not spelled or self.allow_control_tokens_in_content:
            # data spelling a control token is rendered directly: a span's ends may fall on the spelling
            text, spans, how = render_record(state, record, drop, by_shape=not spelled)
            return Rendered(0, text, spans, (), (), spelled, how)
        marked = {**record, "messages": mark_spellings(pattern, record["messages"])}
        if tools is not None:
            marked["tools"] = mark_spellings(pattern, tools)
        text, spans, literal = unmark(pattern, *render_record(state, marked, drop, by_shape=False)[:2])
        return Rendered(0, text, spans, (), literal, True)

    def render_batch(self, records: list[dict[str, Any]]) -> tuple[list[Rendered], Problems]:
        """Render every record under limits: the records with assistant spans, and why each other is left out."""
        rendered, problems, _ = self.render_part(records)
        return rendered, problems

    def render_part(
        self, records: list[dict[str, Any]], budget_chars: int | None = None, places: Sequence[str] | None = None
    ) -> tuple[list[Rendered], Problems, int]:
        """`render_batch` on the first records whose renderings fit `budget_chars` (at least one), and how many
        records it covers: the rest is rendered in the next part. When a checked record's rendering by shape
        differs from its direct rendering, shapes are off for the rest of the run and the part is rendered again,
        every record directly; the reason names the record (`places[i]`, say "line 7", else its index)."""
        rendered: list[Rendered] = []
        problems: Problems = []
        shapes = self.state.shapes
        watched = shapes is not None and not shapes.off
        flipped: list[int] = []

        def one(record: dict[str, Any]) -> Rendered:
            value = self.render_one(record)
            if watched and not flipped and shapes is not None and shapes.off:
                flipped.append(next(i for i, r in enumerate(records) if r is record))
            return value

        outcomes = render_batch(records, one, text_of=_text_of, budget_chars=budget_chars)
        if flipped and shapes is not None:  # the records before it were filled in from shapes: all again, directly
            at = flipped[0]
            shapes.off = f"{places[at] if places is not None else f'record {at} of a batch'}: {shapes.off}"
            outcomes = render_batch(records, self.render_one, text_of=_text_of, budget_chars=budget_chars)
        for index, value, problem in outcomes:
            messages = records[index]["messages"]
            if value is None:
                problems.append((index, f"does not render: {_capped(str(problem))}"))
            elif not value.spans:
                turns = assistant_indices(messages)
                problems.append(
                    (
                        index,
                        record_reason(self._explained_turns(records[index], turns), self.per_turn is not None)
                        if turns
                        else NOTHING,
                    )
                )
            else:
                try:
                    trained = trained_spans(messages, value.spans, self.train_on)
                except ValueError as err:
                    problems.append((index, str(err)))
                    continue
                # a turn left out that would not train anyway is no loss
                missing = [i for i in missing_turns(messages, value.spans) if trains(messages, i, self.train_on)]
                if missing:
                    value = self._left_out(records[index], value, missing)
                rendered.append(value._replace(at=index, trained=trained))
        return rendered, problems, len(outcomes)

    def _explain(self, record: dict[str, Any]) -> list[tuple[int, str]]:
        """Why each assistant turn of `record` has no span, by rendering it directly (`left_out.explain`)."""
        state = self.state
        drop = self.drop
        messages, tools = messages_of(record, drop), record.get("tools")
        return explain(prefix_renderer(state, tools), messages, state.stops, state.controls)

    def _left_out(self, record: dict[str, Any], value: Rendered, missing: list[int]) -> Rendered:
        """`value` with its left-out turns: their tokens counted, and why, for the first MAX_EXPLAINED of a run."""
        messages = record["messages"]
        texts = [turn_text(messages[i]) for i in missing]
        tokens = sum(len(e.ids) for e in self.state.backend.encode_batch(texts, add_special_tokens=False))
        return value._replace(left_out=tuple(self._explained_turns(record, missing)), left_out_tokens=tokens)

    def _explained_turns(self, record: dict[str, Any], turns: list[int]) -> list[tuple[int, str]]:
        """(message, why) of each of `turns` left out: why found by rendering for the first MAX_EXPLAINED records of
        a run (the report lists no more), empty after."""
        if self._explained >= MAX_EXPLAINED:
            return [(i, "") for i in turns]
        self._explained += 1
        why = dict(self._explain(record))
        return [(i, why.get(i, "")) for i in turns]

    def encoded(self, records: list[dict[str, Any]]) -> tuple[Any, Any, Any, Problems]:
        """Flat arrays for the records that train something: (row offsets, input ids, labels), int32 numpy arrays
        (row r is ids[offsets[r]:offsets[r + 1]]), and (index in `records`, why) for the records left out."""
        offsets, ids, labels, problems, _ = encode_rendered(
            self.state, *self.render_batch(records), self.max_length, self.train_on
        )
        return offsets, ids, labels, problems

    def features(self, records: list[dict[str, Any]]) -> tuple[dict[str, list[Any]], Problems]:
        """Columns (lists) for the records that train something, and (index in `records`, why) for the others."""
        offsets, ids, labels, problems = self.encoded(records)
        bounds = list(zip(offsets[:-1].tolist(), offsets[1:].tolist()))
        return {
            "input_ids": [ids[a:b].tolist() for a, b in bounds],
            "attention_mask": [[1] * (b - a) for a, b in bounds],
            "labels": [labels[a:b].tolist() for a, b in bounds],
        }, problems

    def batch_table(self, rendered: list[Rendered], problems: Problems) -> tuple[Any, Problems, BatchStats]:
        """A rendered batch as a pyarrow Table built straight from the flat arrays, its problems and its stats."""
        return self.table_of(encode_texts(self.state, rendered, problems))

    def encode_texts(self, rendered: list[Rendered], problems: Problems) -> Encoded:
        """`batch_table`'s first half: the batch encoded (`table_of` makes the table of it)."""
        return encode_texts(self.state, rendered, problems)

    def table_of(self, encoded: Encoded) -> tuple[Any, Problems, BatchStats]:
        """`batch_table`'s second half: the table of an encoded batch."""
        import numpy as np
        import pyarrow as pa

        offsets, ids, labels, problems, stats = assemble(encoded, self.max_length, self.train_on)
        return_freed_memory()  # the batch's encodings are gone
        column = {"input_ids": ids, "attention_mask": np.ones(len(ids), np.int8), "labels": labels}
        table = pa.table(
            {name: pa.ListArray.from_arrays(pa.array(offsets), pa.array(column[name])) for name in FEATURE_TYPES}
        )
        return table, problems, stats

    def table(self, rendered: list[Rendered], problems: Problems) -> tuple[Any, Problems, int]:
        """`batch_table` with only the count of truncated rows for stats."""
        table, problems, stats = self.batch_table(rendered, problems)
        return table, problems, stats.truncated

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """For `datasets.Dataset.map(batched=True)`: columns `messages` (and `tools`) in, features out; records
        with nothing to train are dropped (pass `remove_columns=` so the row counts may differ)."""
        tools = batch.get("tools") or [None] * len(batch["messages"])
        records = [{"messages": m, "tools": t} for m, t in zip(batch["messages"], tools)]
        columns, _ = self.features(records)
        return columns
