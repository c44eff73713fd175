"""`prepare`'s report: what was written, what was left out and why, and how each fast path fared."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..conversations.normalize import LEFT_OUT, UNTRAINED, RecordTally
from .bpe_engine import describe_encoder
from .packing import PackStats
from .segments import SegmentStats
from .shapes import CHECK_EVERY, ShapeStats

MAX_LISTED = 100


@dataclass
class PrepareReport:
    path: str
    output: str = ""
    records: int = 0
    written: int = 0
    tokens: int = 0
    trained_tokens: int = 0
    truncated: int = 0
    bad_lines: list[tuple[int, str]] = field(default_factory=list)  # could not be read, or not a conversation
    unrendered: list[tuple[int, str]] = field(default_factory=list)  # the template failed on them
    skipped: list[tuple[int, str]] = field(default_factory=list)  # nothing to train
    spans_from: str = ""
    tokens_from: str = ""
    stop_tokens: tuple[str, ...] = ()
    token_notes: tuple[str, ...] = ()  # what token inference chose or could not decide
    unit: str = "line"  # what a record's number counts: a line of the file, or a row
    tally: RecordTally = field(default_factory=RecordTally)
    reasoning_field: str | None = None
    max_skipped: str = "0"
    over_limit: str = ""  # which limit was crossed and how to raise it; nothing was written
    encoded: int = 0  # rows encoded, published or not
    train_on: str = "all"
    assistant_tokens: int = 0  # what train_on="all" would train in the same records
    control_spellings: int = 0  # records whose content spells a control token
    allow_control_tokens_in_content: bool = False  # such spellings kept as control tokens
    pack: int | None = None  # --pack SEQ_LEN
    cut_by: str = "--max-length"  # the option whose length rows were cut to: --pack when it is the shorter
    packing: PackStats = field(default_factory=PackStats)
    segments: SegmentStats = field(default_factory=SegmentStats)  # the segment cache's lookups and hits
    segments_off: str = ""  # why the renderings were encoded whole instead of by segments
    encoder_off: str = ""  # why the tokenizer's own encoder ran instead of tiktoken
    shapes: ShapeStats = field(default_factory=ShapeStats)  # records filled in from a shape, or rendered directly
    shapes_off: str = ""  # why every record was rendered directly
    exact: bool = False  # no fast path: each record rendered by transformers' template and encoded whole
    per_turn: bool = False  # one example per assistant turn
    turns_left_out: int = 0  # assistant turns without a span in records that still train
    tokens_left_out: int = 0  # the tokens of their text
    left_out: list[tuple[int, int, str]] = field(default_factory=list)  # (record, message, why), the first ones
    check_every: int = CHECK_EVERY  # one record (text) in this many through the fast paths also the plain way

    @property
    def ok(self) -> bool:
        return bool(self.written) and not self.over_limit

    def note(self, kind: str, where: int, why: str) -> None:
        self.tally.skip(kind, where, why)
        listed = (
            self.skipped if kind in (UNTRAINED, LEFT_OUT) else self.unrendered if kind == "render" else self.bad_lines
        )
        if len(listed) < MAX_LISTED:
            listed.append((where, why))

    def to_dict(self) -> dict[str, Any]:
        counts = self.tally.skipped
        return {
            "path": self.path,
            "output": self.output,
            "records": self.records,
            "written": self.written,
            "tokens": self.tokens,
            "trained_tokens": self.trained_tokens,
            "truncated": self.truncated,
            "truncated_by": self.cut_by,
            "train_on": self.train_on,
            "assistant_tokens": self.assistant_tokens,
            "control_spellings": self.control_spellings,
            "allow_control_tokens_in_content": self.allow_control_tokens_in_content,
            "pack": self.pack,
            "packed": vars(self.packing) if self.pack else None,
            "unit": self.unit,
            "bad_line_count": counts["read"] + counts["normalize"],
            "unrendered_count": counts["render"],
            "skipped_count": counts[UNTRAINED],
            "every_turn_left_out_count": counts[LEFT_OUT],
            "per_turn": self.per_turn,
            "turns_left_out": self.turns_left_out,
            "tokens_left_out": self.tokens_left_out,
            "left_out": [{self.unit: n, "message": i, "reason": r} for n, i, r in self.left_out],
            "bad_lines": [{self.unit: n, "reason": r} for n, r in self.bad_lines],
            "unrendered": [{self.unit: n, "reason": r} for n, r in self.unrendered],
            "skipped": [{self.unit: n, "reason": r} for n, r in self.skipped],
            "skips": self.tally.to_dict(self.reasoning_field),
            "max_skipped": self.max_skipped,
            "over_limit": self.over_limit,
            "spans_from": self.spans_from,
            "tokens_from": self.tokens_from,
            "stop_tokens": list(self.stop_tokens),
            "token_notes": list(self.token_notes),
            "segment_cache": self.segments.to_dict(self.segments_off),
            "encoder": {"tiktoken": not self.encoder_off, "off_reason": self.encoder_off or None},
            "shapes": self.shapes.to_dict(self.shapes_off),
            "exact": self.exact,
            "check_every": self.check_every,
        }

    def _destination(self) -> str:
        if self.over_limit:
            return "nothing: too many records left out, so no output written"
        return self.output or "nothing: no record has anything to train, so no output written"

    def _training_lines(self) -> list[str]:
        lines = []
        if self.train_on != "all":
            lines.append(
                f"  trains {self.trained_tokens:,} tokens (--train-on {self.train_on}); "
                f"--train-on all would train {self.assistant_tokens:,}"
            )
        if self.per_turn:
            lines.append(f"  --per-turn: {self.encoded:,} examples, one per assistant turn trained")
        if self.turns_left_out:
            lines.append(
                f"  left out of training: {self.turns_left_out:,} assistant turn(s) (about {self.tokens_left_out:,} "
                "tokens of text) in records that still train; the first:"
            )
            lines += [f"    {self.unit} {n}, message {i}: {r or 'no span'}" for n, i, r in self.left_out[:3]]
        if self.control_spellings:
            how = "kept as control tokens (allowed)" if self.allow_control_tokens_in_content else "encoded as text"
            lines.append(f"  {self.control_spellings} record(s) spell a control token in their content: {how}")
        if self.pack:
            p = self.packing
            lines.append(
                f"  packed {p.examples:,} examples into {p.sequences:,} sequences of at most {self.pack} tokens "
                f"({p.fill:.1%} full); {p.truncated} cut to {self.pack}, {p.dropped} with nothing to train left out"
            )
        return lines

    def _fast_lines(self) -> list[str]:
        if self.exact:
            return ["  fast paths: off (--exact: each record rendered by transformers' template, encoded whole)"]
        lines = [
            f"  rendering by shape: {self.shapes.describe(self.shapes_off)}",
            f"  segment cache: {self.segments.describe(self.segments_off)}",
            f"  encoder: {describe_encoder(self.encoder_off)}",
        ]
        if not (self.segments_off and self.encoder_off):
            lines.append(
                f"  checked against the plain path (the first records, each new shape, 1 in {self.check_every}): "
                f"{self.shapes.checked:,} renderings, {self.segments.checked:,} encodings, all equal"
            )
        return lines

    def describe(self) -> str:
        lines = [
            (
                f"prepared {self.written} examples (--per-turn) from the {self.records} records of {self.path}"
                if self.per_turn
                else f"prepared {self.written} of {self.records} records from {self.path}"
            )
            + f" into {self._destination()}",
            f"  spans from: {self.spans_from}",
            f"  stop tokens: {' '.join(self.stop_tokens)} ({self.tokens_from})",
            *(f"  note: {n}" for n in self.token_notes),
            f"  {self.tokens:,} tokens, {self.trained_tokens:,} trained "
            f"({self.trained_tokens / max(self.tokens, 1):.1%}); {self.truncated} truncated to {self.cut_by}",
            *self._training_lines(),
            *self._fast_lines(),
            *(f"  normalized: {line}" for line in self.tally.step_lines(self.reasoning_field)),
        ]
        counts = self.tally.skipped
        total = sum(counts.values())
        if total:
            lines.append(
                f"  skipped {total} {self.unit}(s): {counts['read']} not readable, {counts['normalize']} not a "
                f"conversation, {counts['render']} do not render, {counts[LEFT_OUT]} with every assistant turn left "
                f"out (these count toward --max-skipped {self.max_skipped}), {counts[UNTRAINED]} with no assistant "
                "turn to train"
            )
            problems = sorted(self.bad_lines + self.unrendered + self.skipped)
            lines += [f"    {self.unit} {n}: {reason}" for n, reason in problems[:10]]
            if total > 10:
                lines.append(f"    … and {total - 10} more (--json lists up to {MAX_LISTED} of each kind)")
        if self.over_limit:
            lines.append(f"  refused: {self.over_limit}")
        return "\n".join(lines)
