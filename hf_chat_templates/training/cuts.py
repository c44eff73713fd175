"""Assistant spans (character ranges of a rendering) as token ranges of its encoding: a span's tokens are found at
its first and last character (`char_to_token`, or for a batch of tiktoken's encodings one search over the batch),
so the mask costs two lookups per assistant turn, not a pass over the tokens; the offsets are read only where a
lookup finds no token."""

from __future__ import annotations

from typing import Any

from ..template.spans import Span
from .bpe_engine import tokens_at_batch


def _span_tokens(offsets: list[tuple[int, int]], span: Span) -> tuple[int, int]:
    covered = [t for t, (a, b) in enumerate(offsets) if b > span.start and a < span.end]
    return (covered[0], covered[-1]) if covered else (0, -1)


def _cuts(enc: Any, spans: tuple[Span, ...], size: int, ends: list[int | None] | None = None) -> list[tuple[int, int]]:
    """The token ranges [first, end) of the spans, within the first `size` tokens (empty where cut off); `ends`:
    the tokens at each span's first and last character when already found (`span_cuts`)."""
    cuts = []
    if ends is None:
        chars = [c for s in spans for c in (s.start, s.end - 1)]
        many = getattr(enc, "tokens_at", None)  # one search for all of them (`bpe_engine.ByteEncoding`)
        ends = many(chars) if many is not None else [enc.char_to_token(c) for c in chars]
    for span, first, last in zip(spans, ends[::2], ends[1::2]):
        if first is None or last is None:
            first, last = _span_tokens(enc.offsets, span)
        cuts.append((first, min(last + 1, size)) if first < size else (0, 0))
    return cuts


def span_cuts(encodings: list[Any], spans: list[tuple[Span, ...]], sizes: list[int]) -> list[list[tuple[int, int]]]:
    """`_cuts` of each encoded record (its encoding, spans and kept size); a batch of tiktoken's encodings in one
    search (`tokens_at_batch`), others record by record."""
    chars = [[c for s in these for c in (s.start, s.end - 1)] for these in spans]
    found = tokens_at_batch(encodings, chars)
    if found is None:
        return [_cuts(enc, these, size) for enc, these, size in zip(encodings, spans, sizes)]
    return [_cuts(enc, these, size, ends) for enc, these, size, ends in zip(encodings, spans, sizes, found)]
