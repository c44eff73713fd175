"""The control and stop tokens of a template, and where they come from: what the caller declares, the bundled
family whose template it is, or what the template emits on the probe conversations (an inference, and said so)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..conversations.probes import Probe, build_probes
from ..template.analysis import control_tokens_in, stop_token_after
from ..template.rendering import Rendered, Renderer
from .registry import Variant, identify


@dataclass(frozen=True)
class TemplateTokens:
    control_tokens: tuple[str, ...]
    stop_tokens: tuple[str, ...]
    kwarg_defaults: dict[str, Any] = field(default_factory=dict)
    origin: str = ""


def render_probe(renderer: Renderer, probe: Probe) -> Rendered:
    """A probe rendered with its own flags (generation prompt, prefill), as `verify` renders it."""
    return renderer.render(
        probe.message_list(),
        probe.tool_list(),
        add_generation_prompt=probe.add_generation_prompt,
        continue_final_message=probe.continue_final_message,
    )


def inferred_control_tokens(
    renderer: Renderer, renderings: Iterable[str], probes: Iterable[Probe], declared: Iterable[str] = ()
) -> tuple[str, ...]:
    """`declared`, plus what the template writes in its literals and renderings (never what only message content
    spells), plus the registered special tokens in its literals."""
    added = {t.content: t for t in renderer.tokenizer.added_tokens_decoder.values()}
    content = [str(m.get("content", "")) for p in probes for m in p.messages]
    return control_tokens_in(renderer.template, renderings, added, declared=declared, content=content)


def inferred_stop_tokens(renderer: Renderer, control_tokens: Iterable[str]) -> tuple[str, ...]:
    """The first control token after the answer of the standard plain probe."""
    probe = next(p for p in build_probes() if p.id == "plain")
    rendered = render_probe(renderer, probe)
    return stop_token_after(rendered.text or "", probe.messages[-1]["content"], control_tokens)


def template_tokens(
    tokenizer: Any,
    template: str,
    *,
    kwargs: dict[str, Any] | None = None,
    variant: Variant | None = None,
    stop_tokens: Iterable[str] | None = None,
    control_tokens: Iterable[str] | None = None,
) -> TemplateTokens:
    """Declared tokens first; then the variant's (given, or identified by the template's sha256); then inferred.
    Declared stop tokens replace the others; declared control tokens come before the ones found."""
    stops = tuple(stop_tokens) if stop_tokens is not None else None
    found = variant or (identified[1] if (identified := identify(template)) else None)
    if found is not None:
        tokens = TemplateTokens(
            found.control_tokens,
            found.stop_tokens,
            dict(found.kwarg_defaults),
            f"the bundled family {found.family}/{found.name}",
        )
    else:
        renderer = Renderer(tokenizer, template, kwargs)
        probes = build_probes()
        texts = [r.text for p in probes if (r := render_probe(renderer, p)).ok and r.text]
        controls = inferred_control_tokens(renderer, texts, probes)
        tokens = TemplateTokens(
            controls, inferred_stop_tokens(renderer, controls), {}, "inferred from the template's renderings"
        )
    declared_controls = tuple(control_tokens or ())
    return TemplateTokens(
        tuple(dict.fromkeys([*declared_controls, *(stops or ()), *tokens.control_tokens])),
        stops if stops is not None else tokens.stop_tokens,
        tokens.kwarg_defaults,
        "declared" if stops is not None else tokens.origin,
    )
