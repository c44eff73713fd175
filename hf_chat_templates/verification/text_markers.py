"""Whether a template's `<|…|>` markers are text the model was trained on, not control tokens forgotten.

`<|…|>` is the shape of control tokens (ChatML's `<|im_start|>`, Llama 3's `<|eot_id|>`), and a template that writes
one the tokenizer does not hold is usually installed on the wrong tokenizer, or with its tokens unregistered. Some
models are trained with such markers as text: Zephyr and Apriel write `<|user|>`, `<|assistant|>`, `<|end|>` in pieces
and end every answer with the tokenizer's eos. The evidence that a template is such a one, read from the folder:

- the tokenizer registers none of the template's `<|…|>` markers (one registered and another not is one forgotten);
- every assistant turn ends with a stop token that is a registered special token the folder stops on (its
  generation config or eos, or one declared), so nothing needs a marker to be a token for generation to stop;
- none of them is ChatML's `<|im_start|>`/`<|im_end|>`, which the format defines as special tokens.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..conversations.probes import Probe
    from .context import VerifyContext

# `<|im_end|>`, `<｜User｜>`, and Gemma 4's half-piped `<|turn>` and `<turn|>`: shapes no text takes.
PIPE_TOKEN = re.compile(r"<[|｜].*>|<.*[|｜]>", re.DOTALL)
# `<|…|>` itself: the shape of Granite's text markers (DeepSeek's `<｜…｜>` are its tokens, never text).
ASCII_PIPES = re.compile(r"<\|[^<>|\s]+\|>")
# ChatML's markers: special tokens wherever the format is used (its definition makes them so), never text.
CHATML = ("<|im_start|>", "<|im_end|>")


def markers_read_as_text(ctx: VerifyContext, tokens: list[str]) -> str | None:
    """Why the template's `<|…|>` markers (`tokens`, those it writes) are text the model was trained on, or None.
    Zephyr and Apriel write `<|user|>`, `<|assistant|>`, `<|end|>` as text and end every answer with the tokenizer's
    eos: the tokenizer registers none of the markers (one registered and another not is one forgotten), and every
    assistant turn ends with a stop token that is a registered special token the folder stops on (so nothing needs
    the markers to be tokens to stop). ChatML's markers are never text."""
    pipes = [t for t in tokens if PIPE_TOKEN.fullmatch(t)]
    if not pipes or any(t in ctx.added_tokens or t in CHATML for t in pipes):
        return None
    stops = ctx.stop_tokens
    from_folder = ctx.declared_stops is not None or ctx.tokens.origin.endswith("where the template writes it")
    if not stops or not from_folder or not all(s in ctx.added_tokens and ctx.added_tokens[s].special for s in stops):
        return None
    turns = next((p for p in ctx.probes if p.id == "multi-turn"), None)
    if (
        turns is None
        or not ctx.rendered[turns.id].ok
        or not _every_answer_stops(turns, ctx.rendered[turns.id].text, stops)
    ):
        return None
    return (
        f"the tokenizer registers none of the template's <|…|> markers ({', '.join(pipes)}) and every assistant turn "
        f"ends with its registered stop token {stops[0]}: the model reads them as text (as Zephyr and Apriel are "
        "trained)"
    )


def _every_answer_stops(probe: Probe, text: str | None, stops: tuple[str, ...]) -> bool:
    """Whether a stop token follows each assistant answer of the probe's rendering before the next message."""
    text = text or ""
    pos, answers = 0, 0
    messages = probe.messages
    for i, m in enumerate(messages):
        content = m.get("content")
        if not isinstance(content, str) or not content or (at := text.find(content, pos)) < 0:
            return False
        pos = at + len(content)
        if m.get("role") != "assistant":
            continue
        answers += 1
        following = messages[i + 1].get("content") if i + 1 < len(messages) else None
        end = text.find(following, pos) if isinstance(following, str) and following else len(text)
        if not any(s in text[pos : end if end >= 0 else len(text)] for s in stops):
            return False
    return answers > 0


def literal_marker_as_text(
    ctx: VerifyContext, token: str, ids: list[int], texts: dict[str, str], asserted: set[str]
) -> tuple[str, str] | None:
    """Why an unregistered `<|…|>` marker the template writes as a literal is text by design, and the finding's
    severity (info when every rendering writes it alike, else a warning), or None. Granite's vLLM tool template
    writes `<|function_call_library|>` before its tools, a marker its model never registered: in pieces alike in
    training and serving. The evidence: a literal of the template, in several ids, named in no tokenizer file of the
    folder (no added token, no vocabulary piece, no entry of tokenizer_config.json or special_tokens_map.json), not
    ChatML's, not DeepSeek's full-width `<｜…｜>`, not `asserted` (a stop, a declared or a family's token), and no
    turn structure: not written once more for each exchange, nor leading the rendering (the template's turn markers
    stay control tokens, forgotten)."""
    from ..families.tokens import structural_fragments
    from ..template.syntax import template_literals

    if not ASCII_PIPES.fullmatch(token) or len(ids) == 1 or token in ctx.added_tokens or token in CHATML:
        return None
    if token in asserted or token not in template_literals(ctx.template) or _named_in_folder(ctx, token):
        return None
    if token in structural_fragments(ctx.renderer):
        return None
    same = len({text.count(token) for text in texts.values()}) == 1
    return (
        f"a marker the template writes as a literal ({'the same in every rendering' if same else 'in some renderings'}"
        ") that no tokenizer file of the folder names, and no turn marker: text by design, tokenized the same in "
        "training and serving",
        "info" if same else "warning",
    )


def _named_in_folder(ctx: VerifyContext, token: str) -> bool:
    """Whether tokenizer_config.json (its chat templates aside) or special_tokens_map.json names `token`."""
    import json

    folder = ctx.folder
    if folder is None:
        return False
    config = {k: v for k, v in folder.tokenizer_config.items() if k != "chat_template"}
    return any(token in json.dumps(part, ensure_ascii=False) for part in (config, folder.special_tokens_map or {}))
