"""`push`: publish a verified folder to the Hub."""

from __future__ import annotations

from pathlib import Path

import click

from .app import PathParam, cli, emit_json, json_option
from .helptext import environment_epilog


@cli.command("push", epilog=environment_epilog("push"))
@click.argument("folder", type=PathParam(path_type=Path))
@click.option("--repo-id", required=True, help="The Hub repo, e.g. org/model.")
@click.option("--revision", default=None, help="Branch to open the pull request against (default: main).")
@click.option("--to-main", is_flag=True, help="Commit to the branch directly instead of opening a pull request.")
@click.option("--commit-message", default=None, help="Commit title (default: names the family and variant).")
@click.option("--token", default=None, help="Hub token (default: HF_TOKEN or your login). Never printed.")
@click.option("--private", is_flag=True, help="Create the repo as private when it does not exist.")
@click.option("--skip-verify", is_flag=True, help="Push even if verify fails.")
@click.option("--dry-run", is_flag=True, help="Print the plan (added/changed/unchanged files); upload nothing.")
@json_option
def push_command(
    folder: Path,
    repo_id: str,
    revision: str | None,
    to_main: bool,
    commit_message: str | None,
    token: str | None,
    private: bool,
    skip_verify: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Verify FOLDER, then publish its tokenizer files to the Hub as a pull request."""
    from .. import push
    from ..publish.hub import VerificationFailed

    try:
        result = push(
            folder,
            repo_id,
            revision=revision,
            to_main=to_main,
            commit_message=commit_message,
            token=token,
            private=private,
            skip_verify=skip_verify,
            dry_run=dry_run,
        )
    except VerificationFailed as err:
        if as_json:
            emit_json({"pushed": False, "verification": err.report.to_dict()})
        else:
            from ..view.report import format_report

            click.echo(format_report(err.report, all_flag=None))
        raise  # main reports the error and exits 1 (its table)
    if as_json:
        emit_json({"pushed": not dry_run and bool(result.plan.uploads), **result.to_dict()})
        return
    click.echo(result.plan.describe())
    if dry_run:
        click.echo("dry run: nothing uploaded")
    elif not result.plan.uploads:
        click.echo("nothing to push: the remote already has these files")
    else:
        click.echo(
            f"pull request: {result.pull_request_url}" if result.pull_request_url else f"commit: {result.commit_url}"
        )
