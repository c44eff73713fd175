"""Which template a command works on: a bundled family's, a template file, or the tokenizer folder's own.

One function decides it for every command (verify, verify --conversations, prepare, view), so the same options
mean the same thing everywhere, `revision` and `token` included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError, option
from ..template.syntax import check_template_syntax, read_template
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
    if family and template:
        raise UsageError(
            f"give {option('family')} or {option('template')}, not both",
            hint="choose one template source",
            parameter="template",
        )
    path = resolve_source(source, revision=revision, token=token)
    given = dict(kwargs or {})
    if family:
        fam = family if isinstance(family, Family) else get_family(family)
        var = fam.variant(variant)
        return TemplateChoice(path, var.template, fam, var, {**var.kwarg_defaults, **given})
    if template:
        text = read_template(Path(template)).text  # as transformers would read it from the folder
        check_template_syntax(text, template)
        return TemplateChoice(path, text, kwargs=given)
    return TemplateChoice(path, None, kwargs=given)
