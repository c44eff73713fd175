"""`prepare`: a dataset of conversations into training features."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .app import (
    PathParam,
    cli,
    declaration_options,
    emit_json,
    families_option,
    force_option,
    input_options,
    json_option,
    pass_template_choice,
    progress_wanted,
    template_options,
    unwritten_option,
)
from .helptext import environment_epilog

if TYPE_CHECKING:
    from ..families.source import TemplateChoice

MAX_TOKENS = 2**31 - 1  # a token count Arrow's int32 offsets and numpy's default ints hold


@cli.command("prepare", epilog=environment_epilog("prepare"))
@click.argument("source")
@click.option(
    "--conversations",
    required=True,
    help="Conversations: a JSONL, JSON or Parquet file, a datasets folder or a Hub dataset id, in OpenAI "
    "(messages), ShareGPT (conversations with from/value) or messages format.",
)
@input_options
@click.option(
    "--output",
    type=PathParam(path_type=Path),
    required=True,
    help="Folder to write the dataset to (datasets.load_from_disk reads it).",
)
@click.option(
    "--max-length", type=click.IntRange(max=MAX_TOKENS), default=None, help="Truncate each conversation to N tokens."
)
@click.option(
    "--train-on",
    type=click.Choice(["all", "last", "weighted"]),
    default="all",
    show_default=True,
    help="Assistant turns trained: every one, the last, or those whose message has weight 1 / train true.",
)
@click.option(
    "--allow-control-tokens-in-content",
    is_flag=True,
    help="Let content that spells a control token become that token (default: encoded as text).",
)
@click.option(
    "--pack",
    type=click.IntRange(max=MAX_TOKENS),
    default=None,
    metavar="SEQ_LEN",
    help="Pack rows into sequences of at most SEQ_LEN tokens (position_ids restart per example, as TRL's "
    "padding-free training reads them).",
)
@click.option(
    "--per-turn",
    is_flag=True,
    help="One example per assistant turn: the conversation cut after it, only that turn trained (for templates "
    "that rewrite earlier turns once more follow, such as Qwen3's and DeepSeek-R1's reasoning).",
)
@click.option(
    "--exact",
    is_flag=True,
    help="No fast path: each record rendered by transformers' template and encoded whole by the tokenizer (the "
    "reference the fast paths are checked against; slower).",
)
@click.option(
    "--check-every",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    metavar="N",
    help="Through the run, one record in N (and the first ones, and each new shape's first) goes through the fast "
    "paths and the plain path both; a difference turns that fast path off for the rest of the run.",
)
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Worker processes.")
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where batches run: this machine, or a Ray cluster (JSONL or Parquet files, or a folder of them; "
    "pip install 'hf-chat-templates[ray]').",
)
@click.option(
    "--ray-address",
    default=None,
    help="The Ray cluster to join ('auto': the one running on this machine); default: start a local one.",
)
@click.option(
    "--num-cpus", type=click.IntRange(min=1), default=None, help="CPUs to use on Ray (default: all of the cluster's)."
)
@template_options(
    "Use this bundled family's template instead of the folder's.", "Use this template file instead of the folder's."
)
@declaration_options
@unwritten_option
@force_option
@json_option
@families_option
@pass_template_choice
def prepare_command(
    source: str,
    conversations: str,
    input_format: str,
    messages_column: str | None,
    tools_column: str,
    split: str | None,
    max_skipped: str,
    output: Path,
    max_length: int | None,
    train_on: str,
    allow_control_tokens_in_content: bool,
    pack: int | None,
    per_turn: bool,
    exact: bool,
    check_every: int,
    workers: int | None,
    engine: str,
    ray_address: str | None,
    num_cpus: int | None,
    choice: TemplateChoice,
    force: bool,
    as_json: bool,
) -> None:
    """Tokenize a dataset of conversations into input_ids, attention_mask and labels (-100 outside the trained
    assistant turns). Exit 1 when more records cannot be read, normalized or rendered than --max-skipped allows
    (nothing is written then), or when no record has anything to train."""
    from .. import prepare
    from ..training.distributed import check_engine, prepare_on_ray

    check_engine(engine, workers, ray_address, num_cpus)
    if engine == "ray":
        if split is not None:
            raise click.UsageError("--split reads a datasets folder or Hub dataset, which --engine ray does not read")
        run = functools.partial(
            prepare_on_ray, address=ray_address, num_cpus=num_cpus, progress=progress_wanted(as_json)
        )
    else:
        run = functools.partial(prepare, workers=workers, progress=progress_wanted(as_json), split=split)
    report = run(
        source,
        conversations,
        output,
        choice,
        max_length=max_length,
        force=force,
        input_format=input_format,
        messages_column=messages_column,
        tools_column=tools_column,
        max_skipped=max_skipped,
        train_on=train_on,
        allow_control_tokens_in_content=allow_control_tokens_in_content,
        pack=pack,
        exact=exact,
        check_every=check_every,
        per_turn=per_turn,
    )
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(report.describe())
    sys.exit(0 if report.ok else 1)
