"""The `hf-chat-templates` command: parse arguments, call the library, format, pick the exit code.

Exit codes: 0 success, 1 verification found failures, 2 usage, input or environment error.
Errors print what failed and what to do, without a traceback unless HF_CHAT_TEMPLATES_DEBUG is set.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from .errors import HfChatTemplatesError

DEBUG_ENV = "HF_CHAT_TEMPLATES_DEBUG"


def _emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, ensure_ascii=False))


def _warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="hf-chat-templates")
def cli() -> None:
    """Install, verify and publish chat templates on Hugging Face tokenizers."""


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def list_command(as_json: bool) -> None:
    """List the bundled families, their variants, control tokens and stop tokens."""
    from .registry import list_families

    families = list_families()
    if as_json:
        _emit_json([_family_dict(f) for f in families])
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
                "kwargs": {k.name: ({"default": k.default} if k.has_default else {}) | {"doc": k.doc} for k in v.kwargs},
                "provenance": v.provenance,
            }
            for v in fam.variants.values()
        },
    }


@cli.command("show")
@click.argument("family")
@click.option("--variant", default=None, help="Variant name (default: the family's default variant).")
@click.option("--template", "show_template", is_flag=True, help="Print the template text only.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def show_command(family: str, variant: str | None, show_template: bool, as_json: bool) -> None:
    """Show one family: its config, or with --template the template itself."""
    from .registry import get_family

    fam = get_family(family)
    var = fam.variant(variant)
    if show_template:
        click.echo(var.template, nl=False)
        return
    info = _family_dict(fam)
    info["variants"] = {var.name: info["variants"][var.name]}
    if as_json:
        _emit_json(info)
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


@cli.command("install")
@click.argument("family", required=False)
@click.option("--tokenizer", "tokenizer", help="Source tokenizer: a local folder or a Hub repo id.")
@click.option("--output", type=click.Path(path_type=Path), required=True, help="Folder to write.")
@click.option("--variant", default=None, help="Template variant (default: the family's default).")
@click.option("--format", "fmt", type=click.Choice(["both", "jinja", "config"]), default="both", show_default=True,
              help="Write chat_template.jinja, the tokenizer_config.json key, or both.")
@click.option("--reuse-reserved", is_flag=True, help="Write new control tokens over unused reserved slots.")
@click.option("--keep-tokenizer-bos", is_flag=True,
              help="Keep a post-processor BOS even though the template writes bos_token (double BOS).")
@click.option("--training", is_flag=True,
              help="Also write the training variant (the template with {% generation %} markers) as the named "
                   "template 'training'.")
@click.option("--dry-run", is_flag=True, help="Print the plan; write nothing.")
@click.option("--force", is_flag=True, help="Replace a non-empty --output (the old one is kept beside it).")
@click.option("--revision", default=None, help="Hub revision when --tokenizer is a repo id.")
@click.option("--token", default=None, help="Hub token (default: HF_TOKEN or your login).")
@click.option("--all", "all_families", is_flag=True,
              help="Every bundled family on its default base tokenizer, each in OUTPUT/FAMILY.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
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
    from .base_tokenizers import base_tokenizer
    from .errors import UsageError
    from .install import apply_install, plan_install
    from .registry import get_family, list_families

    if all_families:
        if family or tokenizer:
            raise UsageError("--all installs every family on its default base; drop FAMILY and --tokenizer",
                             hint="hf-chat-templates install --all --output DIR")
        jobs = [(f, str(base_tokenizer(f.base_tokenizer)), output / f.name) for f in list_families()]
    else:
        if not family:
            raise UsageError("missing FAMILY", hint="hf-chat-templates list")
        fam = get_family(family)
        if not tokenizer:
            raise UsageError("missing --tokenizer", hint=f"e.g. --tokenizer $(hf-chat-templates base-tokenizer "
                                                          f"{fam.base_tokenizer} --output base)")
        jobs = [(fam, tokenizer, output)]
    documents = []
    for fam, src, out in jobs:
        plan = plan_install(fam, src, out, variant=None if all_families else variant, format=fmt,
                            reuse_reserved=reuse_reserved, keep_tokenizer_bos=keep_tokenizer_bos, training=training,
                            force=force, revision=revision, token=token)
        for warning in plan.warnings:
            _warn(f"{fam.name}: {warning}")
        if dry_run:
            documents.append(plan.to_dict())
            if not as_json:
                click.echo(plan.describe())
            continue
        result = apply_install(plan, force=force)
        documents.append(result.to_dict())
        if as_json:
            continue
        if all_families:
            grew = f"+{plan.vocabulary_grew} ids" if plan.vocabulary_grew else "vocab unchanged"
            click.echo(f"{fam.name:<18} {plan.variant:<9} -> {out}  [{grew}; eos {plan.eos_token[1]}; "
                       f"stop ids {list(plan.stop_token_ids)}]")
        else:
            click.echo(plan.describe())
            if result.already_installed:
                click.echo(f"already installed: {out} holds exactly these files; nothing written")
            else:
                click.echo(f"written: {out}" + (f" (previous folder kept at {result.replaced_to})"
                                                 if result.replaced_to else ""))
    if as_json:
        _emit_json(documents if all_families else documents[0])


@cli.command("verify")
@click.argument("source", required=False)
@click.option("--family", default=None, help="Verify this bundled family's template on SOURCE.")
@click.option("--variant", default=None, help="The family's variant (default: its default variant).")
@click.option("--template", "template_file", type=click.Path(path_type=Path), default=None,
              help="Verify this template file on SOURCE.")
@click.option("--conversations", type=click.Path(path_type=Path), default=None,
              help="Also check every record of a JSONL file of {\"messages\": [...], \"tools\": [...]}.")
@click.option("--only", default=None, help="Comma-separated check ids to run.")
@click.option("--workers", type=int, default=None, help="Worker processes for --conversations.")
@click.option("--all", "all_families", is_flag=True,
              help="Every bundled family and variant on its default real base tokenizer; exit 1 when a "
                   "family's default variant fails.")
@click.option("--revision", default=None, help="Hub revision when SOURCE is a repo id.")
@click.option("--token", default=None, help="Hub token (default: HF_TOKEN or your login).")
@click.option("--html", "html_out", type=click.Path(path_type=Path), default=None,
              help="Also write a self-contained HTML report: the matrix, and the tokens around every failure.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def verify_command(source: str | None, family: str | None, variant: str | None, template_file: Path | None,
                   conversations: Path | None, only: str | None, workers: int | None, all_families: bool,
                   revision: str | None, token: str | None, html_out: Path | None, as_json: bool) -> None:
    """Run the named checks on a tokenizer and template. Exit 1 when a check fails."""
    from .errors import UsageError
    from .registry import list_families
    from .report import format_matrix, format_report
    from .verify import verify_all_with_contexts, verify_with_context

    checks = [c.strip() for c in only.split(",") if c.strip()] if only else None
    if all_families:
        if source or family or template_file:
            raise UsageError("--all verifies every bundled family; drop SOURCE, --family and --template",
                             hint="hf-chat-templates verify --all")
        results = verify_all_with_contexts(only=checks)
        reports = [r for r, _ in results]
        if html_out is not None:
            _write_html(html_out, results)
        if as_json:
            _emit_json([r.to_dict() for r in reports])
        else:
            click.echo(format_matrix(reports))
        # The seeds are shipped byte-exact as `upstream` to show what was wrong with them; what `install FAMILY`
        # installs is the default variant, and that is what the exit code answers for.
        defaults = {f.name: f.default_variant for f in list_families()}
        failing = [r for r in reports if not r.ok and defaults.get(r.family or "") == r.variant]
        if not as_json:
            click.echo("default variants: " + ("all pass" if not failing else
                       "FAIL: " + ", ".join(f"{r.family}/{r.variant}" for r in failing)))
        sys.exit(1 if failing else 0)
    if not source:
        raise UsageError("missing SOURCE (a tokenizer folder or Hub repo id), or --all",
                         hint="hf-chat-templates verify --all")
    report, ctx = verify_with_context(source, family=family, variant=variant, template=template_file, only=checks,
                                      revision=revision, token=token)
    if html_out is not None:
        _write_html(html_out, [(report, ctx)])
    dataset = None
    if conversations is not None:
        from .dataset import verify_conversations

        dataset = verify_conversations(source, conversations, family=family, variant=variant,
                                       template=template_file, workers=workers, progress=not as_json)
    if as_json:
        doc = report.to_dict()
        if dataset is not None:
            doc["conversations"] = dataset.to_dict()
        _emit_json(doc)
    else:
        click.echo(format_report(report))
        if dataset is not None:
            click.echo(dataset.describe())
    failed = not report.ok or (dataset is not None and not dataset.ok)
    sys.exit(1 if failed else 0)


def _write_html(path: Path, results: list) -> None:  # type: ignore[type-arg]
    from .view import verification_html

    _write_text(path, verification_html(results))
    click.echo(f"report written: {path}", err=True)


def _write_text(path: Path, text: str) -> None:
    """Write a file whole or not at all (a temporary file beside it, then a rename)."""
    import tempfile

    from .errors import UsageError

    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{path}: is a folder", hint="give a file name such as report.html")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; the report is an ordinary file
        os.replace(tmp, path)
    except OSError as err:
        raise UsageError(f"{path}: cannot write ({err.strerror or err})", hint="choose a writable path") from None


@cli.command("view")
@click.argument("source")
@click.option("--messages", "messages_file", type=click.Path(path_type=Path), required=True,
              help="JSON file: a list of messages, or {\"messages\": [...], \"tools\": [...]}.")
@click.option("--family", default=None, help="Render with this bundled family's template instead of the folder's.")
@click.option("--variant", default=None, help="The family's variant (default: its default variant).")
@click.option("--template", "template_file", type=click.Path(path_type=Path), default=None,
              help="Render with this template file instead of the folder's.")
@click.option("--add-generation-prompt", is_flag=True, help="Render as a prompt, ending with the generation prompt.")
@click.option("--diff-with", "diff_with", default=None, metavar="VARIANT|reference",
              help="Align with another variant of the family, or with the official renderer.")
@click.option("--html", "html_out", type=click.Path(path_type=Path), default=None, help="Write an HTML page.")
@click.option("--ids", is_flag=True, help="Show each token's id in the terminal.")
@click.option("--width", type=int, default=None, help="Terminal width (default: the terminal's).")
def view_command(source: str, messages_file: Path, family: str | None, variant: str | None,
                 template_file: Path | None, add_generation_prompt: bool, diff_with: str | None,
                 html_out: Path | None, ids: bool, width: int | None) -> None:
    """Show a conversation as the model sees it: tokens, control tokens, whitespace and the assistant mask."""
    from .view import view_conversation

    text, page = view_conversation(source, messages_file, family=family, variant=variant, template=template_file,
                                   add_generation_prompt=add_generation_prompt, diff_with=diff_with, ids=ids,
                                   width=width, html=html_out is not None)
    if html_out is not None and page is not None:
        _write_text(html_out, page)
        click.echo(f"written: {html_out}", err=True)
    click.echo(text)


@cli.command("prepare")
@click.argument("source")
@click.option("--conversations", type=click.Path(path_type=Path), required=True,
              help="JSONL file of {\"messages\": [...], \"tools\": [...]}, one conversation per line.")
@click.option("--output", type=click.Path(path_type=Path), required=True,
              help="Folder to write the dataset to (datasets.load_from_disk reads it).")
@click.option("--max-length", type=int, default=None, help="Truncate each conversation to N tokens.")
@click.option("--workers", type=int, default=None, help="Worker processes.")
@click.option("--family", default=None, help="Use this bundled family's template instead of the folder's.")
@click.option("--variant", default=None, help="The family's variant (default: its default variant).")
@click.option("--template", "template_file", type=click.Path(path_type=Path), default=None,
              help="Use this template file instead of the folder's.")
@click.option("--kwarg", "kwarg_pairs", multiple=True, metavar="NAME=VALUE",
              help="A template keyword, e.g. --kwarg date_string='26 Jul 2024' (JSON values are parsed).")
@click.option("--force", is_flag=True, help="Replace a non-empty --output (the old one is kept beside it).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def prepare_command(source: str, conversations: Path, output: Path, max_length: int | None, workers: int | None,
                    family: str | None, variant: str | None, template_file: Path | None, kwarg_pairs: tuple[str, ...],
                    force: bool, as_json: bool) -> None:
    """Tokenize a JSONL dataset into input_ids, attention_mask and labels (-100 outside assistant turns)."""
    from .prepare import parse_kwargs, prepare

    report = prepare(source, conversations, output, family=family, variant=variant, template=template_file,
                     kwargs=parse_kwargs(kwarg_pairs), max_length=max_length, workers=workers, force=force,
                     progress=not as_json)
    if as_json:
        _emit_json(report.to_dict())
    else:
        click.echo(report.describe())
    sys.exit(0 if report.written else 1)


@cli.command("push")
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--repo-id", required=True, help="The Hub repo, e.g. org/model.")
@click.option("--revision", default=None, help="Branch to open the pull request against (default: main).")
@click.option("--to-main", is_flag=True, help="Commit to the branch directly instead of opening a pull request.")
@click.option("--commit-message", default=None, help="Commit title (default: names the family and variant).")
@click.option("--token", default=None, help="Hub token (default: HF_TOKEN or your login). Never printed.")
@click.option("--private", is_flag=True, help="Create the repo as private when it does not exist.")
@click.option("--skip-verify", is_flag=True, help="Push even if verify fails.")
@click.option("--dry-run", is_flag=True, help="Print the plan (added/changed/unchanged files); upload nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def push_command(folder: Path, repo_id: str, revision: str | None, to_main: bool, commit_message: str | None,
                 token: str | None, private: bool, skip_verify: bool, dry_run: bool, as_json: bool) -> None:
    """Verify FOLDER, then publish its tokenizer files to the Hub as a pull request."""
    from .push import VerificationFailed, push

    try:
        result = push(folder, repo_id, revision=revision, to_main=to_main, commit_message=commit_message,
                      token=token, private=private, skip_verify=skip_verify, dry_run=dry_run)
    except VerificationFailed as err:
        if as_json:
            _emit_json({"pushed": False, "verification": err.report.to_dict()})
        else:
            from .report import format_report

            click.echo(format_report(err.report))
        click.echo(f"error: {err}", err=True)
        if err.hint:
            click.echo(f"  to fix: {err.hint}", err=True)
        sys.exit(1)
    if as_json:
        _emit_json({"pushed": not dry_run and bool(result.plan.uploads), **result.to_dict()})
        return
    click.echo(result.plan.describe())
    if dry_run:
        click.echo("dry run: nothing uploaded")
    elif not result.plan.uploads:
        click.echo("nothing to push: the remote already has these files")
    else:
        click.echo(f"pull request: {result.pull_request_url}" if result.pull_request_url
                   else f"commit: {result.commit_url}")


@cli.command("base-tokenizer")
@click.argument("name")
@click.option("--output", type=click.Path(path_type=Path), default=None,
              help="Copy the tokenizer folder here (default: print the cached folder's path).")
@click.option("--add-bos/--no-add-bos", default=None,
              help="Whether tokenizer(text) prepends BOS (default: as the model's Hub tokenizer does).")
@click.option("--force", is_flag=True, help="Replace a non-empty --output.")
def base_tokenizer_command(name: str, output: Path | None, add_bos: bool | None, force: bool) -> None:
    """Build a real tokenizer offline from installed packages: llama3, o200k-harmony, mistral-v3-sp.

    Prints the folder's path on stdout."""
    from .base_tokenizers import base_tokenizer, write_base_tokenizer

    if output is None:
        click.echo(str(base_tokenizer(name, add_bos=add_bos)))
    else:
        click.echo(str(write_base_tokenizer(name, output, add_bos=add_bos, force=force)))


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn expected errors into a message and exit code 2."""
    try:
        cli.main(args=argv, prog_name="hf-chat-templates", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(2)
    except click.ClickException as err:
        err.show()
        sys.exit(2)
    except HfChatTemplatesError as err:
        if os.environ.get(DEBUG_ENV):
            raise
        click.echo(f"error: {err}", err=True)
        if err.hint:
            click.echo(f"  to fix: {err.hint}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("interrupted; nothing was published", err=True)
        sys.exit(2)
    except Exception as err:  # an unexpected failure is still reported without a traceback by default
        if os.environ.get(DEBUG_ENV):
            raise
        click.echo(f"error: unexpected {type(err).__name__}: {err}", err=True)
        click.echo(f"  to fix: rerun with {DEBUG_ENV}=1 for the traceback and report it", err=True)
        sys.exit(2)
    sys.exit(0)
