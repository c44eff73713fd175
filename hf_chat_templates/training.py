"""Assistant-only training masks for any template, found by rendering differences.

For each assistant message `i` of a conversation rendered as `full`:

- the *prompt* is the rendering of `messages[:i]` with the generation prompt. It must be a prefix of `full`;
  the generated part starts where it ends, so nothing the prompt already holds (the role header) is trained.
- the *turn* is the rendering of `messages[:i + 1]`. Where `full` starts with it, the generated part ends where
  it ends. Where it does not because the turn closes differently when it is not the last one (Harmony writes
  `<|return|>` on the last answer and `<|end|>` on earlier ones), the part ends at the control token `full` has
  in place of the stop token.
- the part is then cut after its last closing token (the stop token, or the one that stands in for it), so text
  a template writes after the stop token (Gemma's newline after `<end_of_turn>`) is not trained: generation stops
  at the stop token.

A turn whose prompt is not a prefix of the conversation (a template that renders earlier turns differently once
more follow) has no span: it is reported, never guessed.

`assistant_spans` computes this in Python; `derive_training_template` writes the same procedure in Jinja around the
original template, so that `apply_chat_template(..., return_assistant_tokens_mask=True)` (and TRL's
`assistant_only_loss=True`) works for templates that have no `{% generation %}` markers. `export_without_markers`
gives back a template for engines that reject the `generation` tag (minijinja).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

TRAINING_TEMPLATE_NAME = "training"
_HEADER = "{#- hf-chat-templates training variant"
_MACRO_OPEN = "{%- macro hct_render(messages, add_generation_prompt) +%}"
_MACRO_CLOSE = "{%+ endmacro -%}"
GENERATION_TAG = re.compile(r"\{%-?\+?\s*(?:end)?generation\s*[-+]?%\}")

RenderFn = Callable[[list[dict[str, Any]], bool], str]


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
            untrained.append((i, "the generation prompt before it is not a prefix of the conversation"))
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
        if end <= start:
            untrained.append((i, "it renders differently when it is not the last message"))
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


def is_training_template(template: str) -> bool:
    return template.startswith(_HEADER)


def derive_training_template(template: str, stop_tokens: Sequence[str], control_tokens: Sequence[str]) -> str:
    """The template with `{% generation %}` around each assistant turn's generated part, found by rendering
    differences at render time (the procedure of `assistant_spans`). Renders the same text as `template`."""
    if is_training_template(template):
        template = export_without_markers(template)
    original = GENERATION_TAG.sub("", template)  # markers of its own would double-count
    # Jinja drops one trailing newline of a template's source; inside the macro it would be rendered.
    original = original.removesuffix("\n")
    digest = hashlib.sha256(template.encode("utf-8")).hexdigest()
    stops = json.dumps(list(stop_tokens), ensure_ascii=False)
    controls = json.dumps(list(dict.fromkeys([*stop_tokens, *control_tokens])), ensure_ascii=False)
    return (
        f"{_HEADER} (original sha256 {digest}): renders exactly as the original, with each assistant\n"
        "    turn's generated part (what the model writes after the generation prompt, through its stop token)\n"
        "    marked for return_assistant_tokens_mask. The original is the macro below, unchanged. -#}\n"
        f"{_MACRO_OPEN}{original}{_MACRO_CLOSE}\n"
        + _WRAPPER.replace("@STOPS@", stops).replace("@CONTROLS@", controls)
    )


def export_without_markers(template: str) -> str:
    """The training variant without `{% generation %}`: for a derived variant, the original template itself."""
    if is_training_template(template):
        body = template[template.index(_MACRO_OPEN) + len(_MACRO_OPEN): template.rindex(_MACRO_CLOSE)]
        digest = re.search(r"original sha256 ([0-9a-f]{64})", template)
        for candidate in (body + "\n", body):  # the newline Jinja would drop was dropped from the macro
            if digest and hashlib.sha256(candidate.encode("utf-8")).hexdigest() == digest.group(1):
                return candidate
        return body
    return GENERATION_TAG.sub("", template)


_WRAPPER = """\
{%- set hct_stops = @STOPS@ -%}
{%- set hct_controls = @CONTROLS@ -%}
{%- set hct_full = hct_render(messages, add_generation_prompt) -%}
{%- set hct = namespace(pos=0, start=-1, end=-1, cut=-1, closers=[], turn='') -%}
{%- for hct_i in range(messages | length) -%}
    {%- set hct.start = -1 -%}
    {%- set hct.end = -1 -%}
    {%- if messages[hct_i]['role'] == 'assistant' -%}
        {%- set hct_prompt = hct_render(messages[:hct_i], true) -%}
        {%- if hct_full.startswith(hct_prompt) and (hct_prompt | length) >= hct.pos -%}
            {%- set hct.start = hct_prompt | length -%}
        {%- endif -%}
    {%- endif -%}
    {%- if hct.start >= 0 -%}
        {%- if hct_i == (messages | length) - 1 and not add_generation_prompt -%}
            {%- set hct.turn = hct_full -%}
        {%- else -%}
            {%- set hct.turn = hct_render(messages[:hct_i + 1], false) -%}
        {%- endif -%}
        {%- set hct.closers = hct_stops -%}
        {%- if hct_full.startswith(hct.turn) -%}
            {%- set hct.end = hct.turn | length -%}
        {%- else -%}
            {%- for hct_stop in hct_stops -%}
                {%- set hct_cut = (hct.turn | length) - (hct_stop | length) -%}
                {%- if hct.end < 0 and hct.turn.endswith(hct_stop) and hct_full.startswith(hct.turn[:hct_cut]) -%}
                    {%- for hct_swap in hct_controls -%}
                        {%- if hct.end < 0 and hct_full[hct_cut:].startswith(hct_swap) -%}
                            {%- set hct.end = hct_cut + (hct_swap | length) -%}
                            {%- set hct.closers = [hct_swap] -%}
                        {%- endif -%}
                    {%- endfor -%}
                {%- endif -%}
            {%- endfor -%}
        {%- endif -%}
        {%- if hct.end > hct.start -%}
            {%- set hct_part = hct_full[hct.start:hct.end] -%}
            {%- set hct.cut = -1 -%}
            {%- for hct_close in hct.closers -%}
                {%- set hct_at = hct_part.rfind(hct_close) -%}
                {%- if hct_at >= 0 and hct_at + (hct_close | length) > hct.cut -%}
                    {%- set hct.cut = hct_at + (hct_close | length) -%}
                {%- endif -%}
            {%- endfor -%}
            {%- if hct.cut > 0 -%}
                {%- set hct.end = hct.start + hct.cut -%}
            {%- endif -%}
            {{- hct_full[hct.pos:hct.start] -}}
            {%- generation -%}{{- hct_full[hct.start:hct.end] -}}{%- endgeneration -%}
            {%- set hct.pos = hct.end -%}
        {%- endif -%}
    {%- endif -%}
{%- endfor -%}
{{- hct_full[hct.pos:] -}}
"""
