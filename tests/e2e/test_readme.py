"""Every hf-chat-templates command the README and the docs pages show runs, in order, from an empty folder."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from ..helpers import REPO_ROOT
from ..hub_server import FakeHub

# The pages whose `bash` blocks run, in this order: each page's commands may use what the pages before it wrote
# (the README's tour writes base-llama3/ and llama-train/, install.md writes installed/ and gigachat-tok/). Blocks
# marked `shell` are shown, not run (they need a file of the reader's own).
PAGES = (
    "README.md",
    "docs/install.md",
    "docs/verify.md",
    "docs/security.md",
    "docs/engines.md",
    "docs/training.md",
    "docs/publishing.md",
)


def readme_commands(page: str = "README.md") -> list[list[str]]:
    text = (REPO_ROOT / page).read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            for part in line.split("&&"):
                part = part.split("  #")[0].strip()
                part = re.sub(r"^(\S+=\S+\s+)*", "", part)  # leading VAR=value assignments
                part = part.removeprefix(".venv/bin/")
                if part.startswith("hf-chat-templates "):
                    commands.append(shlex.split(part)[1:])
    return commands


def documented_commands() -> list[list[str]]:
    return [args for page in PAGES for args in readme_commands(page)]


def test_readme_shows_the_main_job_first() -> None:
    commands = readme_commands()
    assert commands[0] == ["verify", "--all"]
    assert len(commands) >= 6


def test_every_page_with_commands_is_run() -> None:
    pages = {f"docs/{p.name}" for p in (REPO_ROOT / "docs").glob("*.md") if readme_commands(f"docs/{p.name}")}
    assert pages <= set(PAGES), pages - set(PAGES)


def test_every_readme_command_runs(tmp_path: Path) -> None:
    shutil.copytree(REPO_ROOT / "examples", tmp_path / "examples")  # the README runs from the repository's root
    offline = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with FakeHub(valid_tokens=("hf_readme",)) as hub:
        hub.add_repo("org/model")
        # push talks to the local Hub stand-in; everything else runs offline
        online = {
            **{k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"},
            "HF_ENDPOINT": hub.endpoint,
            "HF_TOKEN": "hf_readme",
            "HF_HOME": str(tmp_path / "hf_home"),
        }
        for args in documented_commands():
            result = subprocess.run(
                [sys.executable, "-m", "hf_chat_templates", *args],
                cwd=tmp_path,
                env=online if args[0] == "push" else offline,
                capture_output=True,
                text=True,
            )
            if _needs_missing_ray(args):  # the README's optional Ray step: without the extra, a clear refusal
                assert result.returncode == 2 and "pip install 'hf-chat-templates[ray]'" in result.stderr, result
                continue
            check_result(args, result)
        assert len(hub.commits) == 1 and hub.commits[0].create_pr  # the dry run uploaded nothing
    for family in ("gemma3-tools", "gigachat3", "gpt-oss", "llama3.2-pythonic"):
        assert (tmp_path / "installed" / family / "chat_template.jinja").is_file()
    assert (tmp_path / "gigachat-tok" / "chat_template.jinja").is_file()
    assert (tmp_path / "llama-train" / "additional_chat_templates" / "training.jinja").is_file()
    assert (tmp_path / "llama-data" / "dataset_info.json").is_file()
    assert (tmp_path / "report.html").is_file() and (tmp_path / "view.html").is_file()


def _needs_missing_ray(args: list[str]) -> bool:
    import importlib.util

    engine = args[args.index("--engine") + 1] if "--engine" in args[:-1] else None
    return engine == "ray" and importlib.util.find_spec("ray") is None


def check_result(args: list[str], result: subprocess.CompletedProcess[str]) -> None:
    # verify --all exits 0 when every family's default variant passes: that is the product's promise
    assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr
