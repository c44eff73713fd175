"""Assistant-only training spans for any template, found by rendering differences.

For each assistant message `i` of a conversation rendered as `full`:

- the *prompt* is the rendering of `messages[:i]` with the generation prompt. It must be a prefix of `full`;
  the generated part starts where it ends, so nothing the prompt already holds (the role header) is trained.
- the *turn* is the rendering of `messages[:i + 1]`. Where `full` starts with it, the generated part ends where
  it ends. Where it does not because the turn closes differently when it is not the last one (Harmony writes
  `<|return|>` on the last answer and `<|end|>` on earlier ones), the part ends at the control token `full` has
  in place of the stop token. Otherwise, where `full` starts with the turn cut after one of its stop tokens (after
  the prompt; the last such), the part ends there: what follows the stop is not the turn's own text (Command R7B
  ends every rendering with the next turn's header, even with no generation prompt).
- the part is then cut after its last closing token (the stop token, or the one that stands in for it), so text
  a template writes after the stop token (Gemma's newline after `<end_of_turn>`) is not trained: generation stops
  at the stop token.

A turn whose prompt is not a prefix of the conversation, or whose own text through its stop token changes once
later turns follow (a template that renders earlier turns differently once more follow), has no span: it is
reported, never guessed. `training_variant` writes the same procedure in Jinja.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

RenderFn = Callable[[list[dict[str, Any]], bool], str]
PROMPT_NOT_PREFIX = "the generation prompt before it is not a prefix of the conversation"


@dataclass(frozen=True)
class Span:
    """The generated part of assistant message `message`: characters [start, end) of the rendering, ending with
    the token `closing` (None when the part holds no closing token: the mask check fails it)."""

    message: int
    start: int
    end: int
    closing: str | None


@dataclass(frozen=True)
class TurnSpans:
    text: str
    spans: tuple[Span, ...]
    untrained: tuple[tuple[int, str], ...]  # (message index, why it has no span)


def assistant_spans(
    render: RenderFn,
    messages: Sequence[dict[str, Any]],
    stop_tokens: Sequence[str],
    control_tokens: Sequence[str],
    *,
    add_generation_prompt: bool = False,
    full: str | None = None,
) -> TurnSpans:
    """The generated part of every assistant message, by rendering differences (see the module docstring).
    `render(messages, add_generation_prompt)` renders with the template; errors it raises propagate."""
    messages = list(messages)
    if full is None:
        full = render(messages, add_generation_prompt)
    spans: list[Span] = []
    untrained: list[tuple[int, str]] = []
    pos = 0
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        prompt = render(messages[:i], True)
        if not full.startswith(prompt) or len(prompt) < pos:
            untrained.append((i, PROMPT_NOT_PREFIX))
            continue
        start = len(prompt)
        turn = full if i == last and not add_generation_prompt else render(messages[: i + 1], False)
        closers: Sequence[str] = stop_tokens
        end = -1
        if full.startswith(turn):
            end = len(turn)
        else:
            for stop in stop_tokens:
                cut = len(turn) - len(stop)
                if end < 0 and turn.endswith(stop) and full.startswith(turn[:cut]):
                    swap = next((c for c in control_tokens if full.startswith(c, cut)), None)
                    if swap is not None:
                        end, closers = cut + len(swap), (swap,)
            if end < 0:
                end = _through_stop(full, turn, start, stop_tokens)
        if end <= start:
            untrained.append((i, "its text through its stop token renders differently when it is not the last message"))
            continue
        part = full[start:end]
        cuts = [(part.rfind(c) + len(c), c) for c in closers if c in part]
        closing = None
        if cuts:
            cut, closing = max(cuts)
            end = start + cut
        spans.append(Span(i, start, end, closing))
        pos = end
    return TurnSpans(full, tuple(spans), tuple(untrained))


def _through_stop(full: str, turn: str, start: int, stop_tokens: Sequence[str]) -> int:
    """The end of the last stop token of `turn` after `start` through which `full` renders the same text, or -1:
    what a template writes after the stop (Command R7B's next header, written even with no generation prompt) is
    not the turn's own text. Each stop's occurrences are tried from the last one back."""
    end = -1
    for stop in filter(None, stop_tokens):
        at = turn.rfind(stop, start)
        while at >= 0 and at + len(stop) > end:
            if full.startswith(turn[: at + len(stop)]):
                end = at + len(stop)
                break
            at = turn.rfind(stop, start, at + len(stop) - 1)
    return end


def token_mask(offsets: Sequence[tuple[int, int]], spans: Sequence[Span]) -> list[int]:
    """1 for every token that overlaps a span, as transformers builds `assistant_masks` from generation spans."""
    mask = [0] * len(offsets)
    k = 0
    for t, (start, end) in enumerate(offsets):
        while k < len(spans) and start >= spans[k].end:
            k += 1
        if k == len(spans):
            break
        if end > spans[k].start:
            mask[t] = 1
    return mask
