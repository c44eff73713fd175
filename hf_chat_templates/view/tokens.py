"""The conversation as the model sees it, as data: each token with its characters, whether it is a control token,
whether the assistant mask trains it and which message it belongs to; and two token sequences aligned.

`token_view` builds a view of a rendering, `ids_view` of bare ids, `context_view` of a verification probe;
`diff_views` aligns two views. `terminal` and `page` draw them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..template.spans import Span
from ..verification.context import VerifyContext


@dataclass(frozen=True)
class Tok:
    index: int
    id: int
    text: str  # the characters this token covers ("" for a continuation of a split character)
    start: int
    end: int
    control: bool
    trained: bool
    message: int | None


@dataclass
class TokenView:
    title: str
    tokens: list[Tok]
    text: str = ""
    untrained: tuple[tuple[int, str], ...] = ()
    notes: list[str] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    def token_at_char(self, pos: int) -> int | None:
        for t in self.tokens:
            if t.start <= pos < t.end:
                return t.index
        return None


def _control_ids(tokenizer: Any, control_tokens: Iterable[str]) -> set[int]:
    ids = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    for token in control_tokens:
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) == 1:
            ids.add(encoded[0])
    return ids


def token_view(
    tokenizer: Any,
    text: str,
    *,
    title: str = "",
    spans: Sequence[Span] = (),
    control_tokens: Iterable[str] = (),
    boundaries: Sequence[int] | None = None,
    untrained: tuple[tuple[int, str], ...] = (),
) -> TokenView:
    """A rendering's tokens, each with its characters, whether it is a control token, whether the mask trains it
    (it overlaps an assistant span), and the message it belongs to (from the message boundaries)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    controls = _control_ids(tokenizer, control_tokens)
    tokens, seen = [], 0
    for i, (token_id, (start, end)) in enumerate(zip(enc["input_ids"], enc["offset_mapping"])):
        piece = text[max(start, seen) : end]
        seen = max(seen, end)
        trained = any(end > s.start and start < s.end for s in spans)
        message = None
        if boundaries is not None:
            message = next((k for k, b in enumerate(boundaries) if start < b), len(boundaries) - 1)
        tokens.append(Tok(i, int(token_id), piece, start, end, token_id in controls, trained, message))
    return TokenView(title, tokens, text, untrained)


def ids_view(tokenizer: Any, ids: Sequence[int], *, title: str, control_tokens: Iterable[str] = ()) -> TokenView:
    """A view of bare ids (an official renderer's output): each token's text is its own decoding."""
    controls = _control_ids(tokenizer, control_tokens)
    tokens, pos = [], 0
    for i, token_id in enumerate(ids):
        piece = tokenizer.decode([token_id])
        tokens.append(Tok(i, int(token_id), piece, pos, pos + len(piece), token_id in controls, False, None))
        pos += len(piece)
    return TokenView(title, tokens, "".join(t.text for t in tokens))


def context_view(ctx: VerifyContext, probe_id: str) -> TokenView:
    """The view of one probe of a verification: its rendering, message boundaries and assistant spans."""
    probe = ctx.probe(probe_id)
    rendered = ctx.rendered[probe_id]
    text = rendered.text or ""
    spans: tuple[Span, ...] = ()
    untrained: tuple[tuple[int, str], ...] = ()
    notes = []
    if ctx.stop_tokens and not probe.continue_final_message and rendered.ok:
        try:
            found = ctx.spans(probe)
            spans, untrained = found.spans, found.untrained
        except Exception as err:  # a prefix that does not render: the view shows no mask, and says why
            notes.append(f"no assistant mask: {err}")
    view = token_view(
        ctx.tokenizer,
        text,
        title=f"probe {probe_id}",
        spans=spans,
        control_tokens=ctx.control_tokens,
        boundaries=ctx.message_boundaries(probe),
        untrained=untrained,
    )
    view.notes += notes
    return view


# ---- alignment --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Aligned:
    """Two token sequences in aligned rows: ('equal'|'replace'|'delete'|'insert', left tokens, right tokens)."""

    left: TokenView
    right: TokenView
    rows: tuple[tuple[str, tuple[Tok, ...], tuple[Tok, ...]], ...]

    @property
    def first_difference(self) -> int | None:
        """The first position where the two token sequences differ (None when they are equal); the same index on
        both sides, as the checks count it."""
        a, b = self.left.ids, self.right.ids
        if a == b:
            return None
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def diff_views(left: TokenView, right: TokenView) -> Aligned:
    matcher = difflib.SequenceMatcher(a=left.ids, b=right.ids, autojunk=False)
    rows = tuple(
        (tag, tuple(left.tokens[i1:i2]), tuple(right.tokens[j1:j2])) for tag, i1, i2, j1, j2 in matcher.get_opcodes()
    )
    return Aligned(left, right, rows)
