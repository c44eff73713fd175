"""Conversations to training features: `input_ids`, `attention_mask`, `labels` (-100 outside the assistant turns'
generated parts), one batch at a time.

`TrainingFeatures` is a plain picklable callable: it loads the tokenizer on first use, so the same object runs in
this process, in `datasets.Dataset.map(batched=True, num_proc=N)`, and in a distributed engine's map over batches
(Spark `mapInPandas`, Ray `map_batches`):

>>> features = TrainingFeatures("path/to/tokenizer", max_length=4096)          # doctest: +SKIP
>>> ds = ds.map(features, batched=True, remove_columns=ds.column_names)        # doctest: +SKIP

Where the spans come from: the folder's `training` template when it has hand-written `{% generation %}` markers
(one render per conversation), otherwise rendering differences computed here (`template.spans.assistant_spans`).
Each batch is encoded with one `encode_batch` call; a span's tokens are found with `char_to_token` at its two ends,
so the mask costs two lookups per assistant turn, not a pass over the tokens.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _compat
from ..conversations.batches import render_batch
from ..errors import UsageError, option
from ..families.tokens import template_tokens
from ..template.rendering import named_template
from ..template.spans import Span, assistant_spans
from ..template.syntax import has_generation_markers
from ..template.training_variant import TRAINING_TEMPLATE_NAME, export_without_markers, is_training_template
from ..tokenizer.folder import read_folder

IGNORE_INDEX = -100
FEATURE_TYPES = {"input_ids": "int32", "attention_mask": "int8", "labels": "int32"}

Rendered = tuple[int, str, tuple[Span, ...]]  # (index in the batch, text, assistant spans)
Problems = list[tuple[int, str]]  # (index in the batch, why it is left out)


@dataclass
class FeatureState:
    """What a process loads once: the tokenizer, the compiled template(s), the tokens and where spans come from."""

    tokenizer: Any
    backend: Any
    kwargs: dict[str, Any]
    render_plain: Callable[[dict[str, Any]], str]
    marked: Any  # the compiled template with hand-written {% generation %} markers, or None
    stops: tuple[str, ...]
    controls: tuple[str, ...]
    spans_from: str
    tokens_from: str = ""  # declared, a bundled family, or inferred: said in prepare's report
    token_notes: tuple[str, ...] = ()  # what inference chose or could not decide: said in prepare's report
    # the folder's named `tool_use` template, compiled: transformers renders a conversation given tools with it
    render_tools: Callable[[dict[str, Any]], str] | None = None


def _templates(tokenizer: Any, source: str, template: str | None) -> tuple[str, str | None, str]:
    """(plain template, template with hand-written markers or None, where the spans come from)."""
    marked = (
        template
        if template and has_generation_markers(template)
        else (None if template else named_template(tokenizer, TRAINING_TEMPLATE_NAME))
    )
    plain = template or named_template(tokenizer) or (export_without_markers(marked) if marked else None)
    if plain is None:
        raise UsageError(
            f"{source}: the tokenizer has no chat template",
            hint=f"install one first, or pass {option('template')} / {option('family')}",
            path=source,
        )
    if marked is not None and is_training_template(marked):
        # A derived training variant wraps the template and finds its spans by rendering differences at render time;
        # the same spans come faster from the plain template here (assistant-mask proves them equal).
        return (
            export_without_markers(marked),
            None,
            f"rendering differences (the folder's '{TRAINING_TEMPLATE_NAME}' template is derived from this template)",
        )
    if marked is not None:
        return plain, marked, f"the {{% generation %}} markers of the folder's '{TRAINING_TEMPLATE_NAME}' template"
    return plain, None, "rendering differences of the chat template"


def load_state(
    source: str,
    template: str | None,
    kwargs: dict[str, Any],
    stop_tokens: Iterable[str] | None,
    control_tokens: Iterable[str] | None,
) -> FeatureState:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    plain, marked, origin = _templates(tokenizer, source, template)
    folder = Path(source)
    tokens = template_tokens(
        tokenizer,
        plain,
        kwargs=kwargs,
        stop_tokens=stop_tokens,
        control_tokens=control_tokens,
        generation_config=read_folder(folder).generation_config if folder.is_dir() else None,
    )
    if not tokens.stop_tokens:
        raise UsageError(
            ("; ".join(tokens.notes) if tokens.notes else "no stop token is known for this template")
            + ", so a turn's end cannot be trained",
            hint=f"declare the token that ends an assistant turn: {option('stop_tokens')} TOKEN",
            parameter="stop_tokens",
        )
    merged = {**tokenizer.special_tokens_map, **tokens.kwarg_defaults, **kwargs}
    compiled = _compat.compile_template(plain)
    tool_use = named_template(tokenizer, "tool_use") if template is None else None
    tool_compiled = _compat.compile_template(tool_use) if tool_use is not None else None
    return FeatureState(
        tokenizer=tokenizer,
        backend=tokenizer.backend_tokenizer,
        kwargs=merged,
        render_plain=_compat.fast_renderer(compiled, {**compiled.globals, **merged, "documents": None}),
        marked=_compat.compile_template(marked) if marked else None,
        stops=tokens.stop_tokens,
        controls=tokens.control_tokens,
        spans_from=origin,
        tokens_from=tokens.origin,
        token_notes=tokens.notes,
        render_tools=_compat.fast_renderer(tool_compiled, {**tool_compiled.globals, **merged, "documents": None})
        if tool_compiled is not None
        else None,
    )


def render_record(state: FeatureState, record: dict[str, Any]) -> tuple[str, tuple[Span, ...]]:
    """One record's text and assistant spans."""
    # What apply_chat_template does to messages, for JSON data: keys whose value is None are dropped and the
    # reasoning fields aliased (its conversion of objects to plain data changes nothing in parsed JSON).
    messages = _compat.alias_reasoning_fields(
        [{k: v for k, v in m.items() if v is not None} for m in record["messages"]]
    )
    tools = record.get("tools")
    if state.marked is not None:
        text, indices = _compat.render_with_assistant_indices(state.marked, messages, tools, **state.kwargs)
        return text, tuple(Span(-1, a, b, None) for a, b in indices if b > a)

    render_with = state.render_tools if tools is not None and state.render_tools is not None else state.render_plain

    def render(prefix: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return render_with({"messages": prefix, "tools": tools, "add_generation_prompt": add_generation_prompt})

    found = assistant_spans(render, messages, state.stops, state.controls)
    return found.text, found.spans


def _span_tokens(offsets: list[tuple[int, int]], span: Span) -> tuple[int, int]:
    covered = [t for t, (a, b) in enumerate(offsets) if b > span.start and a < span.end]
    return (covered[0], covered[-1]) if covered else (0, -1)


def _cuts(enc: Any, spans: tuple[Span, ...], size: int) -> list[tuple[int, int]]:
    """The token ranges [first, end) of the spans, within the first `size` tokens."""
    cuts = []
    for span in spans:
        first, last = enc.char_to_token(span.start), enc.char_to_token(span.end - 1)
        if first is None or last is None:
            first, last = _span_tokens(enc.offsets, span)
        if first < size:
            cuts.append((first, min(last + 1, size)))
    return cuts


def encode_rendered(
    backend: Any, rendered: list[Rendered], problems: Problems, max_length: int | None
) -> tuple[Any, Any, Any, Problems, int]:
    """One encode_batch (it releases the GIL), then flat int32 arrays: (row offsets, ids, labels) where row r is
    ids[offsets[r]:offsets[r + 1]]; the problems, sorted; how many rows were truncated."""
    import numpy as np

    if not rendered:
        return np.zeros(1, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32), problems, 0
    encodings = backend.encode_batch([t for _, t, _ in rendered], add_special_tokens=False)
    truncated, rows, lengths, spans_of = 0, [], [], []
    for (index, _, spans), enc in zip(rendered, encodings):
        size = len(enc)
        if max_length is not None and size > max_length:
            truncated, size = truncated + 1, max_length
        cuts = _cuts(enc, spans, size)
        if not cuts:
            problems.append((index, f"no assistant token within the first {max_length} tokens"))
            continue
        rows.append(enc.ids if size == len(enc) else enc.ids[:size])
        lengths.append(size)
        spans_of.append(cuts)
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(rows), np.int32, count=int(offsets[-1]))
    labels = np.full(len(ids), IGNORE_INDEX, np.int32)
    for base, cuts in zip(offsets.tolist(), spans_of):
        for first, end in cuts:
            labels[base + first : base + end] = ids[base + first : base + end]
    problems.sort()
    return offsets, ids, labels, problems, truncated


def _capped(problem: str, limit: int = 200) -> str:
    """A render error as a skip reason: the exception's name and at most `limit` characters of its message."""
    if problem.startswith("limit: "):
        return problem
    kind, _, text = problem.partition(": ")
    return f"{kind}: {text[:limit]}" if text else kind


class TrainingFeatures:
    """Conversations to training features, one batch at a time. Picklable: only its settings travel."""

    def __init__(
        self,
        source: str | Path,
        *,
        template: str | None = None,
        kwargs: dict[str, Any] | None = None,
        max_length: int | None = None,
        stop_tokens: Iterable[str] | None = None,
        control_tokens: Iterable[str] | None = None,
    ) -> None:
        if max_length is not None and max_length < 1:
            raise UsageError(
                f"{option('max_length')} must be at least 1, not {max_length}",
                hint=f"{option('max_length')} 4096",
                parameter="max_length",
            )
        self.source = str(source)
        self.template = template
        self.kwargs = dict(kwargs or {})
        self.max_length = max_length
        self.stop_tokens = tuple(stop_tokens) if stop_tokens is not None else None
        self.control_tokens = tuple(control_tokens) if control_tokens is not None else None
        self._state: FeatureState | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_state": None}

    @property
    def state(self) -> FeatureState:
        """Loaded on first use, once per process."""
        if self._state is None:
            self._state = load_state(self.source, self.template, self.kwargs, self.stop_tokens, self.control_tokens)
        return self._state

    @property
    def spans_from(self) -> str:
        return self.state.spans_from

    def render_batch(self, records: list[dict[str, Any]]) -> tuple[list[Rendered], Problems]:
        """Render every record under limits: the records with assistant spans, and why each other is left out."""
        rendered: list[Rendered] = []
        problems: Problems = []
        for index, value, problem in render_batch(records, lambda r: render_record(self.state, r)):
            if value is None:
                problems.append((index, f"does not render: {_capped(str(problem))}"))
            elif value[1]:
                rendered.append((index, value[0], value[1]))
            else:
                problems.append((index, "no assistant turn to train"))
        return rendered, problems

    def encoded(self, records: list[dict[str, Any]]) -> tuple[Any, Any, Any, Problems]:
        """Flat arrays for the records that train something: (row offsets, input ids, labels), int32 numpy arrays
        (row r is ids[offsets[r]:offsets[r + 1]]), and (index in `records`, why) for the records left out."""
        offsets, ids, labels, problems, _ = encode_rendered(
            self.state.backend, *self.render_batch(records), self.max_length
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

    def table(self, rendered: list[Rendered], problems: Problems) -> tuple[Any, Problems, int]:
        """A rendered batch as a pyarrow Table built straight from the flat arrays (and its problems, truncations)."""
        import numpy as np
        import pyarrow as pa

        offsets, ids, labels, problems, truncated = encode_rendered(
            self.state.backend, rendered, problems, self.max_length
        )
        column = {"input_ids": ids, "attention_mask": np.ones(len(ids), np.int8), "labels": labels}
        return (
            pa.table(
                {name: pa.ListArray.from_arrays(pa.array(offsets), pa.array(column[name])) for name in FEATURE_TYPES}
            ),
            problems,
            truncated,
        )

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """For `datasets.Dataset.map(batched=True)`: columns `messages` (and `tools`) in, features out; records
        with nothing to train are dropped (pass `remove_columns=` so the row counts may differ)."""
        tools = batch.get("tools") or [None] * len(batch["messages"])
        records = [{"messages": m, "tools": t} for m, t in zip(batch["messages"], tools)]
        columns, _ = self.features(records)
        return columns
