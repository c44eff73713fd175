"""`prepare`: a dataset of conversations into training features."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .app import cli, declaration_options, emit_json, families_option, force_option, json_option, template_options


@cli.command("prepare")
@click.argument("source")
@click.option(
    "--conversations",
    type=click.Path(path_type=Path),
    required=True,
    help='JSONL file of {"messages": [...], "tools": [...]}, one conversation per line.',
)
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    required=True,
    help="Folder to write the dataset to (datasets.load_from_disk reads it).",
)
@click.option("--max-length", type=int, default=None, help="Truncate each conversation to N tokens.")
@click.option("--workers", type=int, default=None, help="Worker processes.")
@template_options(
    "Use this bundled family's template instead of the folder's.", "Use this template file instead of the folder's."
)
@declaration_options
@force_option
@json_option
@families_option
def prepare_command(
    source: str,
    conversations: Path,
    output: Path,
    max_length: int | None,
    workers: int | None,
    family: str | None,
    variant: str | None,
    template_file: Path | None,
    kwarg_pairs: tuple[str, ...],
    stop_tokens: tuple[str, ...],
    control_tokens: tuple[str, ...],
    force: bool,
    as_json: bool,
) -> None:
    """Tokenize a JSONL dataset into input_ids, attention_mask and labels (-100 outside assistant turns)."""
    from .. import prepare
    from ..conversations.records import parse_kwargs

    report = prepare(
        source,
        conversations,
        output,
        family=family,
        variant=variant,
        template=template_file,
        kwargs=parse_kwargs(kwarg_pairs),
        stop_tokens=stop_tokens or None,
        control_tokens=control_tokens or None,
        max_length=max_length,
        workers=workers,
        force=force,
        progress=not as_json,
    )
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(report.describe())
    sys.exit(0 if report.written else 1)
