"""Control tokens spelled in the data, encoded as text: user text holding `<|im_end|>` must not end a turn.

The same result as transformers' `apply_chat_template(..., sanitize_control_tokens=True)`, on the renderings this
package makes: the data's strings are marked (`mark_spellings`, transformers' markers), the record is rendered, the
markers are taken out again with the character ranges they held (`unmark`), and the rendering is encoded piece by
piece, each marked range as text (`encode_pieces`). Only records that spell a control token (`spells`, one regex)
take this path; the others are encoded in one batch.

Which tokens are control tokens is transformers' rule, for the template that renders the record (the `tool_use` one
for a record given tools, when the folder has one): every special token, and of the plain (non-special) added
tokens those in the tokenizer's `chat_control_tokens`, or else those a literal of that template holds. So markup
that models ship and install registers as a plain token (`<tool_call>`, `</TOOLCALL>`, `<|tool_call>`, `<think>`)
becomes text when the data spells it and the template writes it; a plain token the template does not write
(Hermes 3's `<tool_call>` in a record without tools, rendered by its default template) keeps the token's id, as in
transformers.

"As text" is transformers' `_encode_without_added_tokens`: the normalizer, pre-tokenizer and model alone, matching
no added token, special or plain (`text_backend`); a backend's `encode_special_tokens` still matches plain ones.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from typing import Any

from .. import _compat
from ..template.spans import Span

MARK_START, MARK_END = "\U000f0000", "\U000f0001"  # transformers' `mark_control_tokens` markers
Ranges = tuple[tuple[int, int], ...]


def control_spellings(tokenizer: Any, templates: Iterable[str | None]) -> re.Pattern[str]:
    """The added tokens `sanitize_control_tokens` encodes as text when the data spells them in a record rendered by
    one of `templates` (transformers' own choice, `_compat.control_tokens`), as one regex, longest first."""
    tokens = {token for t in templates if t for token in _compat.control_tokens(tokenizer, t)}
    return re.compile("|".join(map(re.escape, sorted(tokens, key=len, reverse=True))) or "(?!)")


def spells(pattern: re.Pattern[str], *values: Any) -> bool:
    """Whether a string anywhere in `values` (dict values, list items) spells one of the tokens: one search over
    the strings joined with NULs (no token holds one)."""
    strings: list[str] = []
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            strings.append(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return pattern.search("\0".join(strings)) is not None


def mark_spellings(pattern: re.Pattern[str], value: Any) -> Any:
    """transformers' `mark_control_tokens`: markers already in a string dropped, each spelled token wrapped."""
    if isinstance(value, str):
        return pattern.sub(f"{MARK_START}\\g<0>{MARK_END}", value.replace(MARK_START, "").replace(MARK_END, ""))
    if isinstance(value, dict):
        return {k: mark_spellings(pattern, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mark_spellings(pattern, v) for v in value]
    return value


def unmark(pattern: re.Pattern[str], text: str, spans: tuple[Span, ...]) -> tuple[str, tuple[Span, ...], Ranges]:
    """A rendering of marked data without its markers: the text, the spans moved to it, and the character ranges
    of the marked tokens (a lone marker, split off its token by the template, leaves an empty range)."""
    markers = re.compile(f"{MARK_START}({pattern.pattern}){MARK_END}|[{MARK_START}{MARK_END}]")
    parts: list[str] = []
    literal: list[tuple[int, int]] = []
    removed: list[int] = []
    pos = 0
    for match in markers.finditer(text):
        parts.append(text[pos : match.start()])
        start = match.start() - len(removed)
        token = match.group(1)
        if token is None:
            removed.append(match.start())
            literal.append((start, start))
        else:
            removed += [match.start(), match.end() - 1]
            parts.append(token)
            literal.append((start, start + len(token)))
        pos = match.end()
    parts.append(text[pos:])

    def moved(at: int) -> int:
        return at - bisect.bisect_left(removed, at)

    return (
        "".join(parts),
        tuple(Span(s.message, moved(s.start), moved(s.end), s.closing) for s in spans),
        tuple(literal),
    )


class PieceEncoding:
    """A rendering encoded piece by piece, with what the features read of a tokenizers `Encoding`."""

    def __init__(self, ids: list[int], offsets: list[tuple[int, int]]) -> None:
        self.ids, self.offsets = ids, offsets

    def __len__(self) -> int:
        return len(self.ids)

    def char_to_token(self, _: int) -> None:
        return None


def text_backend(backend: Any) -> Any:
    """A copy of a tokenizers backend without its added tokens: text encoded by its normalizer, pre-tokenizer and
    model alone, as transformers' `_encode_without_added_tokens` does (the offsets still the input's characters).
    Setting `encode_special_tokens` is not the same: it leaves the plain added tokens matched."""
    import json

    from tokenizers import Tokenizer

    spec = json.loads(backend.to_str())
    spec["added_tokens"] = []
    return Tokenizer.from_str(json.dumps(spec))


def encode_pieces(backend: Any, as_text_backend: Any, text: str, literal: Ranges) -> PieceEncoding:
    """transformers' `encode_marked_chat`: the text between the ranges encoded as usual, each range as text
    (`as_text_backend`, from `text_backend`), each piece after the first behind a newline that is then taken off
    (so no prefix space is added). ValueError only where transformers refuses too: a vocabulary whose model makes
    the spelled token out of plain text."""
    pieces, pos = [], 0
    for start, end in literal:
        pieces += [(pos, start, False), (start, end, True)]
        pos = end
    pieces.append((pos, len(text), False))
    newline = backend.encode("\n", add_special_tokens=False).ids
    ids: list[int] = []
    offsets: list[tuple[int, int]] = []
    for k, (start, end, as_text) in enumerate(pieces):
        if start == end:
            continue
        encoder = as_text_backend if as_text else backend
        skip, base = 0, start
        if k:
            enc = encoder.encode("\n" + text[start:end], add_special_tokens=False)
            skip, base = (len(newline), start - 1) if newline and enc.ids[: len(newline)] == newline else (0, start)
        if not skip:
            enc = encoder.encode(text[start:end], add_special_tokens=False)
        if as_text and backend.token_to_id(text[start:end]) in enc.ids[skip:]:
            raise ValueError(
                f"it spells {text[start:end]!r}, which this vocabulary makes of plain text too, so it cannot be"
                " encoded as text (apply_chat_template(..., sanitize_control_tokens=True) refuses it as well)"
            )
        ids += enc.ids[skip:]
        offsets += [(base + a, base + b) for a, b in enc.offsets[skip:]]
    return PieceEncoding(ids, offsets)
