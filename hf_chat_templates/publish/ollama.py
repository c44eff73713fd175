"""`export ollama`: a template translated into the Go template Ollama renders, proved on every probe, and written
as a Modelfile (FROM, TEMPLATE, PARAMETER stop).

The proof is `engine-parity`'s Ollama profile on the translation: each probe rendered by the Go renderer as Ollama
renders it must equal transformers' rendering byte for byte. A probe Ollama cannot send (a closed conversation that
ends in a user turn: Ollama has no add_generation_prompt) is left out and counted. A construct the translation
cannot express is refused by name and line (`TranslationRefused`); a probe that renders otherwise refuses the export
(`Unproved`, with the findings), so no Modelfile is written that serves other text than the model was trained on.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import HfChatTemplatesError
from ..families.source import TemplateChoice
from ..installation.modelfile import Modelfile
from ..template.engines.gotemplate import Untranslatable, refusal, refusals
from ..template.engines.registry import ollama_profile
from ..verification.results import Finding


class TranslationRefused(HfChatTemplatesError):
    """The template uses a construct the Go translation cannot express: the message names it and its line."""


class Unproved(HfChatTemplatesError):
    """The translation renders a probe otherwise than transformers (or cannot render it): `findings` say where."""

    def __init__(self, message: str, findings: list[Finding], **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.findings = findings


@dataclass
class OllamaExport:
    modelfile: Modelfile
    identical: int  # probes rendered identically
    left_out: list[str] = field(default_factory=list)  # probes Ollama cannot send, by id
    summary: dict[str, Any] = field(default_factory=dict)  # engine-parity's detail for the Ollama profile
    notes: list[str] = field(default_factory=list)  # what to check in the GGUF the Modelfile names

    @property
    def text(self) -> str:
        return self.modelfile.text()


def export_ollama(
    source: str | Path,
    choice: TemplateChoice | None = None,
    *,
    base: str | None = None,
    **options: Any,
) -> OllamaExport:
    """Translate the template verify would check on `source` (a tokenizer folder or GGUF file; its own template, a
    family's, or a file: `choice` as verify takes it), prove it on every probe, and return the Modelfile (`base` is
    its FROM, default `source`). Raises TranslationRefused, Unproved, and what verify raises for a source it cannot
    load."""
    from ..gguf.loading import gguf_tokenizer_folder
    from ..gguf.reading import is_gguf
    from ..verification.runner import verify_with_context

    profile = ollama_profile()
    saved = (profile.given, profile.translating, getattr(profile, "picked", None))
    profile.given, profile.translating, profile.picked = None, True, None
    try:
        with tempfile.TemporaryDirectory(prefix="hfct-gguf-") as tmp:  # a GGUF file: its tokenizer as a folder
            folder = gguf_tokenizer_folder(source, Path(tmp) / "tokenizer") if is_gguf(source) else source
            report, ctx = verify_with_context(folder, choice, only=["engine-parity"], engines="ollama", **options)
    finally:
        profile.given, profile.translating, profile.picked = saved
    if ctx.tool_template is not None:
        raise TranslationRefused(
            "the folder has a separate tool_use template; Ollama renders one template for every request",
            hint="install one template that handles tools (hf-chat-templates install ... --format both), then export",
        )
    translated = profile.translations.get(ctx.template)
    if isinstance(translated, Untranslatable):
        variables = {**ctx.renderer.template_variables(), **ctx.kwargs}
        more = [
            e
            for e in refusals(ctx.template, variables)
            if (e.line, e.construct) != (translated.line, translated.construct)
        ]
        also = "; ".join(f"line {e.line}: {e.construct}" for e in more[:8]) + (", …" if len(more) > 8 else "")
        raise TranslationRefused(
            refusal(translated) + (f"; also {also}" if more else ""),
            hint="rewrite that construct with what Go templates have (if/range/eq/and/or/not/len/index/slice/json), "
            "or write the Go template by hand and check it with verify --ollama-modelfile",
        )
    (result,) = report.checks
    summary = result.detail.get("engines", {}).get("ollama", {})
    if summary.get("status") == "skipped":
        raise HfChatTemplatesError(f"the translation cannot be proved here: {summary.get('reason')}")
    left_out = sorted(
        p for f in result.findings if f.cause == "input normalization" for p in f.detail.get("probes", [f.probe])
    )
    unproved = sorted(set(summary.get("differs", [])) | (set(summary.get("fails", [])) - set(left_out)))
    if unproved or translated is None:
        bad = [f for f in result.findings if f.probe in unproved or set(f.detail.get("probes", ())) & set(unproved)]
        shown = "; ".join(f.text for f in bad[:2]) + (f"; and {len(bad) - 2} more" if len(bad) > 2 else "")
        raise Unproved(
            f"the Go translation renders {len(unproved)} probe(s) otherwise than transformers "
            f"({', '.join(unproved[:6])}{', …' if len(unproved) > 6 else ''}): {shown}",
            bad,
            hint="Ollama cannot serve this template byte for byte; the first difference names where",
        )
    stops = tuple(ctx.stop_tokens)
    done = OllamaExport(
        Modelfile(base or str(source), translated, stops), int(summary.get("identical", 0)), left_out, summary
    )
    bos = str(ctx.renderer.template_variables().get("bos_token") or "")
    if bos and any((ctx.rendered[p.id].text or "").startswith(bos) for p in ctx.probes if ctx.rendered[p.id].ok):
        done.notes.append(
            f"the template writes the BOS token {bos} itself: Ollama's runner adds one more when the GGUF's "
            "tokenizer.ggml.add_bos_token is true (check that it is false, or the model sees two)"
        )
    return done
