"""`view`: one conversation rendered on a tokenizer, as the model sees it, alone or aligned with another variant or
with the official renderer."""

from __future__ import annotations

import os

from ..conversations.probes import Probe
from ..conversations.records import read_messages_file
from ..errors import UsageError, option
from ..families.registry import Family
from ..families.source import TemplateChoice
from ..template.rendering import Renderer
from ..verification.context import VerifyContext
from ..verification.references import REFERENCES, Unsupported, reference_ids
from ..verification.runner import load_context
from .page import aligned_html, html_page, to_html
from .terminal import aligned_terminal, to_terminal
from .tokens import TokenView, context_view, diff_views, ids_view, token_view

# The longest rendering view draws: a token view holds a few hundred bytes per token, so a rendering at the render
# limit (10,000,000 characters) would need gigabytes, more than the render limit's own 2 GB.
MAX_VIEW_CHARS = 1_000_000


def _other_side(ctx: VerifyContext, fam: Family | None, name: str, probe: Probe, diff_with: str) -> TokenView:
    """The rendering to align with: the official renderer's ids, or another variant of the family."""
    if diff_with == "reference":
        if ctx.variant is None or ctx.variant.family not in REFERENCES:
            raise UsageError(
                f"{option('diff_with')} reference: no official renderer for {name}",
                hint=f"official renderers: {', '.join(REFERENCES)}",
                parameter="diff_with",
            )
        try:
            return ids_view(
                ctx.tokenizer,
                reference_ids(ctx, probe),
                title=REFERENCES[ctx.variant.family][0],
                control_tokens=ctx.control_tokens,
            )
        except Unsupported as why:
            raise UsageError(
                f"{option('diff_with')} reference: the official renderer cannot express this conversation ({why})",
                hint="compare with another variant instead",
                parameter="diff_with",
            ) from None
    if fam is None:
        raise UsageError(
            f"{option('diff_with')} VARIANT needs a bundled family: pass {option('family')}",
            hint="hf-chat-templates list",
            parameter="diff_with",
        )
    other_var = fam.variant(diff_with)
    out = Renderer(ctx.tokenizer, other_var.template, other_var.kwarg_defaults).render(
        probe.message_list(), probe.tool_list(), add_generation_prompt=probe.add_generation_prompt
    )
    if not out.ok:
        raise UsageError(
            f"{option('diff_with')} {diff_with}: {fam.name}/{diff_with} does not render this conversation: {out.error}",
            hint="compare with another variant",
            parameter="diff_with",
        )
    return token_view(ctx.tokenizer, out.text or "", title=f"{fam.name}/{diff_with}", control_tokens=ctx.control_tokens)


def view_conversation(
    source: str,
    messages_file: os.PathLike[str] | str,
    choice: TemplateChoice | str | Family | None = None,
    *,
    add_generation_prompt: bool = False,
    diff_with: str | None = None,
    ids: bool = False,
    width: int | None = None,
    html: bool = False,
    color: bool | None = None,
) -> tuple[str, str | None]:
    """(terminal text, HTML page or None) for one conversation rendered on the tokenizer at `source`, with the
    template `choice` names (default: the tokenizer's own)."""
    messages, tools = read_messages_file(messages_file)
    probe = Probe(
        "messages",
        tuple(messages),
        tuple(tools) if tools is not None else None,
        add_generation_prompt=add_generation_prompt,
        description="the conversation given",
    )
    ctx, fam, var, _ = load_context(source, choice, probes=(probe,))
    rendered = ctx.rendered[probe.id]
    if not rendered.ok:
        raise UsageError(
            f"{messages_file}: the template does not render this conversation: {rendered.error}",
            hint="hf-chat-templates verify SOURCE shows which inputs the template accepts",
            path=messages_file,
            parameter="messages",
        )
    if len(rendered.text or "") > MAX_VIEW_CHARS:
        raise UsageError(
            f"{messages_file}: the template renders {len(rendered.text or ''):,} characters for this conversation; "
            f"view shows renderings of up to {MAX_VIEW_CHARS:,} (each token is drawn, and held, on its own)",
            hint="view a shorter conversation; hf-chat-templates verify checks a template of any size within the "
            "render limits",
            path=messages_file,
            parameter="messages",
        )
    view = context_view(ctx, probe.id)
    name = f"{fam.name}/{var.name}" if fam and var else "template"
    view.title = f"{name} on {source}"
    aligned = diff_views(view, _other_side(ctx, fam, name, probe, diff_with)) if diff_with else None
    text = (
        aligned_terminal(aligned, width=width, color=color)
        if aligned
        else to_terminal(view, width=width, color=color, ids=ids)
    )
    page = None
    if html:
        body = aligned_html(aligned, anchor="first-difference") if aligned else to_html(view)
        page = html_page(f"hf-chat-templates view: {view.title}", body)
    return text, page
