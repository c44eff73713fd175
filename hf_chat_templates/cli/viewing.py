"""`view`: a conversation as the model sees it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .app import PathParam, check_outputs, cli, families_option, pass_template_choice, template_options, written
from .helptext import environment_epilog

if TYPE_CHECKING:
    from ..families.source import TemplateChoice


@cli.command("view", epilog=environment_epilog("view"))
@click.argument("source")
@click.option(
    "--messages",
    "messages_file",
    type=PathParam(path_type=Path),
    required=True,
    help='JSON file: a list of messages, or {"messages": [...], "tools": [...]}.',
)
@template_options(
    "Render with this bundled family's template instead of the folder's.",
    "Render with this template file instead of the folder's.",
)
@click.option("--add-generation-prompt", is_flag=True, help="Render as a prompt, ending with the generation prompt.")
@click.option(
    "--diff-with",
    "diff_with",
    default=None,
    metavar="VARIANT|reference",
    help="Align with another variant of the family, or with the official renderer.",
)
@click.option("--html", "html_out", type=PathParam(path_type=Path), default=None, help="Write an HTML page.")
@click.option("--ids", is_flag=True, help="Show each token's id in the terminal.")
@click.option("--width", type=click.IntRange(min=1), default=None, help="Terminal width (default: the terminal's).")
@families_option
@pass_template_choice
def view_command(
    source: str,
    messages_file: Path,
    choice: TemplateChoice,
    add_generation_prompt: bool,
    diff_with: str | None,
    html_out: Path | None,
    ids: bool,
    width: int | None,
) -> None:
    """Show a conversation as the model sees it: tokens, control tokens, whitespace and the assistant mask."""
    from ..outputs import is_stdout, write_file
    from ..view.conversation import view_conversation

    check_outputs({"--html": html_out})
    text, page = view_conversation(
        source,
        messages_file,
        choice,
        add_generation_prompt=add_generation_prompt,
        diff_with=diff_with,
        ids=ids,
        width=width,
        html=html_out is not None,
    )
    if html_out is not None and page is not None:
        write_file(html_out, page)
        written("page", html_out)
    click.echo(text, err=is_stdout(html_out))
