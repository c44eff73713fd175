"""`diff`: two chat templates, tokenizer folders or GGUF files: the text diff and what changes for the model on
every probe conversation."""

from __future__ import annotations

import sys

import click

from .app import cli, emit_json, json_option, kwarg_option
from .helptext import environment_epilog


@cli.command("diff", epilog=environment_epilog("diff"))
@click.argument("a")
@click.argument("b")
@click.option("--probe", "probes", multiple=True, metavar="ID", help="Compare this probe only (repeatable).")
@kwarg_option("A template keyword both sides render with, e.g. --kwarg enable_thinking=false (JSON values are parsed).")
@click.option("--no-text", is_flag=True, help="Leave out the text diff; show only what changes in the renderings.")
@json_option
def diff_command(
    a: str, b: str, probes: tuple[str, ...], kwarg_pairs: tuple[str, ...], no_text: bool, as_json: bool
) -> None:
    """Compare two templates (template files, tokenizer folders, tokenizer_config.json or GGUF files): the text
    diff, and per probe conversation what the model is shown differently. Exit 0 when every probe renders the
    same, 1 when one differs, 2 on bad input."""
    from ..conversations.records import parse_kwargs
    from ..verification.template_diff import diff_templates

    result = diff_templates(a, b, probes=probes or None, kwargs=parse_kwargs(kwarg_pairs))
    if as_json:
        emit_json(result.to_dict())
    else:
        click.echo(result.describe(text_diff=not no_text))
    sys.exit(0 if result.renders_same else 1)
