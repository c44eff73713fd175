"""Null fields written as the word None: a probe field whose value is None (`reasoning_content: null`, as
OpenAI-style records carry it) reaches a template as None wherever messages are passed as given (TGI, transformers.js,
transformers before it dropped None values). A template that prints it (`message.get('reasoning_content', '')`
returns None, not the default, when the key is there) trains and serves the literal `None` (Kimi K2 Thinking's
`<think>None</think>`). transformers' own rendering drops the key, so only rendering as given shows it.

Content None is not looked at here: `content_none` explains what it changes."""

from __future__ import annotations

from collections.abc import Collection, Iterator

from ...conversations.probes import Probe
from ...template.rendering import Rendered
from ..context import VerifyContext
from ..results import Finding, around, first_difference

NONE_HINT = (
    "write a field that may be null through a test: `{% if message.reasoning_content %}` or "
    "`message.reasoning_content or ''` (`.get(key, '')` returns None when the key is there with None)"
)


def _null_fields(probe: Probe) -> Iterator[tuple[int, str]]:
    """(message index, key) of every None value a probe's messages carry, content aside."""
    for index, message in enumerate(probe.messages):
        for key, value in message.items():
            if value is None and key != "content":
                yield index, key


def as_given(ctx: VerifyContext, probe: Probe, nulls: Collection[tuple[int, str]]) -> Rendered:
    """The probe rendered as a stack that passes messages as given renders it, with the None fields `nulls`
    ((message index, key)) kept and every other None dropped, as transformers drops it."""
    messages = [
        {k: v for k, v in m.items() if v is not None or (i, k) in nulls} for i, m in enumerate(probe.message_list())
    ]
    return ctx.renderer.render_as_given(
        messages,
        probe.tool_list(),
        add_generation_prompt=probe.add_generation_prompt,
        continue_final_message=probe.continue_final_message,
    )


def null_literals(ctx: VerifyContext) -> list[Finding]:
    """Where a template writes `None` for a null field of a probe, rendered as given, that transformers' rendering
    (None values dropped) does not write."""
    findings = []
    for probe in ctx.probes:
        nulls = list(_null_fields(probe))
        plain = ctx.rendered[probe.id]
        if not nulls or not plain.ok:
            continue
        given = as_given(ctx, probe, nulls)  # content None stays dropped, as transformers drops it
        text, expected = given.text or "", plain.text or ""
        if not given.ok or text.count("None") <= expected.count("None"):
            continue
        pos = first_difference(text, expected)
        at = ctx.message_at(probe, pos)
        index, key = next(((i, k) for i, k in nulls if i == at), nulls[0])
        shown, dropped = around(text, pos, ctx.control_tokens), around(expected, pos, ctx.control_tokens)
        findings.append(
            Finding(
                probe.id,
                f"probe {probe.id}: message {index}'s {key} is null, and the template writes the literal None "
                f"when the message reaches it as given ({shown}): TGI, "
                f"transformers.js and transformers versions that keep None values train and serve the word None; "
                f"transformers' apply_chat_template drops the key and writes {dropped}",
                {"message_index": index, "field": key, "char_position": pos},
                severity="error",
                cause="template",
                hint=NONE_HINT,
            )
        )
    return findings
