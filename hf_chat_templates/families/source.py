"""Which template a command works on: a bundled family's, template files, or the tokenizer folder's own.

`TemplateChoice` is that choice as the user states it, with what they declare about the template (keyword
arguments, stop and control tokens): the command line builds one from its options and hands it, whole, to the
library function, which hands it on to where the template is resolved. `choose_template` resolves it for every
command that reads one template (verify, verify --conversations, prepare, view), so the same options mean the same
thing everywhere, `revision` and `token` included; `install` resolves it into what it installs
(installation/subject.py). An option that would be ignored is refused (a variant without a family, a revision or
token for a local folder), an empty template file is refused rather than taken for "no template", and a local
folder whose files link outside it is refused before anything reads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TemplateError, UsageError, option
from ..template.syntax import check_template_syntax, read_template, template_name_problem
from ..tokenizer.folder import check_links
from ..tokenizer.hub import resolve_source
from .registry import Family, Variant, get_family, identify

# Template files: a path (the default template), `NAME=FILE` strings (alone or in a list), or {name: file}.
TemplateFiles = str | Path | Mapping[str, str | Path] | Sequence[str | Path]


@dataclass(frozen=True)
class TemplateChoice:
    """The template to use and what is declared about it; the default is the tokenizer's own template.

    `family` (a bundled or registered family, by name) and its `variant`, or `template` (a file; `install` also
    takes named ones, see `template_files`), or neither for the template the tokenizer folder holds. `kwargs`: the
    template's keyword arguments, over the variant's defaults. `stop_tokens` declares the tokens that end an
    assistant turn (they replace the family's or inferred ones); `control_tokens` control tokens the template
    writes (checked, or registered, with those found); a declared token the template never writes is refused
    unless `allow_unwritten_tokens`.

    >>> TemplateChoice(family="llama3.2-pythonic", kwargs={"date_string": "26 Jul 2024"})   # doctest: +SKIP
    >>> TemplateChoice(template="chat.jinja", stop_tokens=("<|im_end|>",))                  # doctest: +SKIP
    """

    family: str | Family | None = None
    variant: str | None = None
    template: TemplateFiles | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    stop_tokens: tuple[str, ...] | None = None
    control_tokens: tuple[str, ...] | None = None
    allow_unwritten_tokens: bool = False

    def __post_init__(self) -> None:
        if self.kwargs is None:  # "no kwargs", as the functions that took them loose accepted
            object.__setattr__(self, "kwargs", {})
        # A list of tokens is taken too, kept as a tuple: a choice compares equal to the same choice
        for name in ("stop_tokens", "control_tokens"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))

    @property
    def declares_tokens(self) -> bool:
        return bool(self.stop_tokens or self.control_tokens)

    def template_file(self) -> Path | None:
        """The one template file chosen, None for a family's or the folder's own template; named templates (which
        only `install` takes) are refused."""
        if self.template is None:
            return None
        if isinstance(self.template, (str, Path)):
            return Path(self.template)
        files = template_files(self.template)
        if set(files) != {"default"}:
            raise UsageError(
                f"{option('template')} names templates ({', '.join(sorted(set(files) - {'default'}))}); this "
                "command reads one template",
                hint=f"give one {option('template')} FILE (named templates are installed with install)",
                parameter="template",
            )
        return files["default"]


def as_choice(choice: TemplateChoice | str | Family | None) -> TemplateChoice:
    """`choice`, where a family (or its name) stands for `TemplateChoice(family=...)` and None for the default."""
    if choice is None:
        return TemplateChoice()
    if isinstance(choice, TemplateChoice):
        return choice
    return TemplateChoice(family=choice)


@dataclass(frozen=True)
class ChosenTemplate:
    """A `TemplateChoice` resolved: the tokenizer folder (local, or the Hub snapshot at `revision`) and the template
    to use on it. `template` is None for the folder's own template, which its loader reads; `kwargs` are the
    variant's defaults under the caller's; `declared` is the choice it was resolved from."""

    path: Path
    template: str | None
    family: Family | None = None
    variant: Variant | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    declared: TemplateChoice = field(default_factory=TemplateChoice)

    def identified(self, text: str) -> ChosenTemplate:
        """This choice with the family and variant whose template is `text`, when it is a bundled one."""
        if self.variant is not None:
            return self
        found = identify(text)
        if found is None:
            return self
        fam, var = found
        return ChosenTemplate(self.path, self.template, fam, var, {**var.kwarg_defaults, **self.kwargs}, self.declared)


def template_files(template: TemplateFiles) -> dict[str, Path]:
    """`template` as files by name: a path is the default; `NAME=FILE` strings (alone or in a list) or a mapping
    name the others."""
    if isinstance(template, Mapping):
        items: list[tuple[str, str | Path]] = list(template.items())
    elif isinstance(template, (str, Path)):
        items = [("", template)]
    else:
        items = [("", t) for t in template]
    files: dict[str, Path] = {}
    for name, path in items:
        text = str(path)
        if not name and "=" in text and not Path(text).exists():
            name, _, text = text.partition("=")
        name = name or "default"
        if (problem := template_name_problem(name)) is not None:
            raise UsageError(
                f"{option('template')} {name}={text}: {problem}; a named "
                "template is written as additional_chat_templates/NAME.jinja",
                parameter="template",
                hint="name it with letters, digits and '_', e.g. tool_use=FILE",
            )
        if not text:
            raise UsageError(
                f"{option('template')} {name}=: no file after '='",
                parameter="template",
                hint=f"give the file: {option('template')} {name}=FILE",
            )
        if name in files:
            raise UsageError(
                f"{option('template')} names the template {name!r} twice",
                parameter="template",
                hint="give each named template once, as NAME=FILE",
            )
        files[name] = Path(text)
    if "default" not in files:
        raise UsageError(
            f"{option('template')} gives no default template (a FILE without NAME=)",
            parameter="template",
            hint=f"add {option('template')} FILE for the default template",
        )
    return files


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
    choice: TemplateChoice | None = None,
    *,
    revision: str | None = None,
    token: str | None = None,
) -> ChosenTemplate:
    """Resolve `source` (a folder or Hub repo id) and the template `choice` names: a family (and variant), a
    template file, or neither for the folder's own."""
    choice = choice if choice is not None else TemplateChoice()
    family, variant, template = choice.family, choice.variant, choice.template
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
    file = choice.template_file()
    check_source_options(source, revision=revision, token=token)
    path = resolve_source(source, revision=revision, token=token)
    check_links(path)
    given = dict(choice.kwargs)
    if family:
        fam = family if isinstance(family, Family) else get_family(family)
        var = fam.variant(variant)
        return ChosenTemplate(path, var.template, fam, var, {**var.kwarg_defaults, **given}, choice)
    if file is not None:
        return ChosenTemplate(path, _template_text(file), kwargs=given, declared=choice)
    return ChosenTemplate(path, None, kwargs=given, declared=choice)
