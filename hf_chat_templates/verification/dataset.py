"""`verify --conversations`: the per-record checks over a dataset of conversations, streamed, in batches, in workers.

Records are read as `prepare` reads them (JSONL, JSON, Parquet, a datasets folder or a Hub dataset; OpenAI,
messages or ShareGPT records: `conversations.records`) and normalized for the template the same way
(`conversations.normalize`). A line that cannot be read or is not a conversation is reported by its number and
skipped; the run goes on, and no record aborts it. Per record: `renders`, then the record checks
of `checks.RECORD_CHECKS`: `no-double-bos` (the rendering's own ids, as apply_chat_template(tokenize=True) and
`prepare` give them; the BOS a post-processor adds to tokenizer(text) is the template check's warning),
`decode-roundtrip` (decoded, or proven by construction where the tokenizer cannot lose text: byte-level BPE always,
SentencePiece unless the text holds "▁"), `nothing-dropped` (every string content and tool-call name appears in
the rendering) and `injection` (content that spells a registered control token). Rendering goes through
transformers' own batch rendering, encoding through one batched call.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _compat
from ..conversations.batches import map_batches, progress_bar, render_batch
from ..conversations.normalize import (
    REASONING_DROPPED,
    REASONING_FIELDS,
    Normalizer,
    RecordProblem,
    RecordTally,
    SkipLimit,
    over_limit,
)
from ..conversations.records import open_conversations, record_batches
from ..errors import UsageError, option
from ..families.registry import Family
from ..families.source import TemplateChoice, as_choice, choose_template
from ..template.limits import RenderLimits
from ..template.rendering import named_template
from ..tokenizer.folder import load_tokenizer, read_folder
from ..tokenizer.lossless import lossless_unless
from .checks import RECORD_CHECK_IDS, RECORD_CHECKS, WARNING_ONLY
from .checks.tokens import bos_positions, doubled
from .context import RecordContext

MAX_EXAMPLES = 5
MAX_LISTED = 100


def _no_template(source: str | Path) -> UsageError:
    return UsageError(
        f"{source}: the tokenizer has no chat template",
        hint=f"pass {option('family')} NAME or {option('template')} FILE, or install one first",
        path=source,
    )


@dataclass
class DatasetReport:
    path: str
    records: int = 0
    rendered: int = 0  # records that rendered: the only ones the checks after `renders` could look at
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    failed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RECORD_CHECK_IDS, 0))
    examples: dict[str, list[tuple[int, str]]] = field(default_factory=lambda: {c: [] for c in RECORD_CHECK_IDS})
    tally: RecordTally = field(default_factory=RecordTally)
    unit: str = "line"  # what a record's number counts: a line of the file, or a row
    reasoning_field: str | None = None
    max_skipped: str = ""  # no limit unless given
    over_limit: str = ""
    checks: tuple[str, ...] = RECORD_CHECK_IDS  # the per-record checks run (verify --only picks them)
    fields: dict[str, int] = field(default_factory=dict)  # records that carry each field (system, tools, ...)

    @property
    def ok(self) -> bool:
        """No check failed, the skips within --max-skipped, and at least one record checked (an empty data set
        proves nothing, and prepare refuses it too)."""
        return (
            self.records > 0
            and not self.over_limit
            and not any(self.failed[c] for c in self.checks if c not in WARNING_ONLY)
        )

    def checked(self, check_id: str) -> int:
        """Records `check_id` looked at: every one for `renders`, the rendered ones for the others."""
        return self.records if check_id == "renders" else self.rendered

    def note(self, kind: str, where: int, why: str) -> None:
        """A record left out before it could be checked (it could not be read, or is not a conversation)."""
        self.tally.skip(kind, where, why)
        if len(self.bad_lines) < MAX_LISTED:
            self.bad_lines.append((where, why))

    def add(self, other: DatasetReport) -> None:
        self.records += other.records
        self.rendered += other.rendered
        self.bad_lines = sorted(self.bad_lines + other.bad_lines)[:MAX_LISTED]
        self.tally.add(other.tally)
        self.reasoning_field = self.reasoning_field or other.reasoning_field
        for name, n in other.fields.items():
            self.fields[name] = self.fields.get(name, 0) + n
        for c in RECORD_CHECK_IDS:
            self.failed[c] += other.failed[c]
            self.examples[c] = (self.examples[c] + other.examples[c])[:MAX_EXAMPLES]

    @property
    def bad_line_count(self) -> int:
        return self.tally.skipped["read"] + self.tally.skipped["normalize"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "records": self.records,
            "rendered": self.rendered,
            "unit": self.unit,
            "bad_lines": [{"line": n, "reason": r} for n, r in self.bad_lines],
            "bad_line_count": self.bad_line_count,
            "skips": self.tally.to_dict(self.reasoning_field),
            "fields": self.fields,
            "max_skipped": self.max_skipped,
            "over_limit": self.over_limit,
            "checks": {
                c: {
                    "failed": self.failed[c],
                    "passed": self.checked(c) - self.failed[c],
                    "not_checked": self.records - self.checked(c),
                    "examples": [{"line": n, "message": m} for n, m in self.examples[c]],
                }
                for c in self.checks
            },
        }

    def describe(self) -> str:
        lines = [
            f"conversations {self.path}: {self.records} records checked, {self.bad_line_count} bad {self.unit}s "
            "skipped",
            *(f"  normalized: {line}" for line in self.tally.step_lines(self.reasoning_field)),
        ]
        for n, reason in self.bad_lines[:MAX_EXAMPLES]:
            lines.append(f"  bad {self.unit} {n}: {reason}")
        for c in self.checks:
            status = "ok" if not self.failed[c] else ("warn" if c in WARNING_ONLY else "FAIL")
            unchecked = self.records - self.checked(c)
            lines.append(
                f"  {status:<4} {c:<20} {self.checked(c) - self.failed[c]} passed, {self.failed[c]} failed"
                + (f", {unchecked} not checked (did not render)" if unchecked else "")
            )
            for n, message in self.examples[c]:
                lines.append(f"       {self.unit} {n}: {message}")
        if self.over_limit:
            lines.append(f"  FAIL {self.over_limit}")
        if not self.records:
            lines.append(f"  FAIL no record to check: {self.path} holds no conversation that could be read")
        return "\n".join(lines)


class RecordChecker:
    """Checks batches of records against one tokenizer and template; built once per worker."""

    def __init__(
        self, source: str, template: str | None, kwargs: dict[str, Any], only: tuple[str, ...] | None = None
    ) -> None:
        self.record_checks = [(c, check) for c, check in RECORD_CHECKS if only is None or c in only]
        self.tokenizer = load_tokenizer(source, read_folder(source) if Path(source).is_dir() else None)
        found = template or named_template(self.tokenizer)
        if found is None:
            raise _no_template(source)
        self.template = found
        self.kwargs = {**self.tokenizer.special_tokens_map, **kwargs}
        self.bos_id = self.tokenizer.bos_token_id
        self.breaker = lossless_unless(self.tokenizer)
        self.limits = RenderLimits.from_env()
        self.controls = tuple(
            t.content for t in self.tokenizer.added_tokens_decoder.values() if t.special and t.content in self.template
        )
        self.normalizer = Normalizer.for_template(
            lambda messages, tools: self._render_one({"messages": messages, "tools": tools})
        )

    def check(self, batch: list[tuple[int, dict[str, Any]]]) -> DatasetReport:
        return self.finish(*self.render(batch))

    def _normalized(self, report: DatasetReport, batch: list[tuple[int, dict[str, Any]]]) -> list[Any]:
        kept = []
        for number, record in batch:
            try:
                normal, steps = self.normalizer.apply(record)
            except RecordProblem as err:
                report.note("normalize", number, str(err))
                continue
            except Exception as err:  # a shape no check foresaw: that record is reported, the batch goes on
                report.note("normalize", number, f"cannot be normalized ({type(err).__name__}: {err})")
                continue
            for name in carried_fields(normal, reasoning_dropped=REASONING_DROPPED in steps):
                report.fields[name] = report.fields.get(name, 0) + 1
            kept.append((number, normal, steps))
        return kept

    def _render_one(self, record: dict[str, Any]) -> str:
        return _compat.render_conversations(
            self.template, [_compat.normalize_messages(record["messages"])], record.get("tools"), **self.kwargs
        )[0]

    def render(
        self, batch: list[tuple[int, dict[str, Any]]]
    ) -> tuple[DatasetReport, list[tuple[int, dict[str, Any], str]]]:
        """Render a batch (Python, holds the GIL); `finish` encodes and checks it."""
        report = DatasetReport(path="", reasoning_field=self.normalizer.reasoning_field)
        normalized = self._normalized(report, batch)
        report.records = len(normalized)
        texts = []
        for index, text, problem in render_batch([r for _, r, _ in normalized], self._render_one, limits=self.limits):
            number, record, steps = normalized[index]
            if text is None:
                _fail(report, "renders", number, str(problem))
                report.tally.skip("render", number, str(problem))
            else:
                report.tally.applied(steps)  # a record left out counts once, as that, not also for a field it lost
                texts.append((number, record, text))
        report.rendered = len(texts)
        return report, texts

    def _bos_count(self, ids: list[int], text: str) -> int:
        """BOS in the rendering's own ids (add_special_tokens=False, as apply_chat_template(tokenize=True) gives
        them): what the model is trained on. The post-processor's BOS for tokenizer(text) is not counted: that is a
        calling convention, the same for every record, which the template check `no-double-bos` warns about. A BOS
        the template writes to open every message is its format: counted once unless one is doubled."""
        if self.bos_id is None:
            return 0
        bos_is_eos = self.bos_id == self.tokenizer.eos_token_id
        positions = bos_positions(ids, self.bos_id, bos_is_eos=bos_is_eos)
        return len(positions) if doubled(positions, text, self.tokenizer.bos_token) else min(len(positions), 1)

    def _decoded(self, texts: list[str], ids: list[list[int]]) -> list[str]:
        """Decode only what is not proven lossless by construction (see lossless_unless)."""
        decoded = list(texts)
        unproven = [i for i, t in enumerate(texts) if self.breaker is None or (self.breaker and self.breaker in t)]
        if unproven:
            backend = self.tokenizer.backend_tokenizer
            for i, back in zip(unproven, backend.decode_batch([ids[i] for i in unproven], skip_special_tokens=False)):
                decoded[i] = (
                    self.tokenizer.clean_up_tokenization(back) if self.tokenizer.clean_up_tokenization_spaces else back
                )
        return decoded

    def finish(self, report: DatasetReport, texts: list[tuple[int, dict[str, Any], str]]) -> DatasetReport:
        """Encode a rendered batch (Rust, releases the GIL) and run the per-record checks."""
        if not texts:
            return report
        backend = self.tokenizer.backend_tokenizer
        # One encoding per record, without offsets: the checks need ids only.
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
        ids = [e.ids for e in encode([t for _, _, t in texts], add_special_tokens=False)]
        decoded = self._decoded([t for _, _, t in texts], ids)
        for (number, record, text), record_ids, back in zip(texts, ids, decoded):
            bos = self._bos_count(record_ids, text)
            rc = RecordContext(record, text, record_ids, back, bos, self.controls)
            for check_id, check in self.record_checks:
                try:
                    message = check(rc)
                except Exception as err:  # a record shape the check did not foresee: that record fails it
                    message = f"the check could not run on this record ({type(err).__name__}: {err})"
                if message is not None:
                    _fail(report, check_id, number, message)
        return report


def carried_fields(record: dict[str, Any], *, reasoning_dropped: bool = False) -> set[str]:
    """What a normalized record carries, by verify's capability names: system, tools, tool_calls, parallel_calls,
    tool_results, content_parts, reasoning (also when normalization dropped it because the template reads none)."""
    messages = record["messages"]
    found = {"tools"} if record.get("tools") else set()
    if messages and messages[0].get("role") == "system" and messages[0].get("content"):
        found.add("system")
    for m in messages:
        if m.get("tool_calls"):
            found.add("tool_calls")
            if len(m["tool_calls"]) > 1:
                found.add("parallel_calls")
        if isinstance(m.get("content"), list):
            found.add("content_parts")
        if m.get("role") == "tool":
            found.add("tool_results")
        if m.get("role") == "assistant" and any(m.get(name) for name in REASONING_FIELDS):
            found.add("reasoning")
    return found | ({"reasoning"} if reasoning_dropped else set())


def _fail(report: DatasetReport, check: str, number: int, message: str) -> None:
    report.failed[check] += 1
    if len(report.examples[check]) < MAX_EXAMPLES:
        report.examples[check].append((number, message))


def verify_conversations(
    source: str | Path,
    conversations: str | Path,
    choice: TemplateChoice | str | Family | None = None,
    *,
    workers: int | None = None,
    revision: str | None = None,
    token: str | None = None,
    progress: bool = False,
    input_format: str = "auto",
    messages_column: str | None = None,
    tools_column: str = "tools",
    split: str | None = None,
    max_skipped: int | str | None = None,
    only: Iterable[str] | None = None,
) -> DatasetReport:
    """Run the per-record checks over a dataset of conversations, streaming it in batches (in `workers` processes),
    rendered with the template `choice` names (default: the tokenizer's own; its declared tokens are not read here).

    `conversations`, `input_format`, `messages_column`, `tools_column` and `split` are read as `prepare` reads
    them. With `max_skipped` (N records, or "P%"), more records that cannot be read, normalized or rendered than
    that make the report fail (`over_limit` says why); without it, they are reported and the checks decide.
    `only` (check ids) runs those of the per-record checks; `renders` always runs."""
    chosen = None if only is None else tuple(c for c in RECORD_CHECK_IDS if c == "renders" or c in set(only))
    limit = SkipLimit.parse(max_skipped) if max_skipped is not None else None
    data = open_conversations(
        conversations,
        input_format=input_format,
        messages_column=messages_column,
        tools_column=tools_column,
        split=split,
    )
    resolved = choose_template(source, as_choice(choice), revision=revision, token=token)
    if resolved.template is None and read_folder(resolved.path).named_template("default") is None:
        # Said here, before any worker starts: a worker that fails to start is restarted, not reported.
        raise _no_template(resolved.path)
    report = DatasetReport(
        path=data.name, unit=data.unit, max_skipped=limit.text if limit else "", checks=chosen or RECORD_CHECK_IDS
    )
    bar = progress_bar(progress)
    factory = functools.partial(RecordChecker, str(resolved.path), resolved.template, resolved.kwargs, chosen)
    batches = record_batches(data, report.note, report.tally.applied)
    for part in map_batches(factory, RecordChecker.check, batches, workers=workers):
        report.add(part)
        bar(part.records)
    bar(0, close=True)
    report.path = data.label
    if limit is not None:
        report.over_limit = over_limit(report.tally, report.records + report.bad_line_count, limit)
    return report
