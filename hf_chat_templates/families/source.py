"""Which template a command works on: a bundled family's, a template file, or the tokenizer folder's own.

One function decides it for every command (verify, verify --conversations, prepare, view), so the same options
mean the same thing everywhere, `revision` and `token` included. An option that would be ignored is refused (a
variant without a family, a revision or token for a local folder), an empty template file is refused rather than
taken for "no template", and a local folder whose files link outside it is refused before anything reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TemplateError, UsageError, option
from ..template.syntax import check_template_syntax, read_template
from ..tokenizer.folder import check_links
from ..tokenizer.hub import resolve_source
from .registry import Family, Variant, get_family, identify


@dataclass(frozen=True)
class TemplateChoice:
    """The tokenizer folder (local, or the Hub snapshot at `revision`) and the template to use on it. `template`
    is None for the folder's own template, which its loader reads; `kwargs` are the variant's defaults under the
    caller's."""

    path: Path
    template: str | None
    family: Family | None = None
    variant: Variant | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    def identified(self, text: str) -> TemplateChoice:
        """This choice with the family and variant whose template is `text`, when it is a bundled one."""
        if self.variant is not None:
            return self
        found = identify(text)
        if found is None:
            return self
        fam, var = found
        return TemplateChoice(self.path, self.template, fam, var, {**var.kwarg_defaults, **self.kwargs})


def check_source_options(source: str | Path, *, revision: str | None, token: str | None) -> None:
    """Refuse `revision` and `token` for a local folder: they only say which Hub snapshot to fetch."""
    given = [name for name, value in (("revision", revision), ("token", token)) if value is not None]
    if given and Path(str(source)).expanduser().exists():
        named = " and ".join(option(name) for name in given)
        raise UsageError(
            f"{source}: a local folder; {named} only apply to a Hub repo id",
            hint=f"drop {named}, or pass the Hub repo id instead of the folder",
            path=Path(str(source)),
            parameter=given[0],
        )


def _template_text(template: str | Path) -> str:
    """The template file as transformers would read it from the folder; an empty one is refused."""
    try:
        text = read_template(Path(template)).text
    except TemplateError:
        raise
    except OSError as err:
        raise TemplateError(
            f"{template}: cannot read the template file ({err.strerror or err})",
            hint=f"pass a readable template file to {option('template')}",
            path=Path(template),
            parameter="template",
        ) from None
    if not text.strip():
        raise TemplateError(
            f"{template}: the template file is empty",
            hint=f"pass a template with content, or drop {option('template')} to use the folder's own",
            path=Path(template),
            parameter="template",
        )
    check_template_syntax(text, template)
    return text


def choose_template(
    source: str | Path,
    *,
    family: str | Family | None = None,
    variant: str | None = None,
    template: str | Path | None = None,
    kwargs: dict[str, Any] | None = None,
    revision: str | None = None,
    token: str | None = None,
) -> TemplateChoice:
    """Resolve `source` (a folder or Hub repo id) and the template: `family` (and `variant`), or the file
    `template`, or neither for the folder's own."""
    if family and template is not None:
        raise UsageError(
            f"give {option('family')} or {option('template')}, not both",
            hint="choose one template source",
            parameter="template",
        )
    if variant is not None and not family:
        raise UsageError(
            f"{option('variant')} picks a bundled family's variant, and no {option('family')} is given",
            hint=f"add {option('family')} NAME, or drop {option('variant')}",
            parameter="variant",
        )
    check_source_options(source, revision=revision, token=token)
    path = resolve_source(source, revision=revision, token=token)
    check_links(path)
    given = dict(kwargs or {})
    if family:
        fam = family if isinstance(family, Family) else get_family(family)
        var = fam.variant(variant)
        return TemplateChoice(path, var.template, fam, var, {**var.kwarg_defaults, **given})
    if template is not None:
        return TemplateChoice(path, _template_text(template), kwargs=given)
    return TemplateChoice(path, None, kwargs=given)
