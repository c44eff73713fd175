"""The training variant of a template: the same text, with `{% generation %}` around each assistant turn's
generated part, so that `apply_chat_template(..., return_assistant_tokens_mask=True)` (and TRL's
`assistant_only_loss=True`) works for templates that have no markers of their own.

The original template becomes a macro; at render time the wrapper finds each generated part by rendering
differences, the procedure of `spans.assistant_spans`. `export_without_markers` gives back the original for engines
that reject the `generation` tag (minijinja).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

from .syntax import GENERATION_TAG

TRAINING_TEMPLATE_NAME = "training"
_HEADER = "{#- hf-chat-templates training variant"
_MACRO_OPEN = "{%- macro hct_render(messages, add_generation_prompt) +%}"
_MACRO_CLOSE = "{%+ endmacro -%}"


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
        f"{_MACRO_OPEN}{original}{_MACRO_CLOSE}\n" + _WRAPPER.replace("@STOPS@", stops).replace("@CONTROLS@", controls)
    )


def export_without_markers(template: str) -> str:
    """The training variant without `{% generation %}`: for a derived variant, the original template itself."""
    if is_training_template(template):
        body = template[template.index(_MACRO_OPEN) + len(_MACRO_OPEN) : template.rindex(_MACRO_CLOSE)]
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
{%- set hct = namespace(pos=0, start=-1, end=-1, cut=-1, at=-1, closers=[], turn='') -%}
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
            {%- if hct.end < 0 -%}
                {%- for hct_stop in hct_stops if hct_stop -%}
                    {%- set hct_n = hct_stop | length -%}
                    {%- set hct.at = hct.turn.rfind(hct_stop, hct.start) -%}
                    {%- for hct_k in range(hct.turn.count(hct_stop, hct.start)) -%}
                        {%- if hct.at >= 0 and hct.at + hct_n > hct.end -%}
                            {%- if hct_full.startswith(hct.turn[:hct.at + hct_n]) -%}
                                {%- set hct.end = hct.at + hct_n -%}
                                {%- set hct.at = -1 -%}
                            {%- else -%}
                                {%- set hct.at = hct.turn.rfind(hct_stop, hct.start, hct.at + hct_n - 1) -%}
                            {%- endif -%}
                        {%- endif -%}
                    {%- endfor -%}
                {%- endfor -%}
            {%- endif -%}
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
