"""Each command's --help (check ids, exit codes, the variables it reads), verify --all's progress on stderr, and
the matrix's explanation of every failed and warned cell."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates.cli.app import cli
from hf_chat_templates.cli.helptext import COMMAND_ENVIRONMENT, ENVIRONMENT
from hf_chat_templates.verification.checks import CHECK_ORDER, CHECK_SUMMARIES
from hf_chat_templates.verification.results import CheckResult, VerificationReport

from ..helpers import REPO_ROOT, run

PACKAGE = REPO_ROOT / "hf_chat_templates"
VARIABLE = re.compile(r"HF_CHAT_TEMPLATES_[A-Z0-9_]*[A-Z0-9]")


def help_text(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    code, out, _ = run(capsys, *command, "--help")
    assert code == 0
    return out


def test_every_check_has_a_summary_in_the_order_they_run() -> None:
    assert tuple(CHECK_SUMMARIES) == CHECK_ORDER


def test_verify_help_lists_every_check_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    out = help_text(capsys, "verify")
    for check_id in CHECK_ORDER:
        assert re.search(rf"^\s+{re.escape(check_id)}\s+\S", out, re.MULTILINE), check_id
    codes = out[out.index("Exit codes:") :]
    for code in ("0", "1", "2", "3", "143"):
        assert re.search(rf"^\s+{code}\s+\S", codes, re.MULTILINE), code


def test_every_command_names_the_variables_it_reads(capsys: pytest.CaptureFixture[str]) -> None:
    groups = ("family", "export")  # a group's subcommands read the variables
    commands = [name for name in cli.commands if name not in groups] + ["family init", "export ollama"]
    assert sorted(commands) == sorted(COMMAND_ENVIRONMENT)
    for command in commands:
        out = help_text(capsys, *command.split())
        for name in (*COMMAND_ENVIRONMENT[command], "HF_CHAT_TEMPLATES_DEBUG"):
            assert name in out, (command, name)


def test_every_variable_the_package_reads_is_documented(capsys: pytest.CaptureFixture[str]) -> None:
    read = {m for path in PACKAGE.rglob("*.py") for m in VARIABLE.findall(path.read_text(encoding="utf-8"))}
    helps = "".join(help_text(capsys, *c.split()) for c in COMMAND_ENVIRONMENT)
    documented = (REPO_ROOT / "docs" / "environment.md").read_text(encoding="utf-8")
    assert "HF_CHAT_TEMPLATES_PROGRESS" in read
    for name in read:
        assert name in helps or name in documented, name
    for name in ENVIRONMENT:  # and the help describes no variable the docs do not
        assert f"`{name}`" in documented, name


# ---- verify --all: progress and the matrix --------------------------------------------------------------------


def _report(family: str, variant: str, statuses: dict[str, str]) -> VerificationReport:
    checks = [CheckResult(cid, status, f"{cid} says {status} here") for cid, status in statuses.items()]
    return VerificationReport(
        source=f"{family}/{variant}",
        family=family,
        variant=variant,
        tokenizer="toy",
        versions={},
        capabilities={},
        checks=checks,
    )


@pytest.fixture
def fake_all(monkeypatch: pytest.MonkeyPatch) -> list[VerificationReport]:
    """verify --all over two made-up variants of the bundled families' names, without installing anything."""
    from hf_chat_templates import list_families
    from hf_chat_templates.verification import runner

    fam = list_families()[0]
    reports = [
        _report(fam.name, fam.default_variant, {"renders": "pass", "deterministic": "warn"}),
        _report(fam.name, "other", {"renders": "fail", "deterministic": "pass"}),
    ]

    def verify_all(*, only: Any = None, engines: Any = None, on_result: Any = None, **_: Any) -> list[Any]:
        for report in reports:
            if on_result is not None:
                on_result(report, 1.2)
        return [(report, None) for report in reports]

    monkeypatch.setattr(runner, "verify_all_with_contexts", verify_all)
    return reports


def test_verify_all_progress_with_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake_all: list[VerificationReport]
) -> None:
    from hf_chat_templates import list_families

    monkeypatch.setenv("HF_CHAT_TEMPLATES_PROGRESS", "1")
    total = sum(len(f.variants) for f in list_families())
    fam = fake_all[0].family
    _, out, err = run(capsys, "verify", "--all")
    assert f"[1/{total}] {fam}/{fake_all[0].variant}: warn (1 s)" in err.splitlines()
    assert f"[2/{total}] {fam}/other: fail (1 s)" in err.splitlines()
    assert "[1/" not in out
    # --json: one document on stdout, nothing on stderr even when asked
    _, out, err = run(capsys, "verify", "--all", "--json")
    assert "[1/" not in err and len(json.loads(out)) == 2


def test_verify_all_progress_is_silent_without_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake_all: list[VerificationReport]
) -> None:
    monkeypatch.delenv("HF_CHAT_TEMPLATES_PROGRESS", raising=False)
    _, _, err = run(capsys, "verify", "--all")
    assert "[1/" not in err
    monkeypatch.setenv("HF_CHAT_TEMPLATES_PROGRESS", "0")
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    _, _, err = run(capsys, "verify", "--all")
    assert "[1/" not in err


def test_the_matrix_explains_every_failed_and_warned_cell(
    capsys: pytest.CaptureFixture[str], fake_all: list[VerificationReport]
) -> None:
    fam = fake_all[0].family
    _, out, _ = run(capsys, "verify", "--all")
    lines = out.splitlines()
    assert f"{fam}/other: renders: renders says fail here" in lines
    assert f"{fam}/{fake_all[0].variant}: deterministic: warning: deterministic says warn here" in lines
    assert lines.index(f"{fam}/other: renders: renders says fail here") < lines.index(
        f"{fam}/{fake_all[0].variant}: deterministic: warning: deterministic says warn here"
    )
    assert "2 passed, 1 failed, 1 warned across 2 family variants" in lines


def test_conversations_progress_with_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, good: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data.jsonl"
    record = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    data.write_text(json.dumps(record) + "\n", encoding="utf-8")
    args = ("verify", str(good), "--conversations", str(data), "--only", "renders")
    monkeypatch.delenv("HF_CHAT_TEMPLATES_PROGRESS", raising=False)
    _, _, err = run(capsys, *args)
    assert "conv" not in err
    monkeypatch.setenv("HF_CHAT_TEMPLATES_PROGRESS", "1")
    _, _, err = run(capsys, *args)
    assert "1conv" in err.replace(" ", "")
    _, _, err = run(capsys, *args, "--json")
    assert "conv" not in err.replace("conversations", "")
