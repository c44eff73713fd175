"""`verify ORG/REPO --revision R --conversations FILE` reads revision R for the probe checks AND the record checks.

The local Hub stand-in serves two revisions of org/model: "main" (the default) is broken twice over (its
generation_config lacks the stop token, so `stop-token-registered` fails, and its template drops the system
message, so `nothing-dropped` fails on every record with a system message); "fixed" passes. A record check that
fetched the default revision instead of R would report the dropped system messages under --revision fixed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates.tokenizer.folder import dump_json

from ..helpers import GOOD, chatml_folder, run, snapshot
from ..hub_server import FakeHub

TOKEN = "hf_good"
REPO = "org/model"
# The "main" revision renders nothing of a system message.
DROPS_SYSTEM = GOOD.replace(
    "{%- if m.content is string -%}", "{%- if m.role == 'system' -%}{%- elif m.content is string -%}"
)
RECORDS = [
    {
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello!"},
        ]
    },
    {
        "messages": [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Sunny."},
        ]
    },
    {
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
        ]
    },
    {"messages": [{"role": "user", "content": "No system here"}, {"role": "assistant", "content": "Fine."}]},
]
WITH_SYSTEM = sum(any(m["role"] == "system" for m in r["messages"]) for r in RECORDS)


@pytest.fixture(scope="module")
def revisions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bytes]]:
    """The files of the two revisions: "main" broken, "fixed" good."""
    broken = chatml_folder(tmp_path_factory.mktemp("main") / "tok", stop_in_generation=False)
    config = json.loads((broken / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = DROPS_SYSTEM
    (broken / "tokenizer_config.json").write_bytes(dump_json(config))
    fixed = chatml_folder(tmp_path_factory.mktemp("fixed") / "tok")
    out = {"main": snapshot(broken), "fixed": snapshot(fixed)}
    assert out["main"] != out["fixed"] and set(out["main"]) == set(out["fixed"])
    return out


@pytest.fixture
def hub(revisions: dict[str, dict[str, bytes]]) -> Any:
    with FakeHub(valid_tokens=(TOKEN,)) as server:
        other = {".gitattributes": b"*.json text\n", "README.md": b"# model\n", "model.safetensors": b"weights"}
        for name, files in revisions.items():
            server.add_revision(REPO, name, {**other, **files})
        yield server


@pytest.fixture
def conversations(tmp_path: Path) -> Path:
    path = tmp_path / "conversations.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    return path


@pytest.fixture
def online(hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    """This process talks to the stand-in, with a Hub cache of its own. huggingface_hub reads HF_ENDPOINT,
    HF_HUB_OFFLINE and the cache folder once, at import, so its constants are patched as well as the environment."""
    import huggingface_hub.constants as constants

    home = tmp_path / "hf_home"
    cache = home / "hub"
    for name, value in {
        "HF_ENDPOINT": hub.endpoint,
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    return hub


def revision_lookups(hub: FakeHub) -> list[str]:
    """The revisions repo info was asked for, in order: one per fetch of the repo (snapshot_download)."""
    prefix = f"/api/models/{REPO}/revision/"
    return [path[len(prefix) :] for method, path in hub.requests if method == "GET" and path.startswith(prefix)]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run(capsys, "verify", REPO, *args, "--json")
    assert out.strip(), err
    return code, json.loads(out)


def statuses(doc: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["status"] for c in doc["checks"]}


def record_failures(doc: dict[str, Any]) -> dict[str, int]:
    return {k: v["failed"] for k, v in doc["conversations"]["checks"].items()}


def test_verify_with_revision_reads_it_for_probes_and_records(
    online: FakeHub, conversations: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub = online
    fixed_sha = hub.repos[REPO].revisions["fixed"][0]
    code, doc = run_cli(capsys, "--revision", "fixed", "--conversations", str(conversations), "--token", TOKEN)
    # The probe checks ran on the "fixed" snapshot...
    assert Path(doc["tokenizer"]).name == fixed_sha
    failing = {k: v for k, v in statuses(doc).items() if v == "fail"}
    assert failing == {}, [c["message"] for c in doc["checks"] if c["status"] == "fail"]
    # ...and so did the record checks: nothing dropped, on every record.
    assert doc["conversations"]["records"] == len(RECORDS)
    assert record_failures(doc) == dict.fromkeys(record_failures(doc), 0)
    assert code == 0
    # Both fetches asked for "fixed"; nothing asked for the default revision, nothing downloaded it.
    assert revision_lookups(hub) == ["fixed", "fixed"]
    main_sha = hub.repos[REPO].revisions["main"][0]
    assert hub.downloads and all(rev == fixed_sha for _, rev, _, _ in hub.downloads)
    assert all(auth == f"Bearer {TOKEN}" for *_, auth in hub.downloads)
    assert main_sha not in json.dumps(doc)
    # Only tokenizer files were fetched.
    assert {path for _, _, path, _ in hub.downloads} <= {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    }


def test_verify_without_revision_reads_the_default(
    online: FakeHub, conversations: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub = online
    code, doc = run_cli(capsys, "--conversations", str(conversations), "--token", TOKEN)
    assert Path(doc["tokenizer"]).name == hub.repos[REPO].revisions["main"][0]
    checks = statuses(doc)
    assert checks["stop-token-registered"] == "fail", checks
    failures = record_failures(doc)
    assert failures["nothing-dropped"] == WITH_SYSTEM and failures["renders"] == 0
    examples = doc["conversations"]["checks"]["nothing-dropped"]["examples"]
    assert [e["line"] for e in examples] == [1, 2, 3]
    assert code == 1
    assert revision_lookups(hub) == ["main", "main"]


@pytest.mark.parametrize("by", ["name", "sha"])
def test_verify_conversations_reads_the_revision(online: FakeHub, conversations: Path, by: str) -> None:
    from hf_chat_templates.verification.dataset import verify_conversations

    hub = online
    revision = "fixed" if by == "name" else hub.repos[REPO].revisions["fixed"][0]
    fixed = verify_conversations(REPO, conversations, revision=revision, token=TOKEN)
    assert fixed.records == len(RECORDS) and fixed.ok and fixed.failed["nothing-dropped"] == 0
    default = verify_conversations(REPO, conversations, token=TOKEN)
    assert default.records == len(RECORDS) and not default.ok
    assert default.failed["nothing-dropped"] == WITH_SYSTEM
    # A commit sha needs no repo info lookup; a name is looked up once per fetch.
    assert revision_lookups(hub) == (["fixed", "main"] if by == "name" else ["main"])


def test_an_unknown_revision_is_a_clear_error(
    online: FakeHub, conversations: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "verify", REPO, "--revision", "nope", "--conversations", str(conversations), "--token", TOKEN
    )
    assert code == 2, out + err
    assert "org/model" in err and "RevisionNotFoundError" in err and "Traceback" not in err
    assert TOKEN not in out + err


def test_cli_process_reads_the_revision(hub: FakeHub, conversations: Path, tmp_path: Path) -> None:
    """The command as a user runs it, in a fresh process whose huggingface_hub reads HF_ENDPOINT at import."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE")}
    env.update(
        {
            "HF_ENDPOINT": hub.endpoint,
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HOME": str(tmp_path / "home"),
            "HF_HUB_OFFLINE": "0",
            "HF_TOKEN": TOKEN,
        }
    )
    docs = {}
    for revision in ("fixed", None):
        args = ["verify", REPO, "--conversations", str(conversations), "--json"]
        args += ["--revision", revision] if revision else []
        result = subprocess.run(
            [sys.executable, "-m", "hf_chat_templates", *args], env=env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == (0 if revision else 1), result.stderr
        docs[revision] = json.loads(result.stdout)
    fixed, default = docs["fixed"], docs[None]
    assert Path(fixed["tokenizer"]).name == hub.repos[REPO].revisions["fixed"][0]
    assert "fail" not in statuses(fixed).values() and not any(record_failures(fixed).values())
    assert Path(default["tokenizer"]).name == hub.repos[REPO].revisions["main"][0]
    assert statuses(default)["stop-token-registered"] == "fail"
    assert record_failures(default)["nothing-dropped"] == WITH_SYSTEM
    assert revision_lookups(hub) == ["fixed", "fixed", "main", "main"]
