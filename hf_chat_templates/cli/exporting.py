"""`export ollama`: the template translated into the Go template Ollama renders, proved on every probe against
transformers, and written as a Modelfile."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .app import (
    PathParam,
    cli,
    emit_json,
    families_option,
    json_option,
    kwarg_option,
    pass_template_choice,
    template_options,
    token_options,
    written,
)
from .helptext import environment_epilog

if TYPE_CHECKING:
    from ..families.source import TemplateChoice


@cli.group("export")
def export_group() -> None:
    """Write a template for a server that does not run Jinja."""


@export_group.command("ollama", epilog=environment_epilog("export ollama"))
@click.argument("source")
@template_options("Export this bundled family's template.", "Export this template file.")
@click.option(
    "--from",
    "base",
    default=None,
    help="The Modelfile's FROM: a GGUF file, a model folder or an Ollama model (default: SOURCE).",
)
@click.option(
    "--output",
    type=PathParam(path_type=Path),
    default=None,
    help="The Modelfile to write (default: standard output).",
)
@kwarg_option("A template keyword, written into the translation as a constant (JSON values are parsed).")
@token_options(
    "A token that ends an assistant turn (repeatable): a PARAMETER stop line; replaces the family's or inferred.",
    "A control token the template writes (repeatable).",
)
@json_option
@families_option
@pass_template_choice
def export_ollama_command(
    source: str,
    choice: TemplateChoice,
    base: str | None,
    output: Path | None,
    as_json: bool,
) -> None:
    """Translate SOURCE's template (a tokenizer folder or GGUF file; or --family/--template on it) into an Ollama
    Modelfile: FROM, TEMPLATE (a Go template) and a PARAMETER stop line per stop token.

    Every probe verify renders is rendered by the translation as Ollama renders it and must equal transformers'
    rendering byte for byte; otherwise nothing is written and the command exits 1 naming the probe and position.
    A construct Go templates cannot express is refused by name and line (exit 2). Needs Go (`go build`)."""
    from ..publish.ollama import Unproved, export_ollama

    try:
        done = export_ollama(source, choice, base=base)
    except Unproved as err:
        if as_json:
            emit_json(
                {
                    "ok": False,
                    "error": str(err),
                    "findings": [{"probe": f.probe, "message": f.text} for f in err.findings],
                }
            )
        else:
            click.echo(f"error: {err}", err=True)
            if err.hint:
                click.echo(f"hint: {err.hint}", err=True)
        sys.exit(1)
    text = done.text
    if output is not None:
        output.write_text(text, encoding="utf-8")
        written("Modelfile", output)
    elif not as_json:
        click.echo(text, nl=False)
    if as_json:
        emit_json(
            {
                "ok": True,
                "modelfile": text if output is None else str(output),
                "identical": done.identical,
                "left_out": done.left_out,
                "stops": list(done.modelfile.stops),
                "notes": done.notes,
            }
        )
    for text_note in done.notes:
        click.echo(f"note: {text_note}", err=True)
    note = f", {len(done.left_out)} left out (requests Ollama cannot send)" if done.left_out else ""
    click.echo(f"proved: the Go template renders {done.identical} probes exactly as transformers{note}", err=True)
