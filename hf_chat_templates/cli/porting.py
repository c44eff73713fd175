"""`port`: a chat template rewritten so that more engines render it as transformers does, each rewrite proven on
every probe conversation."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .app import PathParam, cli, emit_json, json_option, kwarg_option
from .helptext import environment_epilog


@cli.command("port", epilog=environment_epilog("port"))
@click.argument("source")
@click.option(
    "--output",
    type=PathParam(path_type=Path),
    default=None,
    help="Write the ported template here (a .jinja file; '-' for standard output). Without it, only the report.",
)
@click.option("--engines", default=None, metavar="LIST", help="Engines to port for (default: every profile).")
@kwarg_option("A template keyword the probes render with, e.g. --kwarg enable_thinking=false (JSON values are parsed).")
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
@click.option("--no-diff", is_flag=True, help="Leave out each applied rewrite's text diff.")
@json_option
def port_command(
    source: str,
    output: Path | None,
    engines: str | None,
    kwarg_pairs: tuple[str, ...],
    force: bool,
    no_diff: bool,
    as_json: bool,
) -> None:
    """Rewrite the constructs an engine cannot run or renders otherwise (tags without whitespace control under TGI,
    `tojson(ensure_ascii=False)`, `is sameas`, Python string methods) in the template of SOURCE (a template file,
    tokenizer folder, tokenizer_config.json or GGUF file). Each rewrite is kept only where transformers renders every
    probe byte for byte as before and no engine renders a probe worse; the report says what changed, what could not
    be proven, and what each engine still renders differently. Exit 0 on success, 2 on bad input."""
    from ..conversations.records import parse_kwargs
    from ..errors import OutputExistsError
    from ..outputs import is_stdout, write_file
    from ..verification.port import port_template

    if output is not None and not is_stdout(output) and output.exists() and not force:
        raise OutputExistsError(
            f"{output}: exists", hint="choose another --output, or pass --force to replace it", path=output
        )
    result = port_template(source, engines=engines, kwargs=parse_kwargs(kwarg_pairs))
    if output is not None:
        write_file(output, result.template)
    report = result.to_dict() if as_json else result.describe(diffs=not no_diff)
    to_stderr = output is not None and is_stdout(output)
    if as_json:
        emit_json(report) if not to_stderr else click.echo(str(report), err=True)
    else:
        click.echo(report, err=to_stderr)
        if output is not None and not to_stderr:
            click.echo(
                f"wrote {output}" + ("" if result.changed else " (the template as it was: no rewrite needed or proven)")
            )
    sys.exit(0)
