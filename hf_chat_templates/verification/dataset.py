"""`verify --conversations`: the per-record checks over a JSONL dataset, streamed, in batches, in workers.

Each line is `{"messages": [...], "tools": [...]}`. A line that is not JSON, or a record without a list of messages
with roles, is reported by line number and skipped; the run goes on. Per record: `renders`, then the record checks
of `checks.RECORD_CHECKS`: `no-double-bos` (the rendered string tokenized with the tokenizer's defaults),
`decode-roundtrip` (decoded, or proven by construction where the tokenizer cannot lose text: byte-level BPE always,
SentencePiece unless the text holds "▁"), `nothing-dropped` (every string content and tool-call name appears in
the rendering) and `injection` (content that spells a registered control token). Rendering goes through
transformers' own batch rendering, encoding through one batched call.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _compat
from ..conversations.batches import map_batches, progress_bar, render_batch
from ..conversations.records import conversations_file, record_batches
from ..errors import UsageError, option
from ..families.source import choose_template
from ..template.limits import RenderLimits
from ..template.rendering import named_template
from ..tokenizer.folder import read_folder
from ..tokenizer.lossless import lossless_unless
from .checks import RECORD_CHECK_IDS, RECORD_CHECKS, WARNING_ONLY
from .checks.tokens import bos_positions
from .context import RecordContext

MAX_EXAMPLES = 5


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
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    failed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RECORD_CHECK_IDS, 0))
    examples: dict[str, list[tuple[int, str]]] = field(default_factory=lambda: {c: [] for c in RECORD_CHECK_IDS})

    @property
    def ok(self) -> bool:
        return not any(self.failed[c] for c in RECORD_CHECK_IDS if c not in WARNING_ONLY)

    def add(self, other: DatasetReport) -> None:
        self.records += other.records
        self.bad_lines += other.bad_lines
        for c in RECORD_CHECK_IDS:
            self.failed[c] += other.failed[c]
            self.examples[c] = (self.examples[c] + other.examples[c])[:MAX_EXAMPLES]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "records": self.records,
            "bad_lines": [{"line": n, "reason": r} for n, r in self.bad_lines[:100]],
            "bad_line_count": len(self.bad_lines),
            "checks": {
                c: {
                    "failed": self.failed[c],
                    "passed": self.records - self.failed[c],
                    "examples": [{"line": n, "message": m} for n, m in self.examples[c]],
                }
                for c in RECORD_CHECK_IDS
            },
        }

    def describe(self) -> str:
        lines = [f"conversations {self.path}: {self.records} records checked, {len(self.bad_lines)} bad lines skipped"]
        for n, reason in self.bad_lines[:MAX_EXAMPLES]:
            lines.append(f"  bad line {n}: {reason}")
        for c in RECORD_CHECK_IDS:
            status = "ok" if not self.failed[c] else ("warn" if c in WARNING_ONLY else "FAIL")
            lines.append(f"  {status:<4} {c:<20} {self.records - self.failed[c]} passed, {self.failed[c]} failed")
            for n, message in self.examples[c]:
                lines.append(f"       line {n}: {message}")
        return "\n".join(lines)


class RecordChecker:
    """Checks batches of records against one tokenizer and template; built once per worker."""

    def __init__(self, source: str, template: str | None, kwargs: dict[str, Any]) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(source)
        found = template or named_template(self.tokenizer)
        if found is None:
            raise _no_template(source)
        self.template = found
        self.kwargs = {**self.tokenizer.special_tokens_map, **kwargs}
        self.bos_id = self.tokenizer.bos_token_id
        # What tokenizer(text) adds with its defaults (a BOS from the post-processor), counted once, not re-encoded.
        self.added_bos = self.tokenizer("", add_special_tokens=True)["input_ids"].count(self.bos_id)
        self.breaker = lossless_unless(self.tokenizer)
        self.limits = RenderLimits.from_env()
        self.controls = tuple(
            t.content for t in self.tokenizer.added_tokens_decoder.values() if t.special and t.content in self.template
        )

    def check(self, batch: list[tuple[int, dict[str, Any]]]) -> DatasetReport:
        return self.finish(*self.render(batch))

    def _render_one(self, record: dict[str, Any]) -> str:
        return _compat.render_conversations(
            self.template, [_compat.normalize_messages(record["messages"])], record.get("tools"), **self.kwargs
        )[0]

    def render(
        self, batch: list[tuple[int, dict[str, Any]]]
    ) -> tuple[DatasetReport, list[tuple[int, dict[str, Any], str]]]:
        """Render a batch (Python, holds the GIL); `finish` encodes and checks it."""
        report = DatasetReport(path="", records=len(batch))
        texts = []
        for index, text, problem in render_batch([r for _, r in batch], self._render_one, limits=self.limits):
            number, record = batch[index]
            if text is None:
                _fail(report, "renders", number, str(problem))
            else:
                texts.append((number, record, text))
        return report, texts

    def _bos_count(self, ids: list[int]) -> int:
        """BOS in `tokenizer(rendered)` with its defaults: the rendering's own plus what the post-processor adds
        (counted once, not re-encoded)."""
        if self.bos_id is None:
            return 0
        bos_is_eos = self.bos_id == self.tokenizer.eos_token_id
        return len(bos_positions(ids, self.bos_id, bos_is_eos=bos_is_eos)) + self.added_bos

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
            bos = self._bos_count(record_ids)
            rc = RecordContext(record, text, record_ids, back, bos, self.controls)
            for check_id, check in RECORD_CHECKS:
                message = check(rc)
                if message is not None:
                    _fail(report, check_id, number, message)
        return report


def _fail(report: DatasetReport, check: str, number: int, message: str) -> None:
    report.failed[check] += 1
    if len(report.examples[check]) < MAX_EXAMPLES:
        report.examples[check].append((number, message))


def verify_conversations(
    source: str | Path,
    conversations: str | Path,
    *,
    family: str | None = None,
    variant: str | None = None,
    template: str | Path | None = None,
    kwargs: dict[str, Any] | None = None,
    workers: int | None = None,
    revision: str | None = None,
    token: str | None = None,
    progress: bool = False,
) -> DatasetReport:
    """Run the per-record checks over a JSONL file, streaming it in batches (in `workers` processes)."""
    path = conversations_file(conversations)
    choice = choose_template(
        source, family=family, variant=variant, template=template, kwargs=kwargs, revision=revision, token=token
    )
    if choice.template is None and read_folder(choice.path).named_template("default") is None:
        # Said here, before any worker starts: a worker that fails to start is restarted, not reported.
        raise _no_template(choice.path)
    report = DatasetReport(path=str(path))
    bar = progress_bar(progress)
    factory = functools.partial(RecordChecker, str(choice.path), choice.template, choice.kwargs)
    for part in map_batches(factory, RecordChecker.check, record_batches(path, report.bad_lines), workers=workers):
        report.add(part)
        bar(part.records)
    bar(0, close=True)
    return report
