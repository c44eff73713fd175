"""`verify --conversations`: the per-record checks over a JSONL dataset, streamed, in batches, in workers.

Each line is `{"messages": [...], "tools": [...]}`. A line that is not JSON, or a record without a list of messages
with roles, is reported by line number and skipped; the run goes on. Per record: `renders`, `no-double-bos` (the
rendered string tokenized with the tokenizer's defaults), `decode-roundtrip` (decoded, or proven by construction
where the tokenizer cannot lose text: byte-level BPE always, SentencePiece unless the text holds "▁"),
`nothing-dropped` (every string
content and tool-call name appears in the rendering) and `injection` (content that spells a registered control
token). Rendering goes through transformers' own `render_jinja_template`, encoding through one batched call.
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .errors import TokenizerFolderError
from .limits import RenderLimitExceeded, RenderLimits, check_output, limited
from .rendering import named_template

BATCH = 4096
RECORD_CHECKS = ("renders", "no-double-bos", "decode-roundtrip", "nothing-dropped", "injection")
MAX_EXAMPLES = 5


@dataclass
class DatasetReport:
    path: str
    records: int = 0
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    failed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RECORD_CHECKS, 0))
    examples: dict[str, list[tuple[int, str]]] = field(default_factory=lambda: {c: [] for c in RECORD_CHECKS})

    @property
    def ok(self) -> bool:
        return not any(self.failed[c] for c in RECORD_CHECKS if c != "injection")

    def add(self, other: "DatasetReport") -> None:
        self.records += other.records
        self.bad_lines += other.bad_lines
        for c in RECORD_CHECKS:
            self.failed[c] += other.failed[c]
            self.examples[c] = (self.examples[c] + other.examples[c])[:MAX_EXAMPLES]

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "records": self.records,
                "bad_lines": [{"line": n, "reason": r} for n, r in self.bad_lines[:100]],
                "bad_line_count": len(self.bad_lines),
                "checks": {c: {"failed": self.failed[c], "passed": self.records - self.failed[c],
                               "examples": [{"line": n, "message": m} for n, m in self.examples[c]]}
                           for c in RECORD_CHECKS}}

    def describe(self) -> str:
        lines = [f"conversations {self.path}: {self.records} records checked, {len(self.bad_lines)} bad lines skipped"]
        for n, reason in self.bad_lines[:MAX_EXAMPLES]:
            lines.append(f"  bad line {n}: {reason}")
        for c in RECORD_CHECKS:
            status = "ok" if not self.failed[c] else ("warn" if c == "injection" else "FAIL")
            lines.append(f"  {status:<4} {c:<20} {self.records - self.failed[c]} passed, {self.failed[c]} failed")
            for n, message in self.examples[c]:
                lines.append(f"       line {n}: {message}")
        return "\n".join(lines)


def validate_record(obj: Any) -> str | None:
    """Why a parsed line is not a conversation record, or None when it is one."""
    if not isinstance(obj, dict):
        return f"expected a JSON object, found {type(obj).__name__}"
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        return "no 'messages' list (or it is empty)"
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"message {i} is not an object"
        if not isinstance(m.get("role"), str):
            return f"message {i} has no 'role'"
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            return f"message {i}: 'content' must be a string, a list of parts or null, not {type(content).__name__}"
    tools = obj.get("tools")
    if tools is not None and not isinstance(tools, list):
        return "'tools' must be a list"
    return None


def read_records(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, record, why it is bad) for each non-blank line, streamed."""
    try:
        handle = path.open("r", encoding="utf-8", errors="strict")
    except OSError as err:
        raise TokenizerFolderError(f"{path}: cannot read ({err.strerror})", hint="check the path") from None
    with handle:
        number = 0
        while True:
            try:
                line = handle.readline()
            except UnicodeDecodeError as err:
                number += 1
                yield number, None, f"not UTF-8 (byte {err.start})"
                return
            if not line:
                return
            number += 1
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                yield number, None, f"not JSON: {err.msg} at column {err.colno}"
                continue
            yield number, obj, validate_record(obj)


def _strings(record: dict[str, Any]) -> list[tuple[int, str]]:
    found = []
    for i, m in enumerate(record["messages"]):
        content = m.get("content")
        if isinstance(content, str) and content.strip():
            found.append((i, content.strip()))
        elif isinstance(content, list):
            found += [(i, p["text"].strip()) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
                      and p["text"].strip()]
        for call in m.get("tool_calls") or []:
            fn = call.get("function", call) if isinstance(call, dict) else {}
            if isinstance(fn.get("name"), str):
                found.append((i, fn["name"]))
    return found


METASPACE_DECODER = [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    {"type": "ByteFallback"},
    {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0},
]


def lossless_unless(tokenizer: Any) -> str | None:
    """When decode(encode(text)) == text holds by construction, the one character that can break it ("" when
    none can); None when nothing is proven and every record must be decoded.

    Byte-level BPE (pre-tokenizer and decoder ByteLevel) is lossless for every text. SentencePiece-style Metaspace
    with byte fallback is lossless unless the text itself contains the word marker "▁", which decodes as a space.
    Both need no normalizer, no decode clean-up, and no added token that is normalized or strips whitespace."""
    backend = tokenizer._tokenizer

    def state(component: Any) -> dict[str, Any]:  # each component serializes itself; the vocabulary is not read
        return json.loads(component.__getstate__()) if component is not None else {}

    if backend.normalizer is not None or tokenizer.clean_up_tokenization_spaces:
        return None
    if any(t.normalized or t.lstrip or t.rstrip for t in tokenizer.added_tokens_decoder.values()):
        return None
    pre, decoder = state(backend.pre_tokenizer), state(backend.decoder)
    pres = pre.get("pretokenizers", [pre]) if pre else []
    if decoder.get("type") == "ByteLevel" and any(p.get("type") == "ByteLevel" for p in pres):
        return ""
    if (pre.get("type") == "Metaspace" and pre.get("replacement") == "\u2581" and pre.get("split") is False
            and pre.get("prepend_scheme") in ("first", "always") and decoder.get("decoders") == METASPACE_DECODER):
        return "\u2581"
    return None


def byte_level_lossless(tokenizer: Any) -> bool:
    """True when decoding gives back every text, whatever it holds (byte-level BPE)."""
    return lossless_unless(tokenizer) == ""


class RecordChecker:
    """Checks batches of records against one tokenizer and template; built once per worker."""

    def __init__(self, source: str, template: str | None, kwargs: dict[str, Any]) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(source)
        self.template = template or named_template(self.tokenizer)
        self.kwargs = {**self.tokenizer.special_tokens_map, **kwargs}
        self.bos_id = self.tokenizer.bos_token_id
        # What tokenizer(text) adds with its defaults (a BOS from the post-processor), counted once, not re-encoded.
        self.added_bos = self.tokenizer("", add_special_tokens=True)["input_ids"].count(self.bos_id)
        self.breaker = lossless_unless(self.tokenizer)
        self.limits = RenderLimits.from_env()
        self.controls = [t.content for t in self.tokenizer.added_tokens_decoder.values()
                         if t.special and t.content in self.template]

    def check(self, batch: list[tuple[int, dict[str, Any]]]) -> DatasetReport:
        return self.finish(*self.render(batch))

    def render(self, batch: list[tuple[int, dict[str, Any]]]
               ) -> tuple[DatasetReport, list[tuple[int, dict[str, Any], str]]]:
        """Render a batch (Python, holds the GIL); `finish` encodes and checks it."""
        from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

        report = DatasetReport(path="")
        report.records = len(batch)

        def render_all(guard_each: bool) -> list[tuple[int, dict[str, Any], str]]:
            texts = []
            for number, record in batch:
                try:
                    with limited(self.limits) if guard_each else contextlib.nullcontext():
                        rendered, _ = render_jinja_template(
                            conversations=[_normalize_chat_messages(record["messages"])],
                            tools=record.get("tools"), chat_template=self.template, **self.kwargs)
                    texts.append((number, record, check_output(rendered[0], self.limits)))
                except RenderLimitExceeded:
                    if not guard_each:
                        raise
                    self._fail(report, "renders", number, "limit: " + str(sys.exc_info()[1]))
                except Exception as err:
                    self._fail(report, "renders", number, f"{type(err).__name__}: {err}".splitlines()[0])
            return texts

        # The whole batch runs under one set of limits (a real batch renders in milliseconds); only when it
        # trips them is the batch rendered again record by record, to name the record that did.
        try:
            with limited(self.limits):
                texts = render_all(guard_each=False)
        except RenderLimitExceeded:
            report.failed["renders"] = 0
            report.examples["renders"] = []
            texts = render_all(guard_each=True)
        return report, texts

    def finish(self, report: DatasetReport, texts: list[tuple[int, dict[str, Any], str]]) -> DatasetReport:
        """Encode a rendered batch (Rust, releases the GIL) and run the per-record checks."""
        if not texts:
            return report
        backend = self.tokenizer._tokenizer
        # One encoding per record, without offsets: the checks below need ids only.
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
        ids = [e.ids for e in encode([t for _, _, t in texts], add_special_tokens=False)]
        # Decode only what is not proven lossless by construction (see lossless_unless).
        decoded = [t for _, _, t in texts]
        unproven = [i for i, (_, _, t) in enumerate(texts)
                    if self.breaker is None or (self.breaker and self.breaker in t)]
        if unproven:
            for i, back in zip(unproven, backend.decode_batch([ids[i] for i in unproven], skip_special_tokens=False)):
                decoded[i] = (self.tokenizer.clean_up_tokenization(back)
                              if self.tokenizer.clean_up_tokenization_spaces else back)
        for (number, record, text), record_ids, back in zip(texts, ids, decoded):
            bos_count = record_ids.count(self.bos_id) + self.added_bos if self.bos_id is not None else 0
            if bos_count > 1:
                self._fail(report, "no-double-bos", number, f"tokenizer(rendered) with its defaults has {bos_count} BOS")
            if back != text:
                pos = next((i for i, (a, b) in enumerate(zip(back, text)) if a != b), min(len(back), len(text)))
                self._fail(report, "decode-roundtrip", number, f"decoded text differs at char {pos}")
            missing = [(i, s) for i, s in _strings(record) if s not in text]
            if missing:
                i, s = missing[0]
                self._fail(report, "nothing-dropped", number, f"message {i}: {s[:40]!r} is not in the rendering")
            spelled = [t for t in self.controls if any(t in s for _, s in _strings(record))]
            if spelled:
                self._fail(report, "injection", number, f"content spells control token {spelled[0]}")
        return report

    @staticmethod
    def _fail(report: DatasetReport, check: str, number: int, message: str) -> None:
        report.failed[check] += 1
        if len(report.examples[check]) < MAX_EXAMPLES:
            report.examples[check].append((number, message))


_WORKER: RecordChecker | None = None


def _init_worker(source: str, template: str | None, kwargs: dict[str, Any]) -> None:
    global _WORKER
    _WORKER = RecordChecker(source, template, kwargs)


def _check_batch(batch: list[tuple[int, dict[str, Any]]]) -> DatasetReport:
    assert _WORKER is not None
    return _WORKER.check(batch)


def record_batches(path: Path, bad_lines: list[tuple[int, str]], size: int = BATCH
                   ) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    """Valid (line number, record) pairs in batches; bad lines are noted in `bad_lines` as they stream past."""
    batch: list[tuple[int, dict[str, Any]]] = []
    for number, obj, problem in read_records(path):
        if problem:
            bad_lines.append((number, problem))
            continue
        batch.append((number, obj))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def verify_conversations(source: str | Path, conversations: str | Path, *, family: str | None = None,
                         variant: str | None = None, template: str | Path | None = None,
                         kwargs: dict[str, Any] | None = None, workers: int | None = None,
                         progress: bool = False) -> DatasetReport:
    """Run the per-record checks over a JSONL file, streaming it in batches (in `workers` processes)."""
    from .folder import resolve_source
    from .registry import get_family
    from .templates import read_template_file

    path = Path(conversations)
    if not path.is_file():
        raise TokenizerFolderError(f"{path}: no such file", hint="pass a JSONL file of {\"messages\": [...]}")
    text = None
    if family:
        var = get_family(family).variant(variant)
        text, kwargs = var.template, {**var.kwarg_defaults, **(kwargs or {})}
    elif template:
        text = read_template_file(Path(template))
    src = str(resolve_source(str(source)))
    report = DatasetReport(path=str(path))
    bar = _progress(progress)
    if workers and workers > 1:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(workers, initializer=_init_worker, initargs=(src, text, kwargs or {})) as pool:
            for part in pool.imap(_check_batch, record_batches(path, report.bad_lines)):
                report.add(part)
                bar(part.records)
    else:
        checker = RecordChecker(src, text, kwargs or {})
        for batch in record_batches(path, report.bad_lines):
            part = checker.check(batch)
            report.add(part)
            bar(part.records)
    bar(0, close=True)
    return report


def _progress(enabled: bool):  # type: ignore[no-untyped-def]
    if not enabled or not sys.stderr.isatty():
        return lambda n, close=False: None
    from tqdm import tqdm

    bar = tqdm(unit="conv", file=sys.stderr)

    def update(n: int, close: bool = False) -> None:
        bar.update(n)
        if close:
            bar.close()

    return update

