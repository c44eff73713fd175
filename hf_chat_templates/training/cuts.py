"""Assistant spans (character ranges of a rendering) as token ranges of its encoding, with transformers' rule:
every token that overlaps a span is trained. A span's tokens are found at its first character, its last and the
one after it (`char_to_token`, or for a batch of tiktoken's encodings one search over the batch), so the mask
costs three lookups per assistant turn, not a pass over the tokens; the offsets are read only where a lookup finds
no token. A character of several tokens (a byte-level BPE's "Ⅻ", two) maps to its first: the span's last token is
the one before the token of the character after it, unless that one holds the last character's first byte too."""

from __future__ import annotations

from typing import Any

from ..template.spans import Span
from .bpe_engine import tokens_at_batch


def _span_tokens(offsets: list[tuple[int, int]], span: Span) -> tuple[int, int]:
    covered = [t for t, (a, b) in enumerate(offsets) if b > span.start and a < span.end]
    return (covered[0], covered[-1]) if covered else (0, -1)


def _chars(spans: tuple[Span, ...]) -> list[int]:
    """The characters looked up for each span: its first, its last and the one after it."""
    return [c for s in spans for c in (s.start, s.end - 1, s.end)]


def _last_token(enc: Any, span: Span, last: int, after: int | None) -> int | None:
    """The last token that overlaps the span's last character, from `last`, the token of its first byte, and
    `after`, the token of the next character's (None past the text or where no token holds it); None where only
    the offsets can say."""
    to_chars = getattr(enc, "token_to_chars", None)  # a tokenizers Encoding: each token's characters, one call
    if to_chars is not None:
        while last + 1 < len(enc) and (chars := to_chars(last + 1)) and chars[0] < span.end and chars[1] > span.start:
            last += 1
        return last
    if after is None:
        text = getattr(enc, "text", None)  # a tiktoken encoding: every character has a token
        return len(enc) - 1 if last == len(enc) - 1 or (text is not None and span.end == len(text)) else None
    # The tokens between hold the last character's later bytes. A token that held both its later bytes and the next
    # character's first byte would overlap the span too, but none does where the span ends before a control token
    # or at the text's end, as it does after a stop token and before the next turn's role token.
    return max(last, after - 1)


def _cuts(enc: Any, spans: tuple[Span, ...], size: int, ends: list[int | None] | None = None) -> list[tuple[int, int]]:
    """The token ranges [first, end) of the spans, within the first `size` tokens (empty where cut off); `ends`:
    the tokens at each span's `_chars` when already found (`span_cuts`)."""
    cuts = []
    if ends is None:
        chars = _chars(spans)
        many = getattr(enc, "tokens_at", None)  # one search for all of them (`bpe_engine.ByteEncoding`)
        if many is not None:
            ends = many(chars)
        else:  # an Encoding finds the last token with `token_to_chars`: the character after the span is not asked
            walks = hasattr(enc, "token_to_chars")
            ends = [None if walks and k % 3 == 2 else enc.char_to_token(c) for k, c in enumerate(chars)]
    for span, first, at_last, after in zip(spans, ends[::3], ends[1::3], ends[2::3]):
        last = None if first is None or at_last is None else _last_token(enc, span, at_last, after)
        if first is None or last is None:
            first, last = _span_tokens(enc.offsets, span)
        cuts.append((first, min(last + 1, size)) if first < size else (0, 0))
    return cuts


def span_cuts(encodings: list[Any], spans: list[tuple[Span, ...]], sizes: list[int]) -> list[list[tuple[int, int]]]:
    """`_cuts` of each encoded record (its encoding, spans and kept size); a batch of tiktoken's encodings in one
    search (`tokens_at_batch`), others record by record."""
    found = tokens_at_batch(encodings, [_chars(these) for these in spans])
    if found is None:
        return [_cuts(enc, these, size) for enc, these, size in zip(encodings, spans, sizes)]
    return [_cuts(enc, these, size, ends) for enc, these, size, ends in zip(encodings, spans, sizes, found)]
