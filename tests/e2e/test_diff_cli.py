"""`hf-chat-templates diff` in a fresh process: exit 0 when every probe renders the same, 1 when one differs, 2 on
bad input without a traceback; `--json` is one document; `verify --sarif` writes its log there too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..helpers import REPO_ROOT, chatml_folder

GEMMA = REPO_ROOT / "model_configs" / "gemma3-tools"
TRIGGER = REPO_ROOT / "tests" / "hostile" / "safety" / "trigger_invoice.jinja"


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hf_chat_templates", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=600,
    )


def test_diff_of_a_fixed_template_exits_1_and_names_what_the_model_reads_differently() -> None:
    result = _cli("diff", GEMMA / "upstream.jinja", GEMMA / "corrected.jinja", "--probe", "plain")
    assert result.returncode == 1, result.stderr
    assert "--- a/" in result.stdout and "renderings: 1 of 1 probes change for the model" in result.stdout
    assert "plain, after message 1: removed '\\n', added ''" in result.stdout


def test_diff_of_the_same_template_exits_0_with_one_json_document(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok")
    template = tmp_path / "same.jinja"
    template.write_text(json.loads((folder / "tokenizer_config.json").read_text())["chat_template"])
    result = _cli("diff", folder, template, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["renders_same"] and doc["same_text"] and doc["a"]["origin"] == "tokenizer_config.json"
    assert all(p["status"] == "same" for p in doc["probes"])


def test_diff_bad_input_exits_2_without_traceback(tmp_path: Path) -> None:
    result = _cli("diff", tmp_path / "missing.jinja", GEMMA / "corrected.jinja")
    assert result.returncode == 2 and "missing.jinja: not found" in result.stderr
    assert "Traceback" not in result.stderr and "to fix:" in result.stderr
    result = _cli("diff", GEMMA / "corrected.jinja", GEMMA / "corrected.jinja", "--kwarg", "oops")
    assert result.returncode == 2 and "is not NAME=VALUE" in result.stderr


def test_verify_sarif_in_a_fresh_process(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok")
    out = tmp_path / "safety.sarif"
    result = _cli("verify", folder, "--template", TRIGGER, "--only", "template-safety", "--sarif", out)
    assert result.returncode == 1 and "HCT-S008" in result.stdout
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["version"] == "2.1.0" and doc["runs"][0]["results"][0]["ruleId"] == "HCT-S008"
