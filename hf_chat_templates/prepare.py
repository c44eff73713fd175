"""`prepare`: training features for a whole JSONL dataset: `input_ids`, `attention_mask`, `labels` (-100 outside
the assistant turns' generated parts), saved as a datasets `Dataset` (Arrow).

The per-batch work is `TrainingFeatures`, a plain picklable callable: it loads the tokenizer on first use, so the
same object runs here, in `datasets.Dataset.map(batched=True, num_proc=N)`, and in a distributed engine's map
over batches (Spark `mapInPandas`, Ray `map_batches`):

>>> features = TrainingFeatures("path/to/tokenizer", max_length=4096)          # doctest: +SKIP
>>> ds = ds.map(features, batched=True, remove_columns=ds.column_names)        # doctest: +SKIP

Where the spans come from: the folder's `training` template when it has one (its `{% generation %}` markers, one
render per conversation), otherwise rendering differences computed here (`training.assistant_spans`). Each batch
is encoded with one `encode_batch` call; a span's tokens are found with `char_to_token` at its two ends, so the
mask costs two lookups per assistant turn, not a pass over the tokens.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from .errors import TokenizerFolderError, UsageError, missing_dependency
from .training import (
    GENERATION_TAG,
    TRAINING_TEMPLATE_NAME,
    Span,
    assistant_spans,
    export_without_markers,
    is_training_template,
)

IGNORE_INDEX = -100
BATCH = 2048


@dataclass
class PrepareReport:
    path: str
    output: str = ""
    records: int = 0
    written: int = 0
    tokens: int = 0
    trained_tokens: int = 0
    truncated: int = 0
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    spans_from: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "output": self.output, "records": self.records, "written": self.written,
                "tokens": self.tokens, "trained_tokens": self.trained_tokens, "truncated": self.truncated,
                "bad_line_count": len(self.bad_lines), "skipped_count": len(self.skipped),
                "bad_lines": [{"line": n, "reason": r} for n, r in self.bad_lines[:100]],
                "skipped": [{"line": n, "reason": r} for n, r in self.skipped[:100]], "spans_from": self.spans_from}

    def describe(self) -> str:
        lines = [f"prepared {self.written} of {self.records} records from {self.path} into "
                 + (self.output or "nothing: no record has anything to train, so no output written"),
                 f"  spans from: {self.spans_from}",
                 f"  {self.tokens:,} tokens, {self.trained_tokens:,} trained "
                 f"({self.trained_tokens / max(self.tokens, 1):.1%}); {self.truncated} truncated to --max-length"]
        problems = sorted(self.bad_lines + self.skipped)
        if problems:
            lines.append(f"  skipped {len(problems)} line(s): {len(self.bad_lines)} not a conversation, "
                         f"{len(self.skipped)} with nothing to train")
            lines += [f"    line {n}: {reason}" for n, reason in problems[:10]]
            if len(problems) > 10:
                lines.append(f"    … and {len(problems) - 10} more (--json lists up to 100)")
        return "\n".join(lines)


class TrainingFeatures:
    """Conversations to training features, one batch at a time. Picklable: only its settings travel."""

    def __init__(self, source: str | Path, *, template: str | None = None, kwargs: dict[str, Any] | None = None,
                 max_length: int | None = None, stop_tokens: Iterable[str] | None = None,
                 control_tokens: Iterable[str] | None = None) -> None:
        if max_length is not None and max_length < 1:
            raise UsageError(f"--max-length must be at least 1, not {max_length}", hint="--max-length 4096")
        self.source = str(source)
        self.template = template
        self.kwargs = dict(kwargs or {})
        self.max_length = max_length
        self.stop_tokens = tuple(stop_tokens) if stop_tokens is not None else None
        self.control_tokens = tuple(control_tokens) if control_tokens is not None else None
        self._state: dict[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_state": None}

    # ---- setup, once per process ----------------------------------------------------------------------------
    @property
    def state(self) -> dict[str, Any]:
        if self._state is None:
            self._state = self._setup()
        return self._state

    def _setup(self) -> dict[str, Any]:
        from transformers import AutoTokenizer
        from transformers.utils.chat_template_utils import _compile_jinja_template

        from .rendering import named_template

        tokenizer = AutoTokenizer.from_pretrained(self.source)
        marked = self.template if self.template and GENERATION_TAG.search(self.template) else (
            None if self.template else named_template(tokenizer, TRAINING_TEMPLATE_NAME))
        plain = self.template or named_template(tokenizer) or (export_without_markers(marked) if marked else None)
        if plain is None:
            raise UsageError(f"{self.source}: the tokenizer has no chat template",
                             hint="install one first, or pass --template / --family")
        if marked is not None and is_training_template(marked):
            # A derived training variant wraps the template and finds its spans by rendering differences at render
            # time; the same spans come faster from the plain template here (assistant-mask proves them equal).
            plain, marked = export_without_markers(marked), None
            origin = (f"rendering differences (the folder's '{TRAINING_TEMPLATE_NAME}' template is derived from "
                      "this template)")
        elif marked is not None:
            origin = f"the {{% generation %}} markers of the folder's '{TRAINING_TEMPLATE_NAME}' template"
        else:
            origin = "rendering differences of the chat template"
        stops, controls, defaults = self._tokens_of(tokenizer, plain)
        kwargs = {**tokenizer.special_tokens_map, **defaults, **self.kwargs}
        compiled = _compile_jinja_template(plain)
        return {"tokenizer": tokenizer, "backend": tokenizer._tokenizer, "kwargs": kwargs,
                "variables": {**compiled.globals, **kwargs, "documents": None}, "plain": compiled, "marked": _compile_jinja_template(marked) if marked else None,
                "stops": stops, "controls": controls, "spans_from": origin}

    def _tokens_of(self, tokenizer: Any, template: str) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, Any]]:
        from .verify import VerifyContext, _identify

        plain = template
        found = _identify(plain)
        if found:
            var = found[1]
            stops, controls, defaults = var.stop_tokens, var.control_tokens, var.kwarg_defaults
        else:
            ctx = VerifyContext(tokenizer, plain, kwargs=self.kwargs)
            stops, controls, defaults = ctx.stop_tokens, ctx.control_tokens, {}
        stops = self.stop_tokens if self.stop_tokens is not None else stops
        controls = self.control_tokens if self.control_tokens is not None else controls
        if not stops:
            raise UsageError("no stop token is known for this template, so a turn's end cannot be trained",
                             hint="pass stop_tokens=[...] (or install a bundled family, which declares them)")
        return tuple(stops), tuple(controls), dict(defaults)

    @property
    def spans_from(self) -> str:
        return str(self.state["spans_from"])

    # ---- the per-batch work -----------------------------------------------------------------------------------
    def _render(self, record: dict[str, Any]) -> tuple[str, tuple[Span, ...], tuple[tuple[int, str], ...]]:
        from jinja2.runtime import new_context
        from transformers.utils.chat_template_utils import _alias_reasoning_fields, _render_with_assistant_indices

        st = self.state
        # What apply_chat_template does to messages, for JSON data: keys whose value is None are dropped and the
        # reasoning fields aliased (its conversion of objects to plain data changes nothing in parsed JSON).
        messages = _alias_reasoning_fields([{k: v for k, v in m.items() if v is not None} for m in record["messages"]])
        tools = record.get("tools")
        kwargs = st["kwargs"]
        if st["marked"] is not None:
            text, indices = _render_with_assistant_indices(st["marked"], messages, tools, None, False, **kwargs)
            return text, tuple(Span(-1, a, b, None) for a, b in indices if b > a), ()
        compiled, variables = st["plain"], st["variables"]
        environment = compiled.environment

        def render(prefix: list[dict[str, Any]], add_generation_prompt: bool) -> str:
            # Template.render, without copying the globals into a new dict on each of the several renders per
            # conversation: they are merged once, in `variables`, and the context shares that mapping.
            context = new_context(environment, compiled.name, compiled.blocks, {
                **variables, "messages": prefix, "tools": tools, "add_generation_prompt": add_generation_prompt},
                True, None, None)
            return environment.concat(compiled.root_render_func(context))  # type: ignore[attr-defined]

        found = assistant_spans(render, messages, st["stops"], st["controls"])
        return found.text, found.spans, found.untrained

    def _render_batch(self, records: list[dict[str, Any]]
                      ) -> tuple[list[tuple[int, str, tuple[Span, ...]]], list[tuple[int, str]]]:
        """Render every record under one set of limits (a batch renders in well under a second); only when the
        batch trips them is it rendered again record by record, to name the record that did."""
        from .limits import RenderLimitExceeded, RenderLimits, check_output, limited

        limits = RenderLimits.from_env()

        def render_all(guard_each: bool) -> tuple[list[tuple[int, str, tuple[Span, ...]]], list[tuple[int, str]]]:
            done, problems = [], []
            for index, record in enumerate(records):
                try:
                    with limited(limits) if guard_each else contextlib.nullcontext() as used:
                        text, spans, _ = self._render(record)
                    check_output(text, used or limits)
                except RenderLimitExceeded:
                    if not guard_each:
                        raise
                    problems.append((index, f"does not render: limit: {sys.exc_info()[1]}"))
                    continue
                except Exception as err:  # a template may raise anything; the record is reported and skipped
                    first = str(err).splitlines()[0][:200] if str(err).strip() else ""
                    problems.append((index, f"does not render: {type(err).__name__}" + (f": {first}" if first else "")))
                    continue
                if spans:
                    done.append((index, text, spans))
                else:
                    problems.append((index, "no assistant turn to train"))
            return done, problems

        try:
            with limited(limits):
                return render_all(guard_each=False)
        except RenderLimitExceeded:
            return render_all(guard_each=True)

    def encoded(self, records: list[dict[str, Any]]) -> tuple[Any, Any, Any, list[tuple[int, str]]]:
        """Flat arrays for the records that train something: (row offsets, input ids, labels), int32 numpy arrays
        (row r is ids[offsets[r]:offsets[r + 1]]), and (index in `records`, why) for the records left out."""
        offsets, ids, labels, problems, self.last_truncated = self._encode(*self._render_batch(records))
        return offsets, ids, labels, problems

    def _encode(self, rendered: list[tuple[int, str, tuple[Span, ...]]], problems: list[tuple[int, str]]
                ) -> tuple[Any, Any, Any, list[tuple[int, str]], int]:
        """The second half of `encoded`: one encode_batch (it releases the GIL), then the flat arrays."""
        import numpy as np

        truncated = 0
        if not rendered:
            return np.zeros(1, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32), problems, truncated
        encodings = self.state["backend"].encode_batch([t for _, t, _ in rendered], add_special_tokens=False)
        limit = self.max_length
        rows, lengths, spans_of = [], [], []
        for (index, _, spans), enc in zip(rendered, encodings):
            size = len(enc)
            if limit is not None and size > limit:
                truncated += 1
                size = limit
            cuts = []
            for span in spans:
                first, last = enc.char_to_token(span.start), enc.char_to_token(span.end - 1)
                if first is None or last is None:
                    first, last = _span_tokens(enc.offsets, span)
                if first < size:
                    cuts.append((first, min(last + 1, size)))
            if not cuts:
                problems.append((index, f"no assistant token within the first {limit} tokens"))
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
                labels[base + first:base + end] = ids[base + first:base + end]
        problems.sort()
        return offsets, ids, labels, problems, truncated

    def features(self, records: list[dict[str, Any]]) -> tuple[dict[str, list[Any]], list[tuple[int, str]]]:
        """Columns (lists) for the records that train something, and (index in `records`, why) for the others."""
        offsets, ids, labels, problems = self.encoded(records)
        bounds = list(zip(offsets[:-1].tolist(), offsets[1:].tolist()))
        return {"input_ids": [ids[a:b].tolist() for a, b in bounds],
                "attention_mask": [[1] * (b - a) for a, b in bounds],
                "labels": [labels[a:b].tolist() for a, b in bounds]}, problems

    def _table(self, rendered: list[tuple[int, str, tuple[Span, ...]]], problems: list[tuple[int, str]]
               ) -> tuple[Any, list[tuple[int, str]], int]:
        """A rendered batch as a pyarrow Table built straight from the flat arrays (and its problems, truncations)."""
        import numpy as np
        import pyarrow as pa

        offsets, ids, labels, problems, truncated = self._encode(rendered, problems)
        column = {"input_ids": ids, "attention_mask": np.ones(len(ids), np.int8), "labels": labels}
        return pa.table({name: pa.ListArray.from_arrays(pa.array(offsets), pa.array(column[name]))
                         for name in FEATURE_TYPES}), problems, truncated

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        """For `datasets.Dataset.map(batched=True)`: columns `messages` (and `tools`) in, features out; records
        with nothing to train are dropped (pass `remove_columns=` so the row counts may differ)."""
        tools = batch.get("tools") or [None] * len(batch["messages"])
        records = [{"messages": m, "tools": t} for m, t in zip(batch["messages"], tools)]
        columns, _ = self.features(records)
        return columns


def _span_tokens(offsets: list[tuple[int, int]], span: Span) -> tuple[int, int]:
    covered = [t for t, (a, b) in enumerate(offsets) if b > span.start and a < span.end]
    return (covered[0], covered[-1]) if covered else (0, -1)


# ---- the streaming driver ---------------------------------------------------------------------------------------
_WORKER: TrainingFeatures | None = None


def _init_worker(features: TrainingFeatures) -> None:
    global _WORKER
    _WORKER = features


def _work(batch: list[tuple[int, dict[str, Any]]]) -> tuple[Any, list[tuple[int, str]], int, int]:
    assert _WORKER is not None
    return _run(_WORKER, batch)


def _run(features: TrainingFeatures, batch: list[tuple[int, dict[str, Any]]]) -> tuple[Any, list[tuple[int, str]],
                                                                                     int, int]:
    """One batch as an Arrow table (built where the batch was encoded: it crosses processes as buffers)."""
    table, problems, truncated = features._table(*features._render_batch([r for _, r in batch]))
    return table, [(batch[i][0], why) for i, why in problems], len(batch), truncated


FEATURE_TYPES = {"input_ids": "int32", "attention_mask": "int8", "labels": "int32"}


def prepare(source: str | Path, conversations: str | Path, output: str | Path, *, family: str | None = None,
            variant: str | None = None, template: str | Path | None = None, kwargs: dict[str, Any] | None = None,
            max_length: int | None = None, workers: int | None = None, force: bool = False,
            progress: bool = False) -> PrepareReport:
    """Stream a JSONL file of conversations into a datasets `Dataset` saved at `output` (written atomically)."""
    try:
        import pyarrow.compute as pc
        from datasets import Features, Sequence, Value
        from datasets.arrow_writer import ArrowWriter
    except ImportError:
        raise missing_dependency("datasets", "train", "prepare") from None

    from .dataset import _progress
    from .folder import check_output, resolve_source
    from .registry import get_family
    from .templates import read_template_file

    path = Path(conversations)
    if not path.is_file():
        raise TokenizerFolderError(f"{path}: no such file", hint="pass a JSONL file of {\"messages\": [...]}")
    if family and template:
        raise UsageError("give --family or --template, not both", hint="hf-chat-templates prepare --help")
    text = None
    stops = controls = None
    if family:
        var = get_family(family).variant(variant)
        text, kwargs = var.template, {**var.kwarg_defaults, **(kwargs or {})}
        stops, controls = var.stop_tokens, var.control_tokens
    elif template:
        text = read_template_file(Path(template))
    out = Path(output).absolute()
    check_output(out, force=force)
    features = TrainingFeatures(resolve_source(str(source)), template=text, kwargs=kwargs, max_length=max_length,
                                stop_tokens=stops, control_tokens=controls)
    report = PrepareReport(path=str(path), output=str(out), spans_from=features.spans_from)
    schema = Features({name: Sequence(Value(kind)) for name, kind in FEATURE_TYPES.items()})
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.prepare-", dir=out.parent))
    bar = _progress(progress)
    # The caller's objects (a notebook's dataset, say) are moved out of the collector's way: each batch allocates
    # many short-lived objects, and every collection would otherwise walk everything the process holds.
    gc.freeze()
    try:
        final = staging / "dataset"
        final.mkdir()
        arrow = final / DATA_FILE
        with ArrowWriter(features=schema, path=str(arrow)) as writer:
            for table, problems, count, truncated in _parts(features, path, report, workers):
                report.records += count
                report.truncated += truncated
                report.skipped += problems
                if table.num_rows:
                    writer.write_table(table)
                    report.written += table.num_rows
                    labels = table.column("labels").combine_chunks().flatten()
                    report.tokens += len(labels)
                    report.trained_tokens += len(labels) - (pc.sum(pc.equal(labels, IGNORE_INDEX)).as_py() or 0)
                bar(count)
            writer.finalize()
        bar(0, close=True)
        report.records += len(report.bad_lines)
        if not report.written:  # an empty Arrow file is not a loadable dataset; write nothing
            report.output = ""
            return report
        _write_dataset_state(final)
        if out.exists():
            if any(out.iterdir()):
                out.rename(out.parent / f"{out.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
            else:
                out.rmdir()
        (staging / "dataset").rename(out)
    finally:
        gc.unfreeze()
        shutil.rmtree(staging, ignore_errors=True)
    return report


def _parts(features: TrainingFeatures, path: Path, report: PrepareReport, workers: int | None
           ) -> Iterator[tuple[Any, list[tuple[int, str]], int, int]]:
    from .dataset import record_batches

    if workers and workers > 1:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(workers, initializer=_init_worker, initargs=(features,)) as pool:
            yield from pool.imap(_work, record_batches(path, report.bad_lines, BATCH))
    else:
        # Render batch k + 1 while batch k is encoded: encode_batch releases the GIL, so the tokenizer's threads
        # and the template's Python overlap.
        from concurrent.futures import ThreadPoolExecutor

        def finish(batch: list[tuple[int, dict[str, Any]]], rendered: Any) -> tuple[Any, list[tuple[int, str]],
                                                                                      int, int]:
            table, problems, truncated = features._table(*rendered)
            return table, [(batch[i][0], why) for i, why in problems], len(batch), truncated

        with ThreadPoolExecutor(1) as encoder:
            pending = None
            for batch in record_batches(path, report.bad_lines, BATCH):
                rendered = features._render_batch([r for _, r in batch])
                future = encoder.submit(finish, batch, rendered)
                if pending is not None:
                    yield pending.result()
                pending = future
            if pending is not None:
                yield pending.result()


DATA_FILE = "data-00000-of-00001.arrow"


def _write_dataset_state(folder: Path) -> None:
    """The two files `save_to_disk` writes beside its Arrow shards, for the one shard streamed here: the data is
    not read back and copied (with a memory map over the whole file, that would cost its size in RSS)."""
    from dataclasses import asdict

    from datasets import Dataset

    dataset = Dataset.from_file(str(folder / DATA_FILE))
    state = {key: dataset.__dict__[key] for key in ("_fingerprint", "_format_columns", "_format_kwargs",
                                                     "_format_type", "_output_all_columns")}
    state["_split"] = None
    state["_data_files"] = [{"filename": DATA_FILE}]
    info = asdict(dataset.info)
    del dataset
    (folder / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
    (folder / "dataset_info.json").write_text(json.dumps({k: info[k] for k in sorted(info)}, indent=2),
                                              encoding="utf-8")


def parse_kwargs(pairs: Iterable[str]) -> dict[str, Any]:
    """`name=value` pairs; a value that parses as JSON is taken as JSON, anything else as a string."""
    found: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--kwarg {pair!r} is not NAME=VALUE", hint="--kwarg date_string='26 Jul 2024'")
        try:
            found[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            found[name.strip()] = value
    return found
