"""Segment encoding: a rendering encoded as the text between its control tokens, repeated segments from a cache.

A tokenizers `Tokenizer` splits its input at added tokens before it normalizes or pre-tokenizes anything, so for
most tokenizers a rendering's ids are the ids of each piece of text between two atomic added tokens, encoded alone,
one after the other (with `add_special_tokens=False`, as the renderings are encoded: the post-processor adds
nothing). Training data repeats many of those pieces (the system prompt and tool block of agent data on every
record, the role names on every turn): a piece seen more than once is encoded once per process and kept in a cache
bounded in bytes (least recently used out first); the other pieces go to one `encode_batch`.

It is proven before it is used, and whole-string encoding is used where it does not hold, with the reason
(`SegmentEncoder.off`), said in `prepare`'s report:
- from the tokenizer's components: Metaspace with `prepend_scheme` "first" (SentencePiece's `▁` goes before the
  first piece of the text only, and a piece encoded alone is a first piece), special tokens encoded as text, no
  atomic added token to split at;
- on the data, through the whole run: the first `SAMPLE_RECORDS` renderings of a run and one in `check_every`
  after them are encoded both ways (and tiktoken's encodings, where it runs, against the tokenizer's own) and their
  ids and offsets compared; the first difference (the text, token position, the two tokens) turns tiktoken off,
  then segments, for the rest of the run, and the batch is encoded again. The texts checked are counted.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import os
import re
import sys
from collections import Counter, OrderedDict
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .. import _compat
from . import bpe_engine

SAMPLE_RECORDS = 16
CHECK_EVERY = 256
CACHE_BYTES = 64 * 2**20
# What a cached tokenizers `Encoding` holds per token (ids, type ids, token string, word, offsets, masks), estimated
# high so the cache stays within its bound.
ENCODING_BYTES_PER_TOKEN = 128
_SEEN_LIMIT = 200_000  # hashes of pieces seen once, kept to admit a piece on its second sight in a later batch


@dataclass
class SegmentStats:
    """Pieces of text looked up in the cache (control tokens not counted), hits, and their tokens."""

    lookups: int = 0
    hits: int = 0
    tokens: int = 0
    cached_tokens: int = 0
    checked: int = 0  # texts also encoded whole by the tokenizer and compared

    def __add__(self, other: SegmentStats) -> SegmentStats:
        return SegmentStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def describe(self, off: str) -> str:
        """The report's line: on with the hit rate, or off with the reason."""
        if off:
            return f"off: {off} (whole-string encoding used)"
        if not self.lookups:
            return "on (no segment encoded)"
        return (
            f"on (hit rate {self.hits / self.lookups:.0%}, "
            f"{self.cached_tokens / max(self.tokens, 1):.0%} of tokens from the cache)"
        )

    def to_dict(self, off: str) -> dict[str, Any]:
        return {
            "on": not off,
            "off_reason": off or None,
            "hit_rate": self.hits / self.lookups if self.lookups and not off else None,
            "cached_token_share": self.cached_tokens / self.tokens if self.tokens and not off else None,
            **vars(self),
        }


def _components(component: Any) -> list[dict[str, Any]]:
    """A normalizer's or pre-tokenizer's parts, flattened out of Sequences."""
    if component is None:
        return []
    stack, parts = [_compat.component_state(component)], []
    while stack:
        part = stack.pop()
        inner = part.get("pretokenizers") or part.get("normalizers") if isinstance(part, dict) else None
        if inner:
            stack.extend(inner)
        elif isinstance(part, dict):
            parts.append(part)
    return parts


def static_reason(backend: Any) -> str:
    """Why this tokenizer cannot be encoded by segments, read from its components, or "" when it may be (the
    sample of a run decides)."""
    if getattr(backend, "encode_special_tokens", False):
        return "the tokenizer encodes special tokens as text, so they do not split the text"
    for part in _components(backend.pre_tokenizer):
        if part.get("type") == "Metaspace" and part.get("prepend_scheme", "always") == "first":
            return (
                "the pre-tokenizer (Metaspace, prepend_scheme first) writes '▁' before the start of the text only, "
                "so text after a control token encodes differently alone"
            )
    if not any(not t.normalized for t in backend.get_added_tokens_decoder().values()):
        return "the tokenizer has no atomic added token to split the text at"
    return ""


class Splitter:
    """Splits a text where the tokenizer does: at its added tokens that are matched before normalization
    (leftmost, longest first, as its Aho-Corasick matcher); those with lstrip, rstrip or single_word stay inside
    the text around them, whose encoding handles them."""

    def __init__(self, backend: Any) -> None:
        added = [t for t in backend.get_added_tokens_decoder().values() if not t.normalized]
        contents = sorted({t.content for t in added}, key=len, reverse=True)
        self.pattern = re.compile("(" + "|".join(map(re.escape, contents)) + ")")
        self.atomic = {
            t.content: backend.token_to_id(t.content) for t in added if not (t.lstrip or t.rstrip or t.single_word)
        }

    def split(self, text: str) -> list[str]:
        """Alternating pieces of text and atomic tokens: [text, token, text, ..., text] (texts may be empty)."""
        parts = self.pattern.split(text)
        if all(parts[k] in self.atomic for k in range(1, len(parts), 2)):
            return parts
        merged = [parts[0]]
        for k in range(1, len(parts), 2):
            if parts[k] in self.atomic:
                merged += [parts[k], parts[k + 1]]
            else:
                merged[-1] += parts[k] + parts[k + 1]
        return merged


class SegmentCache:
    """Encodings of pieces of text, bounded in bytes, the least recently used out first."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, tuple[Any, Any, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, text: str) -> tuple[Any, Any, int] | None:
        entry = self._entries.get(text)
        if entry is not None:
            self._entries.move_to_end(text)
        return entry

    def put(self, text: str, encoding: Any, ids: Any) -> None:
        size = sys.getsizeof(text) + ids.nbytes + len(ids) * ENCODING_BYTES_PER_TOKEN
        if size > self.max_bytes or text in self._entries:
            return
        self._entries[text] = (encoding, ids, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self.bytes -= dropped


class SegmentEncoding:
    """A rendering encoded by segments, with what the features read of a tokenizers `Encoding`: `ids` (an int32
    array), `len`, `char_to_token` and `offsets` (made on demand)."""

    __slots__ = ("_pieces", "_starts", "ids")

    def __init__(self, ids: Any, pieces: list[tuple[int, int, int, Any]]) -> None:
        self.ids = ids
        self._pieces = pieces  # (first char, end char, first token, Encoding or None for an atomic token)
        self._starts = [p[0] for p in pieces]

    def __len__(self) -> int:
        return len(self.ids)

    def char_to_token(self, char: int) -> int | None:
        k = bisect.bisect_right(self._starts, char) - 1
        if k < 0 or char >= self._pieces[k][1]:
            return None
        start, _, first, encoding = self._pieces[k]
        if encoding is None:
            return first
        local = encoding.char_to_token(char - start)
        return None if local is None else first + local

    @property
    def offsets(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for start, end, _, encoding in self._pieces:
            out += [(start, end)] if encoding is None else [(start + a, start + b) for a, b in encoding.offsets]
        return out


def first_difference(whole: Any, pieces: Any) -> int | None:
    """The first token position where two encodings differ in id or offsets, or None."""
    ids_a, ids_b = list(whole.ids), [int(i) for i in pieces.ids]
    offsets_a, offsets_b = list(whole.offsets), list(pieces.offsets)
    for t, (a, b) in enumerate(zip(zip(ids_a, offsets_a), zip(ids_b, offsets_b))):
        if a != b:
            return t
    return None if len(ids_a) == len(ids_b) else min(len(ids_a), len(ids_b))


# Segments pay when repeated text (a system prompt, tool schemas) is a good part of the tokens: judged on the first
# JUDGE_TOKENS tokens of a process, a few texts at a time so that data with few repeats is soon encoded whole.
JUDGE_TOKENS = 200_000
JUDGE_CHUNK = 128  # texts encoded by segments at a time while the cache is judged
MIN_CACHED_SHARE = 0.25


class SegmentEncoder:
    """`encode_batch(texts)` by segments with a cache, proven on the first `sample` texts against whole-string
    encoding; `off` says why whole-string encoding is used instead ("" while segments are on). `reason` replaces
    what the tokenizer's components say (`static_reason`): "" leaves the decision to the sample alone. `source` is
    the file the backend was loaded from, if any, and `vocab` its model's vocabulary if parsed (`bpe_engine.load`)."""

    def __init__(
        self,
        backend: Any,
        *,
        max_bytes: int = CACHE_BYTES,
        sample: int = SAMPLE_RECORDS,
        reason: str | None = None,
        fast: bool | None = None,
        source: Path | None = None,
        vocab: dict[str, int] | None = None,
        check_every: int = CHECK_EVERY,
    ) -> None:
        self.backend = backend
        self.off = static_reason(backend) if reason is None else reason
        # tiktoken where it gives the tokenizer's ids (`bpe_engine`); `engine_off` says why not
        if fast is None:
            fast = os.environ.get(bpe_engine.SWITCH, "1") != "0"
        self.engine, self.engine_off = (
            bpe_engine.load(backend, source, vocab) if fast else (None, f"turned off ({bpe_engine.SWITCH}=0)")
        )
        self.splitter = None if self.off else Splitter(backend)
        self._atomic = _atomic_ids(self.splitter)
        self.cache = SegmentCache(max_bytes)
        self.to_prove = sample
        self.check_every = max(1, check_every)
        self.texts = 0  # texts encoded so far: the one in `check_every` checked is counted on it
        self._seen: set[int] = set()
        self._judged_on = SegmentStats()  # the tokens seen until the cache has shown whether it pays

    def encode_batch(self, texts: list[str]) -> tuple[list[Any], SegmentStats]:
        """The encodings of `texts` (without special tokens added) and the cache's stats for them."""
        if not texts:
            return [], SegmentStats()
        judged, off = self._judged_on, self.off  # as they were, should this batch be encoded again
        encodings, stats = (self._whole(texts), SegmentStats()) if self.off else self._judged(texts)
        if self.off and self.engine is None:  # the tokenizer's own whole-string encoding: the reference itself
            self.texts += len(texts)
            return encodings, stats
        first = self.texts
        picked = [k for k in range(len(texts)) if k < self.to_prove or (first + k + 1) % self.check_every == 0]
        whole = self._whole([texts[k] for k in picked], own=True)
        difference = _sample_difference(self.backend, whole, [encodings[k] for k in picked], picked)
        if difference and self.engine is not None:
            # tiktoken is the first suspect: the batch again with the tokenizer's own encoder, proven anew
            self.engine, self.engine_off = None, f"{difference} (tiktoken)"
            self.cache, self._seen = SegmentCache(self.cache.max_bytes), set()
            self._judged_on, self.off = judged, off
            return self.encode_batch(texts)
        self.to_prove = max(0, self.to_prove - len(texts))
        self.texts += len(texts)
        if difference:
            self.off, self.to_prove = difference, 0
            return self._whole(texts), SegmentStats(checked=len(picked))
        stats.checked += len(picked)
        return encodings, stats

    def _judged(self, texts: list[str]) -> tuple[list[Any], SegmentStats]:
        """`texts` by segments. Until the cache is judged, JUDGE_CHUNK texts at a time; once it is judged not to
        pay, the rest whole."""
        if self._judged_on.tokens >= JUDGE_TOKENS:
            return self._by_segments(texts)
        encodings: list[Any] = []
        stats, done = SegmentStats(), 0
        while done < len(texts) and not self.off and self._judged_on.tokens < JUDGE_TOKENS:
            part, part_stats = self._by_segments(texts[done : done + JUDGE_CHUNK])
            self._judge(part_stats)
            encodings, stats, done = encodings + part, stats + part_stats, done + len(part)
        if done < len(texts):
            rest, rest_stats = (
                (self._whole(texts[done:]), SegmentStats()) if self.off else self._by_segments(texts[done:])
            )
            encodings, stats = encodings + rest, stats + rest_stats
        return encodings, stats

    def _whole(self, texts: list[str], own: bool = False) -> list[Any]:
        """Whole strings encoded by tiktoken when it stands for the tokenizer (unless `own`), else the tokenizer."""
        if self.engine is not None and not own:
            return self.engine.encode_batch(texts, specials=True)
        return self.backend.encode_batch(texts, add_special_tokens=False)

    def _pieces(self, pieces: list[str]) -> list[tuple[Any, Any]]:
        """(encoding, int32 ids) of pieces holding no control token."""
        import numpy as np

        if self.engine is not None:
            return [(e, e.ids) for e in self.engine.encode_batch(pieces, specials=False)]
        return [(e, np.array(e.ids, np.int32)) for e in self.backend.encode_batch(pieces, add_special_tokens=False)]

    def _judge(self, stats: SegmentStats) -> None:
        """Segments cost more than whole strings unless many tokens come from the cache: once JUDGE_TOKENS tokens
        were seen with fewer than MIN_CACHED_SHARE of them cached, the next batches are encoded whole."""
        if self._judged_on.tokens >= JUDGE_TOKENS:
            return
        self._judged_on = self._judged_on + stats
        seen, cached = self._judged_on.tokens, self._judged_on.cached_tokens
        if seen >= JUDGE_TOKENS and cached < MIN_CACHED_SHARE * seen:
            self.off = (
                f"few repeated segments ({cached / seen:.0%} of the first {seen:,} tokens came from the cache), so "
                "whole strings are faster"
            )

    def _by_segments(self, texts: list[str]) -> tuple[list[SegmentEncoding], SegmentStats]:
        """Each distinct piece looked up once; the missing ones encoded in one batch, and kept when they repeat.
        A piece counts as a hit at every occurrence but the one that was encoded."""
        import numpy as np

        assert self.splitter is not None
        splits = [self.splitter.split(text) for text in texts]
        counts = Counter(piece for parts in splits for piece in parts[::2] if piece)
        known = {piece: self.cache.get(piece) for piece in counts}
        missing = [piece for piece, entry in known.items() if entry is None]
        stats = SegmentStats(lookups=sum(counts.values()), hits=sum(counts.values()) - len(missing))
        for piece, (encoding, ids) in zip(missing, self._pieces(missing)):
            known[piece] = (encoding, ids, 0)
            stats.cached_tokens -= len(ids)
            key = hash(piece)
            if counts[piece] > 1 or key in self._seen:
                self.cache.put(piece, encoding, ids)
            elif len(self._seen) < _SEEN_LIMIT:
                self._seen.add(key)
            else:
                self._seen = {key}
        atomic = self._atomic
        out = []
        for parts in splits:
            arrays, pieces, char, token = [], [], 0, 0
            for k, piece in enumerate(parts):
                if not piece:
                    continue
                if k % 2:
                    encoding, ids = None, atomic[piece]
                else:
                    encoding, ids, _ = known[piece]  # type: ignore[misc]
                    stats.tokens += len(ids)
                arrays.append(ids)
                pieces.append((char, char + len(piece), token, encoding))
                char, token = char + len(piece), token + len(ids)
            out.append(SegmentEncoding(np.concatenate(arrays) if arrays else np.zeros(0, np.int32), pieces))
        stats.cached_tokens += stats.tokens
        return out, stats


@functools.cache
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):  # not glibc
        return None


def return_freed_memory() -> None:
    """Hand the memory a batch's encodings held back to the system (glibc's `malloc_trim`; nothing elsewhere):
    the tokenizer's threads free it into per-thread arenas that otherwise keep it, and a run's resident memory
    grows by a batch's worth of encodings."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _atomic_ids(splitter: Splitter | None) -> dict[str, Any]:
    import numpy as np

    return {token: np.array([i], np.int32) for token, i in splitter.atomic.items()} if splitter else {}


def _token_at(backend: Any, encoding: Any, t: int) -> str:
    if t >= len(encoding.ids):
        return "the end"
    return f"{backend.id_to_token(int(encoding.ids[t]))!r} at characters {encoding.offsets[t]}"


def _sample_difference(backend: Any, whole: list[Any], encodings: list[Any], at: list[int]) -> str:
    """Why the fast encoding is off after a check: the first checked text where it differs, or ""."""
    for k, a, b in zip(at, whole, encodings):
        t = first_difference(a, b)
        if t is not None:
            return (
                f"the fast encoding differs from the tokenizer's whole-string encoding (text {k + 1} of a batch, "
                f"token {t}: {_token_at(backend, a, t)} whole, {_token_at(backend, b, t)} fast)"
            )
    return ""
