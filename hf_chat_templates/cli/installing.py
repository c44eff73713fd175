"""`install`: a bundled family's template, or your own template files, on a tokenizer; or every family on its
default base."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .app import (
    PathParam,
    cli,
    emit_json,
    families_option,
    force_option,
    hub_options,
    json_option,
    pass_template_choice,
    token_options,
    unwritten_option,
    warn,
)
from .gguf_files import install_gguf
from .helptext import environment_epilog

if TYPE_CHECKING:
    from ..families.source import TemplateChoice


@cli.command("install", epilog=environment_epilog("install"))
@click.argument("family", required=False)
@click.option("--tokenizer", "tokenizer", help="Source tokenizer: a local folder or a Hub repo id.")
@click.option("--output", type=PathParam(path_type=Path), required=True, help="Folder to write.")
@click.option("--variant", default=None, help="Template variant (default: the family's default).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["both", "jinja", "config"]),
    default="both",
    show_default=True,
    help="Write chat_template.jinja, the tokenizer_config.json key, or both.",
)
@click.option("--reuse-reserved", is_flag=True, help="Write new control tokens over unused reserved slots.")
@click.option(
    "--bos-postprocessor/--no-bos-postprocessor",
    default=True,
    show_default=True,
    help="Keep the BOS the tokenizer's post-processor adds (tokenizer(text) keeps it; a rendering is tokenized with "
    "add_special_tokens=False), or, when the template writes bos_token itself, drop it (tokenizer(rendered) then "
    "gives one BOS, tokenizer(text) on plain text none). With --gguf: tokenizer.ggml.add_bos_token.",
)
@click.option(
    "--pad-token",
    default=None,
    metavar="TOKEN",
    help="Set the pad token: a token of the vocabulary that is not a stop token (default: the tokenizer's own, or "
    "one picked when it has none).",
)
@click.option(
    "--training",
    is_flag=True,
    help="Also write the training variant (the template with {% generation %} markers) as the named "
    "template 'training'.",
)
@click.option(
    "--port",
    "port",
    is_flag=True,
    help="Port the template first (as the port command does): only the rewrites proven on every probe "
    "conversation are applied, the plan says which, and the ported template is the one written.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; write nothing.")
@click.option(
    "--gguf",
    "gguf_in",
    type=PathParam(path_type=Path),
    default=None,
    help="Install into this GGUF file instead of a folder: --output is the new .gguf file, the input is not "
    "changed (its vocabulary cannot grow: new control tokens need --reuse-reserved). Without FAMILY or "
    "--template: the file's own template again, with --stop-token or --pad-token.",
)
@force_option
@hub_options("--tokenizer")
@click.option(
    "--all",
    "all_families",
    is_flag=True,
    help="Every bundled family on its default base tokenizer, each in OUTPUT/FAMILY.",
)
@click.option(
    "--template",
    "templates",
    multiple=True,
    metavar="FILE|NAME=FILE",
    help="Install your own template instead of a family: FILE is the default template, NAME=FILE a named one "
    "such as tool_use (repeatable).",
)
@token_options(
    "With --template: a token that ends an assistant turn (repeatable); else inferred.",
    "With --template: a control token it writes (repeatable); the others are inferred.",
)
@unwritten_option
@json_option
@families_option
@pass_template_choice
def install_command(
    choice: TemplateChoice,
    tokenizer: str | None,
    output: Path,
    fmt: str,
    reuse_reserved: bool,
    bos_postprocessor: bool,
    pad_token: str | None,
    training: bool,
    port: bool,
    dry_run: bool,
    force: bool,
    revision: str | None,
    token: str | None,
    all_families: bool,
    as_json: bool,
    gguf_in: Path | None,
) -> None:
    """Install FAMILY's template (or your own, --template FILE) on a tokenizer, registering its control tokens
    and stop ids."""
    from .. import apply_install, plan_install
    from ..verification.port import port_for_install

    if gguf_in is not None:  # into a new GGUF file, from a GGUF file
        return install_gguf(choice, click.get_current_context().params)
    documents = []
    for job, src, out in _jobs(choice, tokenizer, output, all_families, pad_token):
        plan = plan_install(
            job,
            src,
            out,
            format=fmt,
            reuse_reserved=reuse_reserved,
            bos_postprocessor=bos_postprocessor,
            pad_token=pad_token,
            training=training,
            force=force,
            revision=revision,
            token=token,
            port=port_for_install if port else None,
        )
        for warning in plan.warnings:
            warn(f"{plan.family or plan.subject}: {warning}")
        if dry_run:
            documents.append(plan.to_dict())
            if not as_json:
                click.echo(plan.describe())
            continue
        result = apply_install(plan)
        documents.append(result.to_dict())
        if not as_json:
            _echo_result(result, out, all_families)
    if as_json:
        emit_json(documents if all_families else documents[0])


def _jobs(
    choice: TemplateChoice, tokenizer: str | None, output: Path, all_families: bool, pad: str | None
) -> list[tuple[TemplateChoice, str, Path]]:
    """(the template chosen, source, output) for each install the command makes."""
    from .. import base_tokenizer, get_family, list_families
    from ..errors import UsageError

    family, templates = choice.family, choice.template is not None
    if all_families:
        if family or tokenizer or templates or pad:
            raise UsageError(
                "--all installs every family on its default base; drop FAMILY, --template, --tokenizer and --pad-token",
                hint="hf-chat-templates install --all --output DIR",
            )
        return [
            (
                dataclasses.replace(choice, family=f, variant=None),
                str(base_tokenizer(f.base_tokenizer)),
                output / f.name,
            )
            for f in list_families()
        ]
    if not family and not templates:
        raise UsageError("missing FAMILY (or --template FILE)", hint="hf-chat-templates list")
    # an unknown family is named before a missing --tokenizer
    fam = get_family(family) if isinstance(family, str) and family else (family or None)
    if not tokenizer:
        base = fam.base_tokenizer if fam else "llama3"
        raise UsageError(
            "missing --tokenizer",
            hint=f"e.g. --tokenizer $(hf-chat-templates base-tokenizer {base} --output base)",
        )
    return [(dataclasses.replace(choice, family=fam), tokenizer, output)]


def _echo_result(result: Any, out: Path, all_families: bool) -> None:
    plan = result.plan
    if all_families:
        grew = f"+{plan.vocabulary_grew} ids" if plan.vocabulary_grew else "vocab unchanged"
        click.echo(
            f"{plan.family:<18} {plan.variant:<9} -> {out}  [{grew}; eos {plan.eos_token[1]}; "
            f"stop ids {list(plan.stop_token_ids)}]"
        )
        return
    click.echo(plan.describe())
    if result.already_installed:
        click.echo(f"already installed: {out} holds exactly these files; nothing written")
    else:
        click.echo(
            f"written: {out}" + (f" (previous folder kept at {result.replaced_to})" if result.replaced_to else "")
        )
