"""push against a local Hub stand-in: what arrives, PR by default, pinned parent, clear errors, token never shown."""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hf_chat_templates import install

from ..helpers import build_toy_tokenizer, chatml_folder
from ..hub_server import FakeHub

TOKEN = "hf_good"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = build_toy_tokenizer(tmp_path_factory.mktemp("src") / "tok")
    out = tmp_path_factory.mktemp("out") / "gemma"
    install("gemma3-tools", src, out)
    (out / "README.md").write_text("# not a tokenizer file\n")
    (out / "model.safetensors").write_bytes(b"weights")
    return out


@pytest.fixture
def hub() -> FakeHub:
    with FakeHub(valid_tokens=(TOKEN,)) as server:
        server.add_repo("org/model", {"config.json": b"{}", "tokenizer_config.json": b"{}"})
        yield server


def cli(hub: FakeHub, home: Path, *args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    """`hf-chat-templates push ARGS` in a fresh process pointed at the stand-in, as a user would run it."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
    env.update({"HF_ENDPOINT": hub.endpoint, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(home)})
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "hf_chat_templates", "push", *args], env=env, capture_output=True, text=True, timeout=300
    )


def test_push_opens_a_pull_request_with_tokenizer_files_only(hub: FakeHub, folder: Path, tmp_path: Path) -> None:
    result = cli(hub, tmp_path, str(folder), "--repo-id", "org/model", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["pushed"] and doc["create_pr"] and doc["pull_request_url"].endswith("/org/model/discussions/1")
    (commit,) = hub.commits
    assert commit.create_pr and commit.revision == "main"
    assert commit.header["parentCommit"] == hub.repos["org/model"].sha  # pinned to what it compared with
    assert set(commit.files) == {
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "chat_template.jinja",
    }
    for path, data in commit.files.items():
        assert data == (folder / path).read_bytes()
    assert "Verified with hf-chat-templates" in commit.header["description"]
    assert "family: gemma3-tools, variant: corrected" in commit.header["description"]
    assert commit.header["summary"] == "Install chat template gemma3-tools/corrected"
    assert TOKEN not in result.stdout + result.stderr + json.dumps(commit.header)
    assert commit.authorization == f"Bearer {TOKEN}"
    assert hub.repos["org/model"].files["tokenizer_config.json"] == b"{}"  # a PR does not touch main


def test_to_main_commits_directly(hub: FakeHub, folder: Path, tmp_path: Path) -> None:
    result = cli(hub, tmp_path, str(folder), "--repo-id", "org/model", "--to-main")
    assert result.returncode == 0, result.stderr
    assert not hub.commits[0].create_pr
    assert hub.repos["org/model"].files["chat_template.jinja"] == (folder / "chat_template.jinja").read_bytes()
    # Pushing again finds nothing to change and makes no commit.
    again = cli(hub, tmp_path, str(folder), "--repo-id", "org/model", "--to-main")
    assert again.returncode == 0 and "nothing to push" in again.stdout and len(hub.commits) == 1


def test_dry_run_prints_the_plan_and_uploads_nothing(hub: FakeHub, folder: Path, tmp_path: Path) -> None:
    result = cli(hub, tmp_path, str(folder), "--repo-id", "org/model", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "change    tokenizer_config.json" in result.stdout and "add       tokenizer.json" in result.stdout
    assert "not uploaded (not tokenizer files): README.md, model.safetensors" in result.stdout
    assert hub.commits == [] and not any(p.endswith("/commit/main") for _, p in hub.requests)


@pytest.mark.parametrize(
    ("args", "token", "message"),
    [
        (["--repo-id", "org/model"], "hf_bad", "refused the token (401"),
        (["--repo-id", "org/missing"], TOKEN, "org/missing: no such repo"),
    ],
)
def test_hub_errors_exit_2_and_upload_nothing(
    hub: FakeHub, folder: Path, tmp_path: Path, args: list[str], token: str, message: str
) -> None:
    result = cli(hub, tmp_path, str(folder), *args, token=token)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert "hf_bad" not in result.stderr and hub.commits == []


def test_connection_refused(folder: Path, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there

    class Nowhere:
        endpoint = f"http://127.0.0.1:{port}"

    result = cli(Nowhere(), tmp_path, str(folder), "--repo-id", "org/model")  # type: ignore[arg-type]
    assert result.returncode == 2 and "cannot reach the Hub" in result.stderr


def test_a_remote_that_moved_is_not_overwritten(hub: FakeHub, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    push_module = importlib.import_module("hf_chat_templates.publish.hub")
    from hf_chat_templates.errors import HubError

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    original = push_module.plan_push

    def plan_then_race(*args: object, **kwargs: object) -> object:
        plan = original(*args, **kwargs)
        hub.repos["org/model"].sha = "f" * 40  # someone pushed after the comparison
        return plan

    monkeypatch.setattr(push_module, "plan_push", plan_then_race)
    with pytest.raises(HubError, match="moved since it was compared; nothing was overwritten"):
        push_module.push(folder, "org/model", token=TOKEN, to_main=True, skip_verify=True)
    assert hub.commits == []


def test_failed_verification_stops_the_push(hub: FakeHub, tmp_path: Path) -> None:
    broken = chatml_folder(tmp_path / "tok", stop_in_generation=False)
    result = cli(hub, tmp_path, str(broken), "--repo-id", "org/model")
    assert result.returncode == 1
    assert "FAIL stop-token-registered" in result.stdout and "nothing was pushed" in result.stderr
    assert "or --skip-verify" in result.stderr and "Traceback" not in result.stderr
    assert hub.commits == []
    forced = cli(hub, tmp_path, str(broken), "--repo-id", "org/model", "--skip-verify")
    assert forced.returncode == 0 and len(hub.commits) == 1
    assert "Verification was skipped" in hub.commits[0].header["description"]


def test_private_creates_a_missing_repo(hub: FakeHub, folder: Path, tmp_path: Path) -> None:
    result = cli(hub, tmp_path, str(folder), "--repo-id", "user/fresh", "--private")
    assert result.returncode == 0, result.stderr
    assert hub.repos["user/fresh"].private and hub.commits[0].repo_id == "user/fresh"
