"""Publish a patched tokenizer folder to the Hub: verified first, tokenizer files only, as a pull request by default.

>>> plan = plan_push("out", "org/model")        # doctest: +SKIP  (compares with the remote revision)
>>> result = push("out", "org/model")           # doctest: +SKIP  (opens a PR)

The commit is pinned to the remote commit the plan was compared with (`parent_commit`): if someone pushed in
between, the Hub refuses it and nothing is overwritten. The token is passed to huggingface_hub only; it is never
printed, logged or written into the commit.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import HfChatTemplatesError, HubError, UsageError, option
from ..tokenizer.folder import TOKENIZER_FILE_PATTERNS, read_folder
from ..verification.results import VerificationReport
from ..verification.runner import verify


class VerificationFailed(HfChatTemplatesError):
    """`verify` found failures, so nothing was pushed (exit code 1)."""

    def __init__(self, message: str, report: VerificationReport, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.report = report


@dataclass(frozen=True)
class PushFile:
    path: str
    action: str  # add | change | unchanged | unknown (the remote could not be read: a dry run offline)
    size: int


@dataclass(frozen=True)
class PushPlan:
    folder: Path
    repo_id: str
    revision: str
    parent_commit: str | None  # None when the repo does not exist yet (--private creates it)
    create_pr: bool
    files: tuple[PushFile, ...]
    skipped: tuple[str, ...]  # files of the folder that are not tokenizer files
    commit_message: str
    commit_description: str = field(repr=False)
    not_compared: str | None = None  # why the remote could not be read (a dry run only): no file was compared

    @property
    def uploads(self) -> tuple[PushFile, ...]:
        return tuple(f for f in self.files if f.action != "unchanged")

    def to_dict(self) -> dict[str, Any]:
        return {
            "folder": str(self.folder),
            "repo_id": self.repo_id,
            "revision": self.revision,
            "parent_commit": self.parent_commit,
            "create_pr": self.create_pr,
            "files": [{"path": f.path, "action": f.action, "size": f.size} for f in self.files],
            "skipped": list(self.skipped),
            "commit_message": self.commit_message,
            "commit_description": self.commit_description,
            "not_compared": self.not_compared,
        }

    def describe(self) -> str:
        target = "a pull request against" if self.create_pr else "a commit on"
        parent = self.parent_commit[:12] if self.parent_commit else "none: new repo"
        if self.not_compared is not None:
            parent = "unknown: the remote was not read"
        lines = [f"push {self.folder} to {self.repo_id}: {target} {self.revision} (parent {parent})"]
        if self.not_compared is not None:
            lines.append(
                f"  not compared with the remote ({self.not_compared}): the folder's files were read, "
                "but whether each is new, changed or unchanged on the Hub is unknown"
            )
        lines += [f"  {f.action:<9} {f.path} ({f.size:,} bytes)" for f in self.files]
        if self.skipped:
            lines.append(f"  not uploaded (not tokenizer files): {', '.join(self.skipped)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class PushResult:
    plan: PushPlan
    commit_url: str | None
    pull_request_url: str | None

    def to_dict(self) -> dict[str, Any]:
        return {**self.plan.to_dict(), "commit_url": self.commit_url, "pull_request_url": self.pull_request_url}


def is_tokenizer_file(path: str) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in TOKENIZER_FILE_PATTERNS)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _api(token: str | None) -> Any:
    from huggingface_hub import HfApi

    # HF_ENDPOINT is read at call time, so a process can point at another endpoint than the one at import.
    return HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)


def hub_error(err: Exception, repo_id: str, revision: str) -> HfChatTemplatesError:
    """One clear error for everything the Hub (or the network) can answer."""
    from huggingface_hub.errors import (
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    status = getattr(getattr(err, "response", None), "status_code", None)
    if isinstance(err, OfflineModeIsEnabled):
        return HubError(
            f"{repo_id}: HF_HUB_OFFLINE is set, so nothing can be pushed",
            hint=f"unset HF_HUB_OFFLINE to push ({option('dry_run')} shows the plan without comparing offline)",
        )
    if isinstance(err, RevisionNotFoundError):
        return HubError(f"{repo_id}: revision {revision!r} does not exist", hint=f"check {option('revision')}")
    if status == 401 or (isinstance(err, RepositoryNotFoundError) and status == 401):
        return HubError(
            f"{repo_id}: the Hub refused the token (401 Unauthorized)",
            hint=f"pass a valid {option('token')}, set HF_TOKEN, or run `hf auth login`",
        )
    if isinstance(err, RepositoryNotFoundError) or status == 404:
        return HubError(
            f"{repo_id}: no such repo, or the token cannot see it (404)",
            hint=f"check {option('repo_id')}; create the repo first, or pass {option('private')} to create it "
            "as private",
        )
    if status == 412:
        return HubError(
            f"{repo_id}: the remote {revision} moved since it was compared; nothing was overwritten",
            hint="run push again to compare with the new remote revision",
        )
    if status == 403:
        return HubError(
            f"{repo_id}: the token may not write here (403)",
            hint="use a token with write access, or push as a pull request (the default)",
        )
    if isinstance(err, HfHubHTTPError):
        return HubError(
            f"{repo_id}: the Hub answered {status}: {str(err).splitlines()[0]}",
            hint="retry later, or check the repo on the Hub",
        )
    return HubError(
        f"{repo_id}: cannot reach the Hub ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})",
        hint="check your network and HF_ENDPOINT",
    )


def _description(report: VerificationReport | None) -> str:
    if report is None:
        return "Verification was skipped (--skip-verify)."
    summary = report.summary
    lines = [
        f"Verified with hf-chat-templates: {summary['passed']} passed, {summary['failed']} failed, "
        f"{summary['warned']} warned, {summary['skipped']} skipped.",
        "",
        f"- family: {report.family or 'n/a'}, variant: {report.variant or 'n/a'}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in report.versions.items()),
        "",
    ]
    lines += [f"- {c.id}: {c.status}" for c in report.checks]
    return "\n".join(lines)


def check_repo_id(repo_id: str) -> None:
    """Refuse a repo id the Hub cannot have (before anything else is done with it)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise UsageError(
            f"{option('repo_id')} {repo_id!r} is not a Hub repo id: {str(err).splitlines()[0]}",
            hint="give it as NAMESPACE/NAME, e.g. my-org/my-model (letters, digits, '-', '_', '.')",
            parameter="repo_id",
        ) from None


def _offline(err: Exception) -> str | None:
    """Why the Hub could not be read at all (offline mode, no network), or None when it answered."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(err, OfflineModeIsEnabled):
        return "HF_HUB_OFFLINE is set"
    if isinstance(err, HfHubHTTPError):
        return None
    return f"the Hub could not be reached: {type(err).__name__}"


def plan_push(
    folder: str | Path,
    repo_id: str,
    *,
    revision: str | None = None,
    to_main: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    private: bool = False,
    report: VerificationReport | None = None,
    api: Any = None,
    dry_run: bool = False,
) -> PushPlan:
    """Compare the folder's tokenizer files with the remote revision. Reads the Hub; writes nothing. `dry_run`: a
    Hub that cannot be reached is said in the plan (`not_compared`) instead of raised."""
    check_repo_id(repo_id)
    if to_main and revision not in (None, "main"):
        raise UsageError(
            f"{option('to_main')} commits to main; drop {option('revision')} or {option('to_main')}",
            hint="hf-chat-templates push --help",
            parameter="to_main",
        )
    revision = revision or "main"
    local = read_folder(folder)
    uploads = [p for p in local.files if is_tokenizer_file(p)]
    skipped = tuple(p for p in local.files if not is_tokenizer_file(p))
    if not uploads:
        raise UsageError(f"{folder}: no tokenizer files to push", hint="push the folder that install wrote")
    api = api or _api(token)
    parent = None
    remote: dict[str, Any] = {}
    not_compared = None
    try:
        info = api.repo_info(repo_id, revision=revision)
        parent = info.sha
        for entry in api.get_paths_info(repo_id, uploads, revision=parent):
            remote[entry.path] = entry
    except Exception as err:
        from huggingface_hub.errors import RepositoryNotFoundError

        not_compared = _offline(err) if dry_run else None
        if not_compared is None and not (
            private
            and isinstance(err, RepositoryNotFoundError)
            and getattr(getattr(err, "response", None), "status_code", None) == 404
        ):
            raise hub_error(err, repo_id, revision) from None
    files = []
    for path in uploads:
        data = local.read_bytes(path)
        entry = remote.get(path)
        if not_compared is not None:
            action = "unknown"
        elif entry is None:
            action = "add"
        elif getattr(entry, "lfs", None) is not None:
            action = "unchanged" if entry.lfs.sha256 == hashlib.sha256(data).hexdigest() else "change"
        else:
            action = "unchanged" if getattr(entry, "blob_id", None) == git_blob_sha1(data) else "change"
        files.append(PushFile(path, action, len(data)))
    message = commit_message or (
        f"Install chat template {report.family}/{report.variant}"
        if report is not None and report.family
        else "Update tokenizer and chat template"
    )
    return PushPlan(
        Path(folder),
        repo_id,
        revision,
        parent,
        not to_main,
        tuple(files),
        skipped,
        message,
        _description(report),
        not_compared,
    )


def push(
    folder: str | Path,
    repo_id: str,
    *,
    revision: str | None = None,
    to_main: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    private: bool = False,
    skip_verify: bool = False,
    dry_run: bool = False,
    api: Any = None,
) -> PushResult:
    """Verify `folder`, then upload its tokenizer files to `repo_id` as a pull request (or to main with `to_main`).

    Raises VerificationFailed when a check fails and `skip_verify` is not set; HubError for what the Hub refuses.
    `api` is an `HfApi` to use instead of one built from `token` and HF_ENDPOINT (tests pass their own)."""
    check_repo_id(repo_id)  # before the verify: a repo id that cannot be is refused at once
    report = None
    if not skip_verify:
        report = verify(folder)
        if not report.ok:
            failed = [c.id for c in report.checks if c.status == "fail"]
            raise VerificationFailed(
                f"{folder}: verification failed ({', '.join(failed)}); nothing was pushed",
                report,
                hint=f"hf-chat-templates verify {folder}; or {option('skip_verify')}",
            )
    plan = plan_push(
        folder,
        repo_id,
        revision=revision,
        to_main=to_main,
        commit_message=commit_message,
        token=token,
        private=private,
        report=report,
        api=api,
        dry_run=dry_run,
    )
    if dry_run or not plan.uploads:
        return PushResult(plan, None, None)
    from huggingface_hub import CommitOperationAdd

    api = api or _api(token)
    local = read_folder(folder)
    try:
        if plan.parent_commit is None:
            api.create_repo(repo_id, private=True, exist_ok=True)
        operations = [
            CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=local.read_bytes(f.path)) for f in plan.uploads
        ]
        info = api.create_commit(
            repo_id,
            operations,
            commit_message=plan.commit_message,
            commit_description=plan.commit_description,
            revision=plan.revision,
            create_pr=plan.create_pr,
            parent_commit=plan.parent_commit,
        )
    except Exception as err:
        raise hub_error(err, repo_id, plan.revision) from None
    return PushResult(plan, getattr(info, "commit_url", None), getattr(info, "pr_url", None))
