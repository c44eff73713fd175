"""CI runs what the README tells a contributor to run: `.ci/run` holds the README's test command as it is written,
and the `test` extra that command installs brings every extra the tests use (TRL with torch, Ray), so no test is
skipped in CI for want of a package a contributor would not have either."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_test_command() -> str:
    """The README's command that runs the tests: the shell line that installs the test extra and runs pytest."""
    lines = [
        line.strip()
        for block in re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
        for line in block.splitlines()
    ]
    commands = [line for line in lines if "'.[test]'" in line and "pytest" in line]
    assert len(commands) == 1, commands
    return commands[0]


def test_ci_runs_the_readmes_test_command_as_written() -> None:
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert readme_test_command() in ci
    installs = [line for line in ci if not line.startswith("#") and ("pip install" in line or "npm install" in line)]
    assert installs == [readme_test_command()]  # nothing installed beside it


def test_the_test_extra_brings_every_extra_the_tests_use() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    (own,) = [r for r in extras["test"] if r.startswith("hf-chat-templates[")]
    included = set(own[len("hf-chat-templates[") : own.index("]")].split(","))
    assert {"reference", "train", "trl", "ray"} <= included
