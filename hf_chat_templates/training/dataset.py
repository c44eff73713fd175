"""`prepare`: training features for a whole dataset of conversations, streamed into a datasets `Dataset` folder
(Arrow).

Records are read (JSONL, JSON, Parquet, a datasets folder or a Hub dataset: `conversations.records`), normalized for
the template (`conversations.normalize`), rendered and encoded in batches (the next batch renders while the
tokenizer encodes the last) and written to one Arrow shard as they go; `datasets.load_from_disk` reads the folder.
It is written through the one writer (`outputs.staged_folder`): staged beside the output, renamed into place at the
end. Nothing is published when no record has anything to train, or when more records could not be read,
normalized or rendered than `max_skipped` allows (a training run never loses its data silently).
"""

from __future__ import annotations

import gc
import json
import re
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .. import _compat
from ..conversations.batches import constant, map_batches, progress_bar
from ..conversations.normalize import (
    EARLIER_REASONING_DROPPED,
    LEFT_OUT,
    LOSSES,
    SKIP_KINDS,
    UNTRAINED,
    Normalizer,
    RecordProblem,
    RecordTally,
    SkipLimit,
    over_limit,
)
from ..conversations.records import ConversationSource, open_conversations, record_batches
from ..errors import UsageError, missing_dependency, option
from ..families.registry import Family
from ..families.source import ChosenTemplate, TemplateChoice, as_choice, choose_template
from ..outputs import check_output, check_outside, staged_folder
from .features import FEATURE_TYPES, BatchStats, TrainingFeatures, render_record
from .left_out import LEFT_OUT_REASONS
from .packing import PACKED_TYPES, pack, token_counts
from .report import MAX_LISTED, PrepareReport
from .shapes import CHECK_EVERY
from .turns import per_turn as split_turns

DATA_FILE = "data-00000-of-00001.arrow"
# Rendered characters held at once per batch: past it the batch is encoded in parts (a hostile or huge template
# would otherwise pile up 2,048 renderings of up to the render limit each; agent data with a 3,000-token system
# prompt and tool block on every record is 35 M characters a batch, and its encodings alone would pass 1 GB).
RENDER_BUDGET_CHARS = 8_000_000
# (table, (kind, where, why) of each record left out, the records of each normalization step, records, the stats)
Part = tuple[Any, list[tuple[str, int, str]], dict[str, list[int]], int, BatchStats]
Batch = list[tuple[int, dict[str, Any]]]


_MALFORMED_WEIGHT = re.compile(r"message \d+: (weight|train) .* (is not|disagree)")


def _kind(why: str) -> str:
    """A problem of `TrainingFeatures.render_batch`: the template failed ("render"), a malformed `weight` or
    `train` key ("normalize"), or nothing to train."""
    if why.startswith("does not render"):
        return "render"
    if why.startswith(LEFT_OUT_REASONS):
        return LEFT_OUT
    return "normalize" if _MALFORMED_WEIGHT.match(why) else UNTRAINED


def _first_per_record(problems: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """The first problem of each record (`--per-turn`: its examples share its place)."""
    first: dict[int, tuple[str, int, str]] = {}
    for problem in problems:
        first.setdefault(problem[1], problem)
    return list(first.values())


def _normalized(
    normalizer: Normalizer, batch: Batch, per_turn: str | None = None
) -> tuple[Batch, list[tuple[str, int, str]], dict[str, list[int]]]:
    """The batch normalized for the template, the records that could not be, and the steps taken (the records
    of each); with `per_turn` (the train_on setting), each record as one example per assistant turn
    (`turns.per_turn`), in place: split before normalizing, so what a template writes only after the last user
    turn (the reasoning) is kept. A record one of whose examples cannot be normalized is left out whole."""
    kept: Batch = []
    left: list[tuple[str, int, str]] = []
    steps: dict[str, list[int]] = {}
    for where, record in batch:
        examples = split_turns(record, per_turn) if per_turn is not None else [record]
        try:
            applied = [normalizer.apply(example) for example in examples]
        except RecordProblem as err:
            left.append(("normalize", where, str(err)))
            continue
        except Exception as err:  # a shape no check foresaw: that record is reported, the batch goes on
            left.append(("normalize", where, f"cannot be normalized ({type(err).__name__}: {err})"))
            continue
        kept += [(where, normal) for normal, _ in applied]
        for step in {step for _, taken in applied for step in taken}:
            steps.setdefault(step, []).append(where)
    return kept, left, steps


def _finish(features: TrainingFeatures, batch: Batch, encoded: Any, left: Any, steps: Any, count: int) -> Part:
    """A part's table from its encoding (`TrainingFeatures.encode_texts`, or the future of it), with what the part
    left out: `left`, before rendering, and the problems since."""
    table, problems, stats = features.table_of(encoded.result() if isinstance(encoded, Future) else encoded)
    stats.left_out = [(batch[at][0], i, why) for at, i, why in stats.left_out]
    return table, left + [(_kind(why), batch[i][0], why) for i, why in problems], steps, count, stats


def _places(part: Batch, unit: str) -> list[str]:
    return [f"{unit} {where}" for where, _ in part]


def _table_of_batch(state: tuple[TrainingFeatures, Normalizer], batch: Batch) -> Part:
    """One batch as an Arrow table (built where the batch was encoded: it crosses processes as buffers), rendered
    and encoded a part at a time when its renderings exceed RENDER_BUDGET_CHARS (a template that writes megabytes
    per record), so the renderings held at once stay within the budget."""
    features, normalizer = state
    kept, left, steps = _normalized(normalizer, batch, features.per_turn)
    parts: list[Part] = []
    consumed = 0
    while not parts or consumed < len(kept):
        part = kept[consumed:]
        rendered, problems, done = features.render_part(
            [r for _, r in part], RENDER_BUDGET_CHARS, _places(part, "record")
        )
        first = (left, steps, len(batch)) if not parts else ([], {}, 0)
        parts.append(_finish(features, part[:done], features.encode_texts(rendered, problems), *first))
        consumed += done
    return _joined(parts)


def _parts(
    features: TrainingFeatures,
    normalizer: Normalizer,
    source: ConversationSource,
    report: PrepareReport,
    workers: int | None,
) -> Iterator[Part]:
    def unread(kind: str, where: int, why: str) -> None:
        report.records += 1
        report.note(kind, where, why)

    batches = record_batches(source, unread, report.tally.applied)
    if workers and workers > 1:
        yield from map_batches(constant((features, normalizer)), _table_of_batch, batches, workers=workers)
        return

    # Part j + 2 is rendered here while j + 1 is encoded (without the GIL) and j's rows and labels made. A part is a
    # batch, or the records of one whose renderings fit RENDER_BUDGET_CHARS; it is handed over once the one two
    # before it is done (three parts held at most), and a batch is yielded whole once its parts are done.
    with ThreadPoolExecutor(1) as encoder, ThreadPoolExecutor(1) as assembler:
        queued: deque[list[Future[Part]]] = deque()
        running: deque[Future[Part]] = deque()
        for batch in batches:
            kept, left, steps = _normalized(normalizer, batch, features.per_turn)
            parts: list[Future[Part]] = []
            consumed = 0
            while not parts or consumed < len(kept):
                part = kept[consumed:]
                places = _places(part, source.unit)
                rendered, problems, done = features.render_part([r for _, r in part], RENDER_BUDGET_CHARS, places)
                if len(running) == 2:
                    running.popleft().result()
                while queued and all(f.done() for f in queued[0]):  # batches before this one, done
                    yield _joined([f.result() for f in queued.popleft()])
                first = (left, steps, len(batch)) if not parts else ([], {}, 0)
                encoded = encoder.submit(features.encode_texts, rendered, problems)
                running.append(assembler.submit(_finish, features, part[:done], encoded, *first))
                parts.append(running[-1])
                consumed += done
            queued.append(parts)
        while queued:
            yield _joined([f.result() for f in queued.popleft()])


def _joined(parts: list[Part]) -> Part:
    """The parts of one batch as one (its table, what it left out, its steps and count, its stats)."""
    if len(parts) == 1:
        return parts[0]
    import pyarrow as pa

    _, left, steps, count, stats = parts[0]
    for _, more, _, _, more_stats in parts[1:]:
        left, stats = left + more, stats + more_stats
    return pa.concat_tables([p[0] for p in parts]), left, steps, count, stats


def _write_dataset_state(folder: Path, files: Sequence[str] = (DATA_FILE,)) -> None:
    """The two files `save_to_disk` writes beside its Arrow shards, for the shards streamed here (in order): the
    data is not read back and copied (with a memory map over the whole file, that would cost its size in RSS)."""
    from datasets import Dataset

    with _compat.hidden_torch_out_of_sight():
        dataset = Dataset.from_file(str(folder / files[0]))
    state = _compat.dataset_state(dataset)
    state["_split"] = None
    state["_data_files"] = [{"filename": name} for name in files]
    info = asdict(dataset.info)
    del dataset
    (folder / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
    (folder / "dataset_info.json").write_text(
        json.dumps({k: info[k] for k in sorted(info)}, indent=2), encoding="utf-8"
    )


def _stream(
    features: TrainingFeatures,
    normalizer: Normalizer,
    source: ConversationSource,
    arrow: Path,
    report: PrepareReport,
    options: tuple[int | None, bool],
) -> None:
    """Every batch into one Arrow shard, counting records, tokens and what was left out."""
    from datasets import Features, Sequence, Value

    workers, progress = options
    types = PACKED_TYPES if report.pack else FEATURE_TYPES
    schema = Features({name: Sequence(Value(kind)) for name, kind in types.items()})
    bar = progress_bar(progress)
    with _compat.arrow_writer(features=schema, path=str(arrow)) as writer:
        for table, problems, steps, count, stats in _parts(features, normalizer, source, report, workers):
            report.records += count
            report.truncated += stats.truncated
            report.assistant_tokens += stats.assistant_tokens
            report.control_spellings += stats.control_spellings
            report.segments += stats.segments
            report.segments_off = report.segments_off or stats.segments_off
            report.encoder_off = report.encoder_off or stats.encoder_off
            report.shapes += stats.shapes
            report.shapes_off = report.shapes_off or stats.shapes_off
            report.turns_left_out += stats.turns_left_out
            report.tokens_left_out += stats.tokens_left_out
            room = MAX_LISTED - len(report.left_out)
            report.left_out += [(where, i, why) for where, i, why in stats.left_out[: max(room, 0)]]
            if report.per_turn:  # a record's examples left out count as the record, once
                problems = _first_per_record(problems)
            for kind, where, why in problems:
                report.note(kind, where, why)
            # every step is reported; a field lost counts toward the limit for records kept (one left out whole
            # counts as that already), and a record once
            gone = {where for kind, where, _ in problems if kind in SKIP_KINDS}
            # with --per-turn, an earlier turn's reasoning dropped from one example is in that turn's own example
            losses = set(LOSSES) - ({EARLIER_REASONING_DROPPED} if report.per_turn else set())
            lossy = {w for step, wheres in steps.items() if step in losses for w in wheres} - gone
            report.tally.add(RecordTally(steps={step: len(w) for step, w in steps.items()}, lossy=len(lossy)))
            report.encoded += table.num_rows
            if report.pack and table.num_rows:
                # Packed per batch: sequences do not cross batches, so memory stays flat
                table, packed = pack(table, report.pack)
                report.packing += packed
            if table.num_rows:
                writer.write_table(table)
                tokens, trained = token_counts(table)
                report.tokens, report.trained_tokens = report.tokens + tokens, report.trained_tokens + trained
            bar(count)
        writer.finalize()
    bar(0, close=True)


def template_normalizer(features: TrainingFeatures) -> Normalizer:
    """The normalization the features' template needs, decided by rendering probes the way records render."""
    state = features.state

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        return render_record(state, {"messages": messages, "tools": tools}, by_shape=False)[0]

    return Normalizer.for_template(render)


def _features(resolved: ChosenTemplate, max_length: int | None, training: dict[str, Any]) -> TrainingFeatures:
    """The features for the resolved template: the tokens declared, else the family's (a family named, not one
    identified), and the family's control tokens with those declared."""
    declared, var = resolved.declared, resolved.variant
    return TrainingFeatures(
        resolved.path,
        template=resolved.template,
        kwargs=resolved.kwargs,
        max_length=max_length,
        stop_tokens=declared.stop_tokens if declared.stop_tokens is not None else (var.stop_tokens if var else None),
        control_tokens=(*(declared.control_tokens or ()), *(var.control_tokens if var else ())) or None,
        allow_unwritten_tokens=declared.allow_unwritten_tokens,
        **training,
    )


def _check_prepare_options(pack: int | None) -> None:
    if pack is not None and pack < 1:
        raise UsageError(
            f"{option('pack')} {pack}: a sequence length is at least 1", hint=f"{option('pack')} 4096", parameter="pack"
        )
    try:
        import pyarrow.compute  # noqa: F401
        from datasets import Features  # noqa: F401
    except ImportError:
        raise missing_dependency("datasets", "train", "prepare") from None


def new_report(
    features: TrainingFeatures,
    normalizer: Normalizer,
    where: tuple[str, str, str, str],
    training: dict[str, Any],
    pack: int | None,
) -> PrepareReport:
    """A run's report before any batch (`prepare`'s and `prepare_on_ray`'s); `where` is (input, output, unit, limit)."""
    path, output, unit, limit = where
    state = features.state
    return PrepareReport(
        path=path,
        output=output,
        spans_from=state.spans_from,
        tokens_from=state.tokens_from,
        stop_tokens=state.stops,
        token_notes=state.token_notes,
        segments_off=state.segments.off if state.segments is not None else "",
        encoder_off=state.segments.engine_off if state.segments is not None else "",
        unit=unit,
        reasoning_field=normalizer.reasoning_field,
        max_skipped=limit,
        **training,
        pack=pack,
    )


def prepare(
    source: str | Path,
    conversations: str | Path,
    output: str | Path,
    choice: TemplateChoice | str | Family | None = None,
    *,
    max_length: int | None = None,
    workers: int | None = None,
    force: bool = False,
    progress: bool = False,
    input_format: str = "auto",
    messages_column: str | None = None,
    tools_column: str = "tools",
    split: str | None = None,
    max_skipped: int | str = 0,
    train_on: str = "all",
    allow_control_tokens_in_content: bool = False,
    pack: int | None = None,
    exact: bool = False,
    check_every: int = CHECK_EVERY,
    per_turn: bool = False,
) -> PrepareReport:
    """Stream a dataset of conversations into a datasets `Dataset` saved at `output` (written atomically), rendered
    with the template `choice` names (default: the tokenizer's own; a family or its name; or a `TemplateChoice`).

    `conversations` is a JSONL, JSON or Parquet file, a datasets folder or a Hub dataset id (its `split`, default
    train); `input_format` is auto, openai, sharegpt or messages, read from `messages_column` (default messages,
    ShareGPT: conversations) and `tools_column`. `max_skipped` (N records, or "P%") bounds the records that cannot be
    read, normalized or rendered: above it nothing is written and `report.over_limit` says why. The choice's
    `stop_tokens` replace the family's or inferred ones; its `control_tokens` are used with those found. `train_on`
    (all, last, weighted: a message's `weight` 0/1 or `train` key) picks the turns trained; content that spells a
    control token is encoded as text unless `allow_control_tokens_in_content`; `pack` packs rows into sequences of at
    most that many tokens (best fit, `position_ids` restarting per example, as TRL's padding-free training reads
    them). `exact`: no fast path (transformers' template, the tokenizer's whole-string encoding); else one record in
    `check_every` goes both ways too. `per_turn`: one example per assistant turn, the conversation cut after it,
    that turn trained."""
    _check_prepare_options(pack)
    limit = SkipLimit.parse(max_skipped)
    data = open_conversations(
        conversations,
        input_format=input_format,
        messages_column=messages_column,
        tools_column=tools_column,
        split=split,
    )
    out = Path(output).absolute()
    check_output(out, force=force)
    check_outside(out, source, "the source tokenizer")
    check_outside(out, conversations, "the conversations folder")
    resolved = choose_template(source, as_choice(choice))
    training: dict[str, Any] = {
        "train_on": train_on,
        "allow_control_tokens_in_content": allow_control_tokens_in_content,
        "exact": exact,
        "check_every": check_every,
        "per_turn": per_turn,
    }
    cut_by = "--max-length"
    if pack is not None:  # rows longer than a sequence are cut (and reported by line) before packing
        cut_by = "--pack" if max_length is None or pack < max_length else cut_by
        max_length = min(max_length or pack, pack)
    features = _features(resolved, max_length, training)
    normalizer = template_normalizer(features)
    report = new_report(features, normalizer, (data.name, str(out), data.unit, limit.text), training, pack)
    report.cut_by = cut_by
    _publish(features, normalizer, data, out, report, limit, (workers, progress, force))
    report.path = data.label
    return report


def _publish(
    features: TrainingFeatures,
    normalizer: Normalizer,
    data: ConversationSource,
    out: Path,
    report: PrepareReport,
    limit: SkipLimit,
    options: tuple[int | None, bool, bool],
) -> None:
    """Stream into a staging folder, then publish it, or discard it past the skip limit or with nothing written."""
    workers, progress, force = options
    # The caller's objects (a notebook's dataset, say) are moved out of the collector's way: each batch allocates
    # many short-lived objects, and every collection would otherwise walk everything the process holds.
    gc.freeze()
    try:
        with staged_folder(out, force=force) as staging:
            _stream(features, normalizer, data, staging.path / DATA_FILE, report, (workers, progress))
            report.over_limit = over_limit(report.tally, report.records, limit)
            if report.over_limit or not report.encoded:  # an empty Arrow file is not a loadable dataset
                report.output = ""
                staging.discard()
            else:
                report.written = report.encoded
                _write_dataset_state(staging.path)
    finally:
        gc.unfreeze()
