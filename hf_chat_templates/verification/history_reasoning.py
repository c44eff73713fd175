"""Whether a conversation's instability is a thinking model's history: reasoning of turns before the last user
message dropped by design.

Thinking models' formats (Qwen3, LFM2.5, DeepSeek R1, ...) write an assistant turn's reasoning only while it is
part of the current exchange: once a later user message follows, the turn is rendered without its `<think>…</think>`
block (and some write an empty block on the last turn only). `prefix-stable` then finds the history rewritten, and
`assistant-mask` finds turns it cannot train in one whole-conversation sample. Where the two renderings are the
same once every think block (the pair of tags the template names) is removed, and a user message follows the point
compared, that is the format's stated design: info naming it (a warning with `--training`: whole-conversation
samples cannot train those turns), met by training one sample per turn. Any other difference keeps its finding.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import VerifyContext

THINK_TAGS = (("<think>", "</think>"), ("[THINK]", "[/THINK]"), ("<thinking>", "</thinking>"))


def think_tags(template: str) -> tuple[str, str] | None:
    """The think tags the template writes: the first pair whose closing tag it names."""
    return next(((a, b) for a, b in THINK_TAGS if b in template), None)


def without_think_blocks(text: str, tags: tuple[str, str]) -> str:
    """`text` with every closed think block, and the whitespace after it, removed."""
    return re.sub(re.escape(tags[0]) + r".*?" + re.escape(tags[1]) + r"\s*", "", text, flags=re.S)


def dropped_history_reasoning(
    ctx: VerifyContext, messages: Sequence[dict[str, Any]], after: int, shorter: str, longer: str
) -> str | None:
    """Why `shorter` (a request, or a turn rendered as the last one) not being a prefix of `longer` (the whole
    conversation) is the format's handling of history reasoning, or None: a user message follows message `after`
    and the two are prefixes of each other once think blocks are removed from both."""
    tags = think_tags(ctx.template)
    if tags is None or longer.startswith(shorter):
        return None
    if not any(m.get("role") == "user" for m in messages[after + 1 :]):
        return None
    if not without_think_blocks(longer, tags).startswith(without_think_blocks(shorter, tags)):
        return None
    return (
        f"the format drops the reasoning ({tags[0]}…{tags[1]}) of turns before the last user message, as thinking "
        "models do by design: one whole-conversation sample cannot train them as they are served; train one sample "
        "per assistant turn (prepare --per-turn)"
    )


def history_severity(ctx: VerifyContext) -> str:
    """Info, a stated design; a warning when the template is to be trained on (`--training`)."""
    return "warning" if ctx.training else "info"
