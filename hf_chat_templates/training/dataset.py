"""`prepare`: training features for a whole JSONL dataset, streamed into a datasets `Dataset` folder (Arrow).

Records are read, rendered and encoded in batches (the next batch renders while the tokenizer encodes the last)
and written to one Arrow shard as they go; `datasets.load_from_disk` reads the folder. It is written through the
one writer (`outputs.staged_folder`): staged beside the output, renamed into place at the end, nothing published
when no record has anything to train.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import _compat
from ..conversations.batches import constant, map_batches, progress_bar
from ..conversations.records import conversations_file, record_batches
from ..errors import missing_dependency
from ..families.source import choose_template
from ..outputs import check_output, staged_folder
from .features import FEATURE_TYPES, IGNORE_INDEX, TrainingFeatures

DATA_FILE = "data-00000-of-00001.arrow"
Part = tuple[Any, list[tuple[int, str]], int, int]  # (table, (line, why) left out, records, truncated)


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
    tokens_from: str = ""
    stop_tokens: tuple[str, ...] = ()
    token_notes: tuple[str, ...] = ()  # what token inference chose or could not decide

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "output": self.output,
            "records": self.records,
            "written": self.written,
            "tokens": self.tokens,
            "trained_tokens": self.trained_tokens,
            "truncated": self.truncated,
            "bad_line_count": len(self.bad_lines),
            "skipped_count": len(self.skipped),
            "bad_lines": [{"line": n, "reason": r} for n, r in self.bad_lines[:100]],
            "skipped": [{"line": n, "reason": r} for n, r in self.skipped[:100]],
            "spans_from": self.spans_from,
            "tokens_from": self.tokens_from,
            "stop_tokens": list(self.stop_tokens),
            "token_notes": list(self.token_notes),
        }

    def describe(self) -> str:
        lines = [
            f"prepared {self.written} of {self.records} records from {self.path} into "
            + (self.output or "nothing: no record has anything to train, so no output written"),
            f"  spans from: {self.spans_from}",
            f"  stop tokens: {' '.join(self.stop_tokens)} ({self.tokens_from})",
            *(f"  note: {n}" for n in self.token_notes),
            f"  {self.tokens:,} tokens, {self.trained_tokens:,} trained "
            f"({self.trained_tokens / max(self.tokens, 1):.1%}); {self.truncated} truncated to --max-length",
        ]
        problems = sorted(self.bad_lines + self.skipped)
        if problems:
            lines.append(
                f"  skipped {len(problems)} line(s): {len(self.bad_lines)} not a conversation, "
                f"{len(self.skipped)} with nothing to train"
            )
            lines += [f"    line {n}: {reason}" for n, reason in problems[:10]]
            if len(problems) > 10:
                lines.append(f"    … and {len(problems) - 10} more (--json lists up to 100)")
        return "\n".join(lines)


def _table_of_batch(features: TrainingFeatures, batch: list[tuple[int, dict[str, Any]]]) -> Part:
    """One batch as an Arrow table (built where the batch was encoded: it crosses processes as buffers)."""
    table, problems, truncated = features.table(*features.render_batch([r for _, r in batch]))
    return table, [(batch[i][0], why) for i, why in problems], len(batch), truncated


def _parts(features: TrainingFeatures, path: Path, report: PrepareReport, workers: int | None) -> Iterator[Part]:
    batches = record_batches(path, report.bad_lines)
    if workers and workers > 1:
        yield from map_batches(constant(features), _table_of_batch, batches, workers=workers)
        return

    # Render batch k + 1 while batch k is encoded: encode_batch releases the GIL, so the tokenizer's threads and the
    # template's Python overlap.
    def finish(batch: list[tuple[int, dict[str, Any]]], rendered: Any) -> Part:
        table, problems, truncated = features.table(*rendered)
        return table, [(batch[i][0], why) for i, why in problems], len(batch), truncated

    with ThreadPoolExecutor(1) as encoder:
        pending = None
        for batch in batches:
            future = encoder.submit(finish, batch, features.render_batch([r for _, r in batch]))
            if pending is not None:
                yield pending.result()
            pending = future
        if pending is not None:
            yield pending.result()


def _write_dataset_state(folder: Path) -> None:
    """The two files `save_to_disk` writes beside its Arrow shards, for the one shard streamed here: the data is
    not read back and copied (with a memory map over the whole file, that would cost its size in RSS)."""
    from datasets import Dataset

    dataset = Dataset.from_file(str(folder / DATA_FILE))
    state = _compat.dataset_state(dataset)
    state["_split"] = None
    state["_data_files"] = [{"filename": DATA_FILE}]
    info = asdict(dataset.info)
    del dataset
    (folder / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
    (folder / "dataset_info.json").write_text(
        json.dumps({k: info[k] for k in sorted(info)}, indent=2), encoding="utf-8"
    )


def _stream(
    features: TrainingFeatures, path: Path, arrow: Path, report: PrepareReport, workers: int | None, progress: bool
) -> None:
    """Every batch into one Arrow shard, counting records, tokens and what was left out."""
    import pyarrow.compute as pc
    from datasets import Features, Sequence, Value

    schema = Features({name: Sequence(Value(kind)) for name, kind in FEATURE_TYPES.items()})
    bar = progress_bar(progress)
    with _compat.arrow_writer(features=schema, path=str(arrow)) as writer:
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


def prepare(
    source: str | Path,
    conversations: str | Path,
    output: str | Path,
    *,
    family: str | None = None,
    variant: str | None = None,
    template: str | Path | None = None,
    kwargs: dict[str, Any] | None = None,
    stop_tokens: Iterable[str] | None = None,
    control_tokens: Iterable[str] | None = None,
    max_length: int | None = None,
    workers: int | None = None,
    force: bool = False,
    progress: bool = False,
) -> PrepareReport:
    """Stream a JSONL file of conversations into a datasets `Dataset` saved at `output` (written atomically).

    `stop_tokens` declares the tokens that end an assistant turn (they replace the family's or inferred ones);
    `control_tokens` declares control tokens the template writes, used with those found."""
    try:
        import pyarrow.compute  # noqa: F401
        from datasets import Features  # noqa: F401
    except ImportError:
        raise missing_dependency("datasets", "train", "prepare") from None
    path = conversations_file(conversations)
    out = Path(output).absolute()
    check_output(out, force=force)
    choice = choose_template(source, family=family, variant=variant, template=template, kwargs=kwargs)
    var = choice.variant if family else None
    features = TrainingFeatures(
        choice.path,
        template=choice.template,
        kwargs=choice.kwargs,
        max_length=max_length,
        stop_tokens=tuple(stop_tokens) if stop_tokens is not None else (var.stop_tokens if var else None),
        control_tokens=(*(control_tokens or ()), *(var.control_tokens if var else ())) or None,
    )
    state = features.state
    report = PrepareReport(
        path=str(path),
        output=str(out),
        spans_from=state.spans_from,
        tokens_from=state.tokens_from,
        stop_tokens=state.stops,
        token_notes=state.token_notes,
    )
    # The caller's objects (a notebook's dataset, say) are moved out of the collector's way: each batch allocates
    # many short-lived objects, and every collection would otherwise walk everything the process holds.
    gc.freeze()
    try:
        with staged_folder(out, force=force) as staging:
            _stream(features, path, staging.path / DATA_FILE, report, workers, progress)
            if not report.written:  # an empty Arrow file is not a loadable dataset; write nothing
                report.output = ""
                staging.discard()
            else:
                _write_dataset_state(staging.path)
    finally:
        gc.unfreeze()
    return report
