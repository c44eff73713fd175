"""What an install puts on a tokenizer: a bundled family's variant, or template files the user brings.

Either way it comes down to the same value: the templates by name (`default`, and named ones such as `tool_use`),
the control tokens to register, the stop tokens, whether the template writes BOS itself, and where the tokens came
from. For template files the tokens are, in order: what the user declares, the bundled family whose template it
is (by sha256), and what the template emits on the probes, an inference the plan shows for review.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError, option
from ..families.registry import Family, Variant, get_family
from ..families.source import TemplateChoice, template_files
from ..families.tokens import check_declared_tokens, probe_renderings, template_tokens
from ..template.analysis import reads_variable, writes_bos
from ..template.syntax import check_template_syntax, read_template


@dataclass(frozen=True)
class InstallSubject:
    label: str  # "family/variant", or the template file's name
    templates: dict[str, str]  # by name; "default" always
    control_tokens: tuple[str, ...]
    stop_tokens: tuple[str, ...]
    template_writes_bos: bool
    pad_tokens: tuple[str, ...] = ()
    tokens_from: str = ""
    notes: tuple[str, ...] = ()  # what token inference chose or could not decide, shown in the plan
    markup_tokens: tuple[str, ...] = ()  # tool-call and reasoning tags, registered as plain added tokens
    family: str | None = None
    variant: str | None = None
    origins: dict[str, str] = field(default_factory=dict)  # template name -> file or family path, for messages
    # template name -> the file as written, where its line endings are not LF: its .jinja file keeps them
    # (transformers reads them as LF); `templates` and the config key hold the LF text
    written: dict[str, str] = field(default_factory=dict)

    @property
    def template(self) -> str:
        return self.templates["default"]

    @property
    def template_writes_eos(self) -> bool:
        """Whether a template writes `{{ eos_token }}`: then changing eos_token would change what it renders."""
        return any(reads_variable(text, "eos_token") for text in self.templates.values())


def from_family(family: str | Family, variant: str | None) -> InstallSubject:
    fam = family if isinstance(family, Family) else get_family(family)
    var: Variant = fam.variant(variant)
    check_template_syntax(var.template, var.template_path)
    return InstallSubject(
        label=f"{fam.name}/{var.name}",
        templates={"default": var.template},
        control_tokens=var.control_tokens,
        stop_tokens=var.stop_tokens,
        template_writes_bos=fam.template_writes_bos,
        pad_tokens=fam.pad_tokens,
        tokens_from=f"the bundled family {fam.name}/{var.name}",
        family=fam.name,
        variant=var.name,
        origins={"default": str(var.template_path)},
    )


def from_templates(
    choice: TemplateChoice, tokenizer: object, *, generation_config: Mapping[str, Any] | None = None
) -> InstallSubject:
    """The choice's template files on the loaded source `tokenizer`: tokens declared, identified or inferred (said
    which), the stops read from the source's `generation_config` where the template writes them."""
    if choice.template is None:
        raise ValueError("from_templates: the choice names no template file")
    files = template_files(choice.template)
    texts, written, bom_notes = {}, {}, []
    for name, path in files.items():
        file = read_template(path)
        if file.had_bom:
            bom_notes.append(
                f"the UTF-8 byte order mark at the start of {path} was removed (transformers would write U+FEFF "
                "before every rendering)"
            )
        texts[name] = file.text
        if file.written != file.text:
            written[name] = file.written
        check_template_syntax(texts[name], path)
    declared_controls = choice.control_tokens or ()
    stop_tokens = choice.stop_tokens
    check_declared_tokens(
        stop_tokens,
        declared_controls,
        texts.values(),
        lambda: probe_renderings(tokenizer, texts.values()),
        allow_unwritten=choice.allow_unwritten_tokens,
    )
    found = template_tokens(
        tokenizer,
        texts["default"],
        stop_tokens=stop_tokens,
        control_tokens=declared_controls,
        generation_config=generation_config,
    )
    controls, markup = list(found.control_tokens), list(found.markup_tokens)
    for name, text in texts.items():
        if name != "default":  # a named template may write tokens the default does not (tool_use's tool blocks)
            other = template_tokens(tokenizer, text, stop_tokens=found.stop_tokens)
            controls += [t for t in other.control_tokens if t not in controls]
            markup += [t for t in other.markup_tokens if t not in markup]
    if not found.stop_tokens:
        raise UsageError(
            f"{files['default']}: "
            + ("; ".join(found.notes) if found.notes else "no token is known to end an assistant turn")
            + ", so generation would never stop",
            hint=f"declare it: {option('stop_tokens')} TOKEN (hf-chat-templates verify SRC --template FILE runs every "
            "other check meanwhile)",
            path=files["default"],
            parameter="stop_tokens",
        )
    return InstallSubject(
        label=files["default"].name,
        templates=texts,
        control_tokens=tuple(controls),
        stop_tokens=found.stop_tokens,
        template_writes_bos=writes_bos(texts["default"]),
        tokens_from=found.origin,
        notes=(*bom_notes, *found.notes),
        markup_tokens=tuple(t for t in markup if t not in controls),
        origins={name: str(path) for name, path in files.items()},
        written=written,
    )


def subject_of_family(choice: TemplateChoice) -> InstallSubject | None:
    """The bundled family's variant to install, or None for template files; refuses what cannot go together
    (stop or control tokens declared, which only a template file takes)."""
    family, variant, template = choice.family, choice.variant, choice.template
    if family is not None and template is not None:
        raise UsageError(
            f"give a family or {option('template')}, not both",
            parameter="template",
            hint="install a bundled family by name, or your own template file",
        )
    if family is not None and choice.declares_tokens:
        raise UsageError(
            f"{option('stop_tokens')} and {option('control_tokens')} declare a template file's tokens; a family "
            "brings its own",
            hint=f"drop them, or install the template with {option('template')} FILE",
            parameter="stop_tokens",
        )
    if family is not None:
        return from_family(family, variant)
    if template is None:
        raise UsageError(
            f"nothing to install: name a family or pass {option('template')} FILE",
            parameter="template",
            hint="hf-chat-templates list shows the bundled families",
        )
    if variant is not None:
        raise UsageError(
            f"{option('variant')} picks a family's variant; a template file has none",
            parameter="variant",
            hint=f"drop {option('variant')}",
        )
    return None
