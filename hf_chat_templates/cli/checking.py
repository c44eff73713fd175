"""`verify`: the named checks on a tokenizer and template, or every bundled family; `--conversations` runs the
per-record checks over a dataset too."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from .app import (
    cli,
    declaration_options,
    emit_json,
    families_option,
    hub_options,
    input_options,
    json_option,
    template_options,
)


@cli.command("verify")
@click.argument("source", required=False)
@template_options("Verify this bundled family's template on SOURCE.", "Verify this template file on SOURCE.")
@click.option(
    "--conversations",
    default=None,
    help="Also check every record of a dataset: a JSONL, JSON or Parquet file, a datasets folder or a Hub dataset "
    "id, in OpenAI (messages), ShareGPT or messages format.",
)
@input_options
@click.option("--only", default=None, help="Comma-separated check ids to run.")
@click.option(
    "--fail-on",
    type=click.Choice(["error", "warning"]),
    default="error",
    show_default=True,
    help="Exit 1 on errors (findings that mistrain or misserve the model), or on warnings too.",
)
@click.option(
    "--training",
    is_flag=True,
    help="The template will be trained on: data it never reads (tools, reasoning, ...) is an error, not a warning.",
)
@click.option(
    "--sanitize",
    is_flag=True,
    help="Content is rendered with sanitize_control_tokens=True: content that still forges a control token fails.",
)
@click.option("--workers", type=int, default=None, help="Worker processes for --conversations.")
@click.option(
    "--all",
    "all_families",
    is_flag=True,
    help="Every bundled family and variant on its default real base tokenizer; exit 1 when a "
    "family's default variant fails.",
)
@hub_options("SOURCE")
@declaration_options
@click.option(
    "--html",
    "html_out",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write a self-contained HTML report: the matrix, and the tokens around every failure.",
)
@json_option
@families_option
def verify_command(
    source: str | None,
    family: str | None,
    variant: str | None,
    template_file: Path | None,
    conversations: str | None,
    only: str | None,
    fail_on: str,
    training: bool,
    sanitize: bool,
    workers: int | None,
    all_families: bool,
    revision: str | None,
    token: str | None,
    kwarg_pairs: tuple[str, ...],
    stop_tokens: tuple[str, ...],
    control_tokens: tuple[str, ...],
    html_out: Path | None,
    as_json: bool,
    **reading: Any,
) -> None:
    """Run the named checks on a tokenizer and template. Exit 1 when a check finds an error (or, with
    --fail-on warning, a warning)."""
    from ..conversations.records import parse_kwargs
    from ..errors import UsageError
    from ..verification.runner import verify_with_context

    checks = [c.strip() for c in only.split(",") if c.strip()] if only else None
    if all_families:
        _refuse_ignored_with_all(
            {
                "SOURCE": source,
                "--family": family,
                "--variant": variant,
                "--template": template_file,
                "--conversations": conversations,
                "--kwarg": kwarg_pairs,
                "--stop-token": stop_tokens,
                "--control-token": control_tokens,
                "--revision": revision,
                "--token": token,
                "--training": training,
                "--sanitize": sanitize,
                "--workers": workers,
            }
        )
        _verify_all(checks, html_out, as_json)
    if workers is not None and conversations is None:
        raise UsageError("--workers is for --conversations; it would be ignored", hint="drop --workers")
    if not source:
        raise UsageError(
            "missing SOURCE (a tokenizer folder or Hub repo id), or --all", hint="hf-chat-templates verify --all"
        )
    kwargs = parse_kwargs(kwarg_pairs)
    report, ctx = verify_with_context(
        source,
        family=family,
        variant=variant,
        template=template_file,
        only=checks,
        revision=revision,
        token=token,
        kwargs=kwargs,
        stop_tokens=stop_tokens or None,
        control_tokens=control_tokens or None,
        training=training,
        sanitize=sanitize,
    )
    if html_out is not None:
        _write_html(html_out, [(report, ctx)])
    dataset = None
    if conversations is not None:
        from ..verification.dataset import verify_conversations

        options: dict[str, Any] = {"family": family, "variant": variant, "template": template_file, "kwargs": kwargs}
        options |= {"revision": revision, "token": token, "workers": workers, "progress": not as_json, "only": checks}
        dataset = verify_conversations(source, conversations, **options, **reading)
    _print_report(report, dataset, as_json)
    failed = not report.passes(fail_on) or (dataset is not None and not dataset.ok)
    sys.exit(1 if failed else 0)


def _refuse_ignored_with_all(given: dict[str, Any]) -> None:
    from ..errors import UsageError

    if ignored := [name for name, value in given.items() if value]:
        raise UsageError(
            f"--all verifies every bundled family on its default tokenizer; {', '.join(ignored)} would be ignored",
            hint="hf-chat-templates verify --all [--only IDS] [--html FILE] [--json]",
        )


def _print_report(report: Any, dataset: Any, as_json: bool) -> None:
    from ..view.report import format_report

    if as_json:
        doc = report.to_dict()
        if dataset is not None:
            doc["conversations"] = dataset.to_dict()
        emit_json(doc)
    else:
        click.echo(format_report(report))
        if dataset is not None:
            click.echo(dataset.describe())


def _verify_all(checks: list[str] | None, html_out: Path | None, as_json: bool) -> None:
    """`verify --all`: every bundled family and variant; exits 1 when a family's default variant fails."""
    from .. import list_families
    from ..verification.runner import verify_all_with_contexts
    from ..view.report import format_matrix

    results = verify_all_with_contexts(only=checks)
    reports = [r for r, _ in results]
    if html_out is not None:
        _write_html(html_out, results)
    if as_json:
        emit_json([r.to_dict() for r in reports])
    else:
        click.echo(format_matrix(reports))
    # The seeds are shipped byte-exact as `upstream` to show what was wrong with them; what `install FAMILY`
    # installs is the default variant, and that is what the exit code answers for.
    defaults = {f.name: f.default_variant for f in list_families()}
    failing = [r for r in reports if not r.ok and defaults.get(r.family or "") == r.variant]
    if not as_json:
        click.echo(
            "default variants: "
            + ("all pass" if not failing else "FAIL: " + ", ".join(f"{r.family}/{r.variant}" for r in failing))
        )
    sys.exit(1 if failing else 0)


def _write_html(path: Path, results: list[Any]) -> None:
    from ..outputs import write_file
    from ..view.report import verification_html

    write_file(path, verification_html(results))
    click.echo(f"report written: {path}", err=True)
