"""`install`: a bundled family's template on a tokenizer, or every family on its default base."""

from __future__ import annotations

from pathlib import Path

import click

from .app import cli, emit_json, force_option, hub_options, json_option, warn


@cli.command("install")
@click.argument("family", required=False)
@click.option("--tokenizer", "tokenizer", help="Source tokenizer: a local folder or a Hub repo id.")
@click.option("--output", type=click.Path(path_type=Path), required=True, help="Folder to write.")
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
    "--keep-tokenizer-bos",
    is_flag=True,
    help="Keep a post-processor BOS even though the template writes bos_token (double BOS).",
)
@click.option(
    "--training",
    is_flag=True,
    help="Also write the training variant (the template with {% generation %} markers) as the named "
    "template 'training'.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; write nothing.")
@force_option
@hub_options("--tokenizer")
@click.option(
    "--all",
    "all_families",
    is_flag=True,
    help="Every bundled family on its default base tokenizer, each in OUTPUT/FAMILY.",
)
@json_option
def install_command(
    family: str | None,
    tokenizer: str | None,
    output: Path,
    variant: str | None,
    fmt: str,
    reuse_reserved: bool,
    keep_tokenizer_bos: bool,
    training: bool,
    dry_run: bool,
    force: bool,
    revision: str | None,
    token: str | None,
    all_families: bool,
    as_json: bool,
) -> None:
    """Install FAMILY's template on a tokenizer, registering its control tokens and stop ids."""
    from .. import apply_install, base_tokenizer, get_family, list_families, plan_install
    from ..errors import UsageError

    if all_families:
        if family or tokenizer:
            raise UsageError(
                "--all installs every family on its default base; drop FAMILY and --tokenizer",
                hint="hf-chat-templates install --all --output DIR",
            )
        jobs = [(f, str(base_tokenizer(f.base_tokenizer)), output / f.name) for f in list_families()]
    else:
        if not family:
            raise UsageError("missing FAMILY", hint="hf-chat-templates list")
        fam = get_family(family)
        if not tokenizer:
            raise UsageError(
                "missing --tokenizer",
                hint=f"e.g. --tokenizer $(hf-chat-templates base-tokenizer {fam.base_tokenizer} --output base)",
            )
        jobs = [(fam, tokenizer, output)]
    documents = []
    for fam, src, out in jobs:
        plan = plan_install(
            fam,
            src,
            out,
            variant=None if all_families else variant,
            format=fmt,
            reuse_reserved=reuse_reserved,
            keep_tokenizer_bos=keep_tokenizer_bos,
            training=training,
            force=force,
            revision=revision,
            token=token,
        )
        for warning in plan.warnings:
            warn(f"{fam.name}: {warning}")
        if dry_run:
            documents.append(plan.to_dict())
            if not as_json:
                click.echo(plan.describe())
            continue
        result = apply_install(plan)
        documents.append(result.to_dict())
        if as_json:
            continue
        if all_families:
            grew = f"+{plan.vocabulary_grew} ids" if plan.vocabulary_grew else "vocab unchanged"
            click.echo(
                f"{fam.name:<18} {plan.variant:<9} -> {out}  [{grew}; eos {plan.eos_token[1]}; "
                f"stop ids {list(plan.stop_token_ids)}]"
            )
        else:
            click.echo(plan.describe())
            if result.already_installed:
                click.echo(f"already installed: {out} holds exactly these files; nothing written")
            else:
                click.echo(
                    f"written: {out}"
                    + (f" (previous folder kept at {result.replaced_to})" if result.replaced_to else "")
                )
    if as_json:
        emit_json(documents if all_families else documents[0])
