"""`verify`: the named checks on a tokenizer and template, or every bundled family; `--conversations` runs the
per-record checks over a dataset too."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .app import (
    PathParam,
    check_outputs,
    cli,
    declaration_options,
    emit_json,
    families_option,
    hub_options,
    input_options,
    json_option,
    pass_template_choice,
    progress_wanted,
    refuse_verbose_json,
    template_options,
    unwritten_option,
    write_html,
    written,
)
from .gguf_files import against_option
from .helptext import verify_epilog
from .ollama_profile import ollama_template

if TYPE_CHECKING:
    from ..families.source import TemplateChoice

# The options --all cannot honour (it verifies every bundled family on its default tokenizer): parameter -> option.
NOT_WITH_ALL = {
    "source": "SOURCE",
    "family": "--family",
    "variant": "--variant",
    "template_file": "--template",
    "conversations": "--conversations",
    "kwarg_pairs": "--kwarg",
    "stop_tokens": "--stop-token",
    "control_tokens": "--control-token",
    "allow_unwritten_tokens": "--allow-unwritten-token",
    "revision": "--revision",
    "token": "--token",
    "training": "--training",
    "sanitize": "--sanitize",
    "workers": "--workers",
    "ollama_modelfile": "--ollama-modelfile",
    "sarif_out": "--sarif",
    "baseline": "--baseline",
    "verbose": "--verbose",
}


@cli.command("verify", epilog=verify_epilog())
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
    "--engines",
    default=None,
    help="Comma-separated engine profiles engine-parity compares with transformers: llama.cpp, tgi, "
    "transformers.js, vllm, ollama (default: every one; ollama only with --ollama-modelfile, or for a GGUF file the "
    "Go template Ollama would pick for it, as it renders a Go template; a profile that cannot run here is skipped "
    "with its reason).",
)
@click.option(
    "--ollama-modelfile",
    type=PathParam(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="An Ollama Modelfile whose TEMPLATE (a Go template) engine-parity renders as Ollama does, as the ollama "
    "profile (needs go). For a GGUF file it replaces the template Ollama would pick.",
)
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
    help="The template will be trained on: data it never reads (tools, reasoning, ...) is an error, not a warning; "
    "with --conversations, only fields the data has.",
)
@click.option(
    "--sanitize",
    is_flag=True,
    help="Content is rendered with sanitize_control_tokens=True: content that still forges a control token fails.",
)
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Worker processes for --conversations.")
@against_option
@click.option(
    "--all",
    "all_families",
    is_flag=True,
    help="Every bundled family and variant on its default real base tokenizer; exit 1 when a "
    "family's default variant fails.",
)
@hub_options("SOURCE")
@declaration_options
@unwritten_option
@click.option(
    "--html",
    "html_out",
    type=PathParam(path_type=Path),
    default=None,
    help="Also write a self-contained HTML report: the matrix, and the tokens around every failure.",
)
@click.option(
    "--sarif",
    "sarif_out",
    type=PathParam(path_type=Path),
    default=None,
    help="Also write the findings as SARIF 2.1.0 (for code-scanning interfaces); template-safety findings carry "
    "their line and column.",
)
@click.option(
    "--baseline",
    type=PathParam(path_type=Path),
    default=None,
    help='Accepted template-safety findings: JSON {"accepted": [{"rule", "fingerprint" or "line", "reason"}]}.',
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Text output: every finding of each check, each with its own fix (default: the first, and how many more).",
)
@json_option
@families_option
@pass_template_choice
def verify_command(
    source: str | None,
    choice: TemplateChoice,
    conversations: str | None,
    only: str | None,
    engines: str | None,
    ollama_modelfile: Path | None,
    fail_on: str,
    training: bool,
    sanitize: bool,
    workers: int | None,
    all_families: bool,
    revision: str | None,
    token: str | None,
    html_out: Path | None,
    sarif_out: Path | None,
    baseline: Path | None,
    verbose: bool,
    as_json: bool,
    **reading: Any,
) -> None:
    """Run the named checks on a tokenizer and template. Exit 1 on an error (--fail-on warning: a warning too)."""
    from ..verification.runner import verify_with_context

    checks = [c.strip() for c in only.split(",") if c.strip()] if only is not None else None
    if checks == []:
        raise click.BadParameter(f"{only!r} names no check", param_hint="'--only'")
    text_to_stderr = check_outputs({"--html": html_out, "--sarif": sarif_out}, as_json)
    if all_families:
        given = click.get_current_context().params  # every option as given, the template choice's too
        _refuse_ignored_with_all({flag: given[name] for name, flag in NOT_WITH_ALL.items()})
        _verify_all(checks, html_out, as_json, engines)
    source = _given_source(source, workers, conversations)
    refuse_verbose_json(verbose, as_json)
    accepted = _read_baseline(baseline)
    dataset = None
    if conversations is not None:  # first: what the data carries decides whether a field never read loses anything
        from ..verification.dataset import verify_conversations

        options: dict[str, Any] = {"revision": revision, "token": token, "workers": workers}
        options |= {"progress": progress_wanted(as_json), "only": checks}
        dataset = verify_conversations(source, conversations, choice, **options, **reading)
    with ollama_template(ollama_modelfile):
        report, ctx = verify_with_context(
            source,
            choice,
            only=checks,
            revision=revision,
            token=token,
            training=training,
            sanitize=sanitize,
            data_fields=dataset.fields if dataset is not None else None,
            engines=engines,
        )
    report = _safety_outputs(report, ctx, accepted, sarif_out, choice.template_file())
    if html_out is not None:
        write_html(html_out, [(report, ctx)])
    _print_report(report, dataset, as_json, verbose, text_to_stderr)
    failed = not report.passes(fail_on) or (dataset is not None and not dataset.ok)
    sys.exit(1 if failed else 0)


def _read_baseline(path: Path | None) -> Any:
    from ..verification.sarif import read_baseline

    return read_baseline(path) if path is not None else None


def _safety_outputs(report: Any, ctx: Any, accepted: Any, sarif_out: Path | None, template_file: Path | None) -> Any:
    """The report with the baseline's accepted findings taken out, and its SARIF log written when asked."""
    from ..verification.sarif import apply_baseline, template_artifact, write_sarif

    if accepted is not None:
        report = apply_baseline(report, accepted)
    if sarif_out is not None:
        write_sarif(sarif_out, report, template_artifact(ctx, template_file))
        written("SARIF", sarif_out)
    return report


def _given_source(source: str | None, workers: int | None, conversations: str | None) -> str:
    """SOURCE, once the options given make sense without --all."""
    from ..errors import UsageError

    if workers is not None and conversations is None:
        raise UsageError("--workers is for --conversations; it would be ignored", hint="drop --workers")
    if not source:
        raise UsageError(
            "missing SOURCE (a tokenizer folder or Hub repo id), or --all", hint="hf-chat-templates verify --all"
        )
    return source


def _refuse_ignored_with_all(given: dict[str, Any]) -> None:
    from ..errors import UsageError

    if ignored := [name for name, value in given.items() if value]:
        raise UsageError(
            f"--all verifies every bundled family on its default tokenizer; {', '.join(ignored)} would be ignored",
            hint="hf-chat-templates verify --all [--only IDS] [--html FILE] [--json]",
        )


def _print_report(report: Any, dataset: Any, as_json: bool, verbose: bool = False, to_stderr: bool = False) -> None:
    from ..view.report import format_report

    if as_json:
        doc = report.to_dict()
        if dataset is not None:
            doc["conversations"] = dataset.to_dict()
        emit_json(doc)
    else:
        click.echo(format_report(report, verbose=verbose), err=to_stderr)
        if dataset is not None:
            click.echo(dataset.describe(), err=to_stderr)


def variant_progress(as_json: bool) -> Callable[[Any, float], None] | None:
    """`verify --all`'s progress: a line on stderr as each family/variant is done (`[3/8] gemma3-tools/corrected:
    pass (12 s)`), when stderr is a terminal or HF_CHAT_TEMPLATES_PROGRESS=1; never with --json."""
    from .. import list_families

    if not progress_wanted(as_json):
        return None
    total = sum(len(f.variants) for f in list_families())
    done = [0]

    def report(result: Any, seconds: float) -> None:
        done[0] += 1
        worst = next((s for s in ("fail", "warn") if any(c.status == s for c in result.checks)), "pass")
        click.echo(f"[{done[0]}/{total}] {result.family}/{result.variant}: {worst} ({seconds:.0f} s)", err=True)

    return report


def _verify_all(checks: list[str] | None, html_out: Path | None, as_json: bool, engines: str | None = None) -> None:
    """`verify --all`: every bundled family and variant; exits 1 when a family's default variant fails."""
    from .. import list_families
    from ..verification.runner import verify_all_with_contexts
    from ..view.report import format_matrix

    results = verify_all_with_contexts(only=checks, engines=engines, on_result=variant_progress(as_json))
    reports = [r for r, _ in results]
    if html_out is not None:
        write_html(html_out, results)
    if as_json:
        emit_json([r.to_dict() for r in reports])
    else:
        click.echo(format_matrix(reports), err=html_out is not None and str(html_out) == "-")
    # The seeds are shipped byte-exact as `upstream` to show what was wrong with them; what `install FAMILY`
    # installs is the default variant, and that is what the exit code answers for.
    defaults = {f.name: f.default_variant for f in list_families()}
    failing = [r for r in reports if not r.ok and defaults.get(r.family or "") == r.variant]
    if not as_json:
        click.echo(
            "default variants: "
            + ("all pass" if not failing else "FAIL: " + ", ".join(f"{r.family}/{r.variant}" for r in failing)),
            err=html_out is not None and str(html_out) == "-",
        )
    sys.exit(1 if failing else 0)
