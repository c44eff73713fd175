"""`verify`: run the named checks on a tokenizer and template, and shape the report.

>>> report = verify("path/to/tokenizer", "llama3.2-pythonic")          # doctest: +SKIP
>>> report.ok, report.summary                                          # doctest: +SKIP

The checks live in `checks/`; the context they share in `context`; this module loads that context from a source,
runs the checks in order, and turns a check that crashes into a failing result, never a hidden one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..conversations.probes import Probe
from ..errors import UsageError, option
from ..families.registry import Family, Variant, identify, list_families
from ..families.source import ChosenTemplate, TemplateChoice, as_choice, choose_template
from ..families.tokens import check_declared_tokens
from ..installation.apply import install
from ..template.engines import json_worker
from ..template.engines.registry import engine_names
from ..template.limits import RenderLimitExceeded
from ..template.rendering import named_template
from ..template.syntax import check_template_syntax, transformers_text
from ..tokenizer.base import base_tokenizer
from ..tokenizer.folder import CHAT_TEMPLATE_FILE, load_tokenizer, read_folder
from ..tokenizer.lazy import LazyTokenizer
from .checks import CHECK_CAUSES, CHECKS, PROBE_FREE, check_ids
from .checks.engines import begin as begin_engines
from .checks.engines import prestart as prestart_engines
from .context import VerifyContext
from .mistral_reference import is_mistral_template
from .references import MISTRAL
from .references import begin as begin_references
from .references import prestart as prestart_references
from .results import CheckResult, VerificationReport

__all__ = [
    "check_ids",
    "load_context",
    "run_checks",
    "verify",
    "verify_all",
    "verify_all_with_contexts",
    "verify_with_context",
]


def _versions() -> dict[str, str]:
    found = {}
    for dist in ("hf-chat-templates", "transformers", "tokenizers", "jinja2", "minijinja"):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = "missing"
    return found


def _wanted(only: Iterable[str] | None) -> list[str]:
    """The checks to run, in the order given (all of them for none), or UsageError naming those that do not exist."""
    wanted = list(only) if only else list(check_ids())
    unknown = [c for c in wanted if c not in set(check_ids())]
    if unknown:
        raise UsageError(
            f"unknown check(s) {', '.join(unknown)}; checks: {', '.join(check_ids())}",
            hint="hf-chat-templates verify --help",
            parameter="only",
        )
    return wanted


def run_checks(ctx: VerifyContext, only: Iterable[str] | None = None) -> tuple[CheckResult, ...]:
    checks = dict(CHECKS)
    wanted = _wanted(only)
    # Work in processes of their own, begun now so that it runs while the checks before its own run here
    for check_id, begin in (("engine-parity", begin_engines), ("reference-parity", begin_references)):
        if check_id in wanted:
            with contextlib.suppress(Exception):  # what fails to begin is done, and reported, by the check itself
                begin(ctx)
    json_worker.close_idle()  # begun early for a check that does not ask them after all
    results = []
    for check_id in wanted:
        try:
            result = checks[check_id](ctx)
            if result.severity is not None and result.cause is None:
                result = dataclasses.replace(result, cause=CHECK_CAUSES.get(check_id, "template"))
            results.append(result)
        except RenderLimitExceeded as err:  # the template's own budget, spent by its renders: the template's doing
            results.append(
                CheckResult(
                    check_id,
                    "fail",
                    f"could not run: the template's render budget for this run is spent ({err})",
                    hint="make the template write less (or loop less) per conversation; a template meant to be this "
                    "large: raise HF_CHAT_TEMPLATES_RENDER_MAX_CHARS or HF_CHAT_TEMPLATES_RENDER_SECONDS",
                    cause="template",
                )
            )
        except Exception as err:  # a check that crashes is reported as failing, never hidden
            results.append(
                CheckResult(
                    check_id,
                    "fail",
                    f"the check itself raised {type(err).__name__}: {err}",
                    hint="report this with the tokenizer and template",
                    cause=CHECK_CAUSES.get(check_id, "template"),
                )
            )
    return tuple(results)


def verify(
    source: str | Path,
    choice: TemplateChoice | str | Family | None = None,
    *,
    only: Iterable[str] | None = None,
    revision: str | None = None,
    token: str | None = None,
    training: bool = False,
    sanitize: bool = False,
    engines: Iterable[str] | str | None = None,
) -> VerificationReport:
    """Verify the tokenizer at `source` with the template `choice` names: its own (None), a bundled family's (a
    family or its name), or a `TemplateChoice` (a family's variant, or a template file, and the tokens declared).

    `training`: data the template never reads is an error, not a warning. `sanitize`: content is rendered with
    sanitize_control_tokens=True, so content that still becomes a control token is an error. `engines`: the engine
    profiles `engine-parity` compares with transformers ("llama.cpp,tgi" or a list; default: every available one).
    `report.ok` is no error; `report.passes("warning")` no warning either."""
    return verify_with_context(
        source,
        choice,
        only=only,
        revision=revision,
        token=token,
        training=training,
        sanitize=sanitize,
        engines=engines,
    )[0]


def verify_with_context(
    source: str | Path,
    choice: TemplateChoice | str | Family | None = None,
    *,
    only: Iterable[str] | None = None,
    **options: Any,
) -> tuple[VerificationReport, VerifyContext]:
    """`verify`, and the context its checks read (the token view draws failures from it). `options` are
    `load_context`'s: revision, token, training, sanitize, engines, data_fields, gguf."""
    wanted = _wanted(only)
    try:
        ctx, fam, var, path = load_context(source, choice, prestart_for=wanted, **options)
        results = run_checks(ctx, wanted)
    finally:  # workers begun early and never asked (the folder or template failed to load): ended now
        json_worker.close_idle()
    probed = not set(wanted) <= PROBE_FREE  # the header's capabilities and tokens render the probe suite
    return VerificationReport(
        source=str(source),
        family=fam.name if fam else None,
        variant=var.name if var else None,
        tokenizer=str(path),
        versions=_versions(),
        capabilities=ctx.capabilities if probed else {},
        checks=results,
        tokens=_header_tokens(ctx) if probed else {},
    ), ctx


def _template_origin(path: Path, folder: Any, name: str) -> str:
    """Where a folder's template `name` is written, for an error that names it."""
    if name == "default" and folder.chat_template_file is not None:
        return str(path / CHAT_TEMPLATE_FILE)
    if name in folder.additional_templates:
        return str(path / "additional_chat_templates" / f"{name}.jinja")
    return f"{path / 'tokenizer_config.json'} (chat_template{'' if name == 'default' else ' ' + name})"


def _header_tokens(ctx: VerifyContext) -> dict[str, Any]:
    return {
        "control_tokens": list(ctx.control_tokens),
        "stop_tokens": list(ctx.stop_tokens),
        "tokens_from": ctx.tokens.origin,
        "token_notes": list(ctx.tokens.notes),
        "tool_call_ids": ctx.id_format,
    }


def _family_hint(choice: ChosenTemplate) -> str | None:
    """The bundled family whose template will be verified, as far as it is known before the tokenizer loads: the
    one named, or the one whose template is the file given or the folder's chat_template.jinja (MISTRAL for a
    Mistral instruct template no family bundles)."""
    if choice.variant is not None:
        return choice.variant.family
    text = choice.template
    if text is None:
        try:
            text = transformers_text((choice.path / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):  # read, and reported, with the folder
            return None
    found = identify(text)
    if found is None and is_mistral_template(text):
        return MISTRAL  # mistral-common is its reference
    return found[0].name if found is not None else None


def _prestart(checks: set[str], choice: ChosenTemplate, engines: Iterable[str] | str | None) -> None:
    """The processes of `checks` begun before the tokenizer loads, to set themselves up meanwhile: a guess at
    what they will be asked (no family found, none begun), never what they are asked."""
    if "engine-parity" in checks:
        prestart_engines(engines)
    if "reference-parity" in checks:
        prestart_references(_family_hint(choice))


def load_context(
    source: str | Path,
    choice: TemplateChoice | str | Family | None = None,
    *,
    revision: str | None = None,
    token: str | None = None,
    probes: Iterable[Probe] | None = None,
    training: bool = False,
    sanitize: bool = False,
    engines: Iterable[str] | str | None = None,
    data_fields: dict[str, int] | None = None,
    prestart_for: Iterable[str] = (),
    gguf: Path | None = None,
) -> tuple[VerifyContext, Family | None, Variant | None, Path]:
    """The tokenizer at `source` and the template `choice` names to check: its own, a bundled family's, or a
    template file, with the tokens it declares.
    `data_fields`: records per field of the data to train on, when known (`verify --conversations`).
    `prestart_for`: the checks to be run whose processes of their own begin now, before the tokenizer loads.
    `gguf`: the GGUF file `source` was saved from, which the fixes then name."""
    engine_names(engines)  # an unknown engine name fails before the tokenizer loads
    declared = as_choice(choice)
    resolved = choose_template(source, declared, revision=revision, token=token)
    _prestart(set(prestart_for), resolved, engines)
    folder = read_folder(resolved.path)
    # Checks that render no probe (template-safety) may need no tokenizer: it is loaded when one renders
    own = folder.loaded_templates() if resolved.template is None else (resolved.template, None)
    lazy = bool(prestart_for) and set(prestart_for) <= PROBE_FREE and own is not None
    tokenizer = LazyTokenizer(resolved.path, folder) if lazy else load_tokenizer(resolved.path, folder)
    text: str | None
    if resolved.template is not None:
        text, tool_template = resolved.template, None
    elif lazy and own is not None:
        text, tool_template = own
    else:
        text, tool_template = named_template(tokenizer), named_template(tokenizer, "tool_use")
    if text is None:
        raise UsageError(
            f"{resolved.path}: the tokenizer has no chat template",
            hint=f"pass {option('family')} NAME or {option('template')} FILE, or install one first",
            path=resolved.path,
        )
    if resolved.template is None:  # the folder's own templates (a file given was checked when it was read)
        for name, source_text in (("default", text), ("tool_use", tool_template)):
            if source_text is not None:
                check_template_syntax(source_text, _template_origin(resolved.path, folder, name))
    resolved = resolved.identified(text)
    ctx = VerifyContext(
        tokenizer,
        text,
        tool_template=tool_template,
        folder=folder,
        variant=resolved.variant,
        kwargs=resolved.kwargs,
        probes=probes,
        stop_tokens=declared.stop_tokens,
        control_tokens=declared.control_tokens,
        training=training,
        sanitize=sanitize,
        engines=engines,
        data_fields=data_fields,
        gguf=gguf,
    )
    check_declared_tokens(
        declared.stop_tokens,
        declared.control_tokens,
        [text, ctx.tool_template],
        lambda: [r.text for r in ctx.rendered.values() if r.ok and r.text],
        allow_unwritten=declared.allow_unwritten_tokens,
    )
    return ctx, resolved.family, resolved.variant, resolved.path


def verify_all(
    *, only: Iterable[str] | None = None, workdir: Path | None = None, engines: Iterable[str] | str | None = None
) -> list[VerificationReport]:
    """Every bundled family and variant, installed on its default real base tokenizer, then verified. `engines`:
    the engine profiles `engine-parity` compares with transformers (default: every available one)."""
    return [report for report, _ in verify_all_with_contexts(only=only, workdir=workdir, engines=engines)]


def verify_all_with_contexts(
    *,
    only: Iterable[str] | None = None,
    workdir: Path | None = None,
    engines: Iterable[str] | str | None = None,
    on_result: Callable[[VerificationReport, float], None] | None = None,
) -> list[tuple[VerificationReport, VerifyContext]]:
    """`verify_all`'s reports with their contexts; `on_result(report, seconds)` is called as each variant is done."""
    engine_names(engines)  # an unknown name fails before anything is installed
    results = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for fam in list_families():
            base = base_tokenizer(fam.base_tokenizer)
            for var in fam.variants.values():
                started = time.monotonic()
                out = Path(tmp) / f"{fam.name}-{var.name}"
                chosen = TemplateChoice(family=fam, variant=var.name)
                install(chosen, base, out)
                report, ctx = verify_with_context(out, chosen, only=only, engines=engines)
                results.append(
                    (
                        VerificationReport(
                            source=f"{fam.name}/{var.name} on {fam.base_tokenizer}",
                            family=report.family,
                            variant=report.variant,
                            tokenizer=fam.base_tokenizer,
                            versions=report.versions,
                            capabilities=report.capabilities,
                            checks=report.checks,
                            tokens=report.tokens,
                        ),
                        ctx,
                    )
                )
                if on_result is not None:
                    on_result(results[-1][0], time.monotonic() - started)
    return results
