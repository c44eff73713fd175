"""`list`, `show` and `base-tokenizer`: what is bundled, and the real tokenizers built offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .app import PathParam, cli, emit_json, families_option, force_option, hub_options, json_option, token_options
from .helptext import environment_epilog


@cli.command("list", epilog=environment_epilog("list"))
@json_option
@families_option
def list_command(as_json: bool) -> None:
    """List the bundled families, their variants, control tokens and stop tokens."""
    from .. import list_families

    families = list_families()
    if as_json:
        emit_json([_family_dict(f) for f in families])
        return
    for fam in families:
        click.echo(f"{fam.name}  (base tokenizer: {fam.base_tokenizer})")
        click.echo(f"  {fam.description}")
        for var in fam.variants.values():
            default = " [default]" if var.name == fam.default_variant else ""
            click.echo(f"  variant {var.name}{default}")
            click.echo(f"    control tokens: {' '.join(var.control_tokens)}")
            click.echo(f"    stop tokens:    {' '.join(var.stop_tokens)}")


def _family_dict(fam: Any) -> dict[str, Any]:
    return {
        "name": fam.name,
        "description": fam.description,
        "default_variant": fam.default_variant,
        "base_tokenizer": fam.base_tokenizer,
        "template_writes_bos": fam.template_writes_bos,
        "pad_tokens": list(fam.pad_tokens),
        "variants": {
            v.name: {
                "template": v.template_path.name,
                "sha256": v.sha256,
                "description": v.description,
                "control_tokens": list(v.control_tokens),
                "stop_tokens": list(v.stop_tokens),
                "kwargs": {
                    k.name: ({"default": k.default} if k.has_default else {}) | {"doc": k.doc} for k in v.kwargs
                },
                "provenance": v.provenance,
            }
            for v in fam.variants.values()
        },
    }


@cli.command("show", epilog=environment_epilog("show"))
@click.argument("family")
@click.option("--variant", default=None, help="Variant name (default: the family's default variant).")
@click.option("--template", "show_template", is_flag=True, help="Print the template text only.")
@json_option
@families_option
def show_command(family: str, variant: str | None, show_template: bool, as_json: bool) -> None:
    """Show one family: its config, or with --template the template itself."""
    from .. import get_family

    fam = get_family(family)
    var = fam.variant(variant)
    if show_template:
        click.echo(var.template, nl=False)
        return
    info = _family_dict(fam)
    info["variants"] = {var.name: info["variants"][var.name]}
    if as_json:
        emit_json(info)
        return
    v = info["variants"][var.name]
    click.echo(f"{fam.name} / {var.name}: {v['description']}")
    click.echo(f"  template:       {fam.directory / v['template']}  (sha256 {v['sha256']})")
    click.echo(f"  control tokens: {' '.join(v['control_tokens'])}")
    click.echo(f"  stop tokens:    {' '.join(v['stop_tokens'])}")
    click.echo(f"  writes BOS:     {fam.template_writes_bos}")
    click.echo(f"  base tokenizer: {fam.base_tokenizer}")
    for name, kw in v["kwargs"].items():
        default = f" (default {kw['default']!r})" if "default" in kw else ""
        click.echo(f"  kwarg {name}{default}: {kw['doc']}")
    for key, value in v["provenance"].items():
        click.echo(f"  provenance {key}: {value}")


@cli.command("base-tokenizer", epilog=environment_epilog("base-tokenizer"))
@click.argument("name")
@click.option(
    "--output",
    type=PathParam(path_type=Path),
    default=None,
    help="Copy the tokenizer folder here (default: print the cached folder's path).",
)
@click.option(
    "--add-bos/--no-add-bos",
    default=None,
    help="Whether tokenizer(text) prepends BOS (default: as the model's Hub tokenizer does).",
)
@click.option("--force", is_flag=True, help="Replace a non-empty --output.")
def base_tokenizer_command(name: str, output: Path | None, add_bos: bool | None, force: bool) -> None:
    """Build a real tokenizer offline from installed packages: llama3, o200k-harmony, mistral-v3-sp.

    Prints the folder's path on stdout."""
    from .. import base_tokenizer
    from ..tokenizer.base import write_base_tokenizer

    if output is None:
        click.echo(str(base_tokenizer(name, add_bos=add_bos)))
    else:
        click.echo(str(write_base_tokenizer(name, output, add_bos=add_bos, force=force)))


@cli.group("family")
def family_group() -> None:
    """Families of your own: a folder with a family.toml and templates, read with --families DIR."""


@family_group.command("init", epilog=environment_epilog("family init"))
@click.argument("name")
@click.option(
    "--template",
    "template_file",
    type=PathParam(path_type=Path),
    required=True,
    help="The template file the family holds (copied byte for byte).",
)
@click.option("--tokenizer", required=True, help="The tokenizer its tokens are inferred on: a folder or Hub repo id.")
@click.option(
    "--output",
    type=PathParam(path_type=Path),
    required=True,
    help="The folder of families to write NAME into (then: --families OUTPUT).",
)
@token_options(
    "A token that ends an assistant turn (repeatable); else inferred.",
    "A control token the template writes (repeatable); the others are inferred.",
)
@force_option
@hub_options("--tokenizer")
@json_option
def family_init_command(
    name: str,
    template_file: Path,
    tokenizer: str,
    output: Path,
    stop_tokens: tuple[str, ...],
    control_tokens: tuple[str, ...],
    force: bool,
    revision: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Write a family folder OUTPUT/NAME for your own template, with its tokens inferred (or declared) for review."""
    from ..families.scaffold import init_family

    family = init_family(
        name,
        template_file,
        tokenizer,
        output,
        stop_tokens=stop_tokens or None,
        control_tokens=control_tokens or None,
        force=force,
        revision=revision,
        token=token,
    )
    if as_json:
        emit_json(_family_dict(family))
        return
    variant = family.variant()
    click.echo(f"written: {family.directory}")
    click.echo(f"  control tokens: {' '.join(variant.control_tokens)}")
    click.echo(f"  stop tokens:    {' '.join(variant.stop_tokens)}")
    click.echo(
        f"review {family.directory / 'family.toml'}, then: hf-chat-templates install {name} "
        f"--families {output} --tokenizer SRC --output DIR"
    )
