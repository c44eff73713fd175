"""`diff_templates`: the text diff of two templates, what each renders for every probe (what changes for the
model), the safety findings the second adds, and sides read from template files, folders, tokenizer_config.json
and GGUF files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hf_chat_templates.errors import TemplateError, UsageError
from hf_chat_templates.verification.template_diff import diff_templates, read_side

from ..helpers import GOOD, REPO_ROOT, chatml_folder

GEMMA = REPO_ROOT / "model_configs" / "gemma3-tools"


def test_identical_templates_render_the_same(tmp_path: Path) -> None:
    copy = tmp_path / "copy.jinja"
    copy.write_bytes((GEMMA / "corrected.jinja").read_bytes())
    result = diff_templates(GEMMA / "corrected.jinja", copy)
    assert result.same_text and result.renders_same and result.text_diff == ""
    assert all(p.status == "same" and p.changes == () for p in result.probes) and len(result.probes) > 20
    assert "0 of" in result.describe()


def test_a_fix_shows_as_text_and_as_what_the_model_reads_per_probe() -> None:
    result = diff_templates(GEMMA / "upstream.jinja", GEMMA / "corrected.jinja", probes=["plain", "tool-call"])
    assert not result.same_text and result.text_diff.startswith("--- a/")
    plain = next(p for p in result.probes if p.probe == "plain")
    # the seed wrote a newline between the answer and <end_of_turn>
    (change,) = plain.changes
    assert change["removed"] == "\n" and change["added"] == "" and change["where"] == "after message 1"
    assert "⟨here⟩\\n<end_of_turn>" in change["a"] and "⟨here⟩<end_of_turn>" in change["b"]
    tool = next(p for p in result.probes if p.probe == "tool-call")
    assert any(c["removed"] == "tool" and c["added"] == "user" for c in tool.changes)
    assert not result.renders_same and "plain, after message 1: removed '\\n', added ''" in result.describe()


def test_a_side_that_fails_to_render_is_reported_not_raised(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jinja"
    broken.write_text("{{ raise_exception('no') }}")
    result = diff_templates(GEMMA / "corrected.jinja", broken, probes=["plain"])
    (probe,) = result.probes
    assert probe.status == "b-fails" and "no" in (probe.b_error or "") and probe.a_error is None
    assert result.to_dict()["probes"][0]["status"] == "b-fails"


def test_the_safety_findings_the_new_template_adds_are_listed(tmp_path: Path) -> None:
    hostile = REPO_ROOT / "tests" / "hostile" / "safety" / "trigger_invoice.jinja"
    plain = tmp_path / "plain.jinja"
    plain.write_text(re.sub(r"\{% if 'invoice'.*?endif %\}", "", hostile.read_text(encoding="utf-8"), flags=re.S))
    result = diff_templates(plain, hostile, probes=["plain"])
    assert [f.rule for f in result.new_findings] == ["HCT-S008"]
    assert "B adds 1 finding(s)" in result.describe()
    assert diff_templates(hostile, hostile, probes=["plain"]).new_findings == ()


def test_a_folder_side_reads_its_template_and_special_tokens(tmp_path: Path) -> None:
    folder = chatml_folder(tmp_path / "tok", add_bos=True)
    side = read_side(folder)
    assert side.origin == "tokenizer_config.json" and side.template == GOOD
    assert side.variables.get("bos_token") == "<s>" and side.variables.get("eos_token") == "</s>"
    (folder / "chat_template.jinja").write_text("{{ bos_token }}{{ messages[0].content }}", encoding="utf-8")
    side = read_side(folder)
    assert side.origin == "chat_template.jinja"
    result = diff_templates(folder, side, probes=["plain"])
    assert result.renders_same and result.notes == ()
    assert read_side(folder / "tokenizer_config.json").template == GOOD


def test_a_template_file_side_notes_that_special_tokens_render_empty(tmp_path: Path) -> None:
    result = diff_templates(GEMMA / "corrected.jinja", GEMMA / "corrected.jinja", probes=["plain"])
    assert any("declares no special tokens" in n for n in result.notes)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp / "missing.jinja", "missing.jinja: not found"),
        (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "no chat template"),
        (lambda tmp: (tmp / "c.json").write_text("[1]") and tmp / "c.json", "not a JSON object"),
        (lambda tmp: (tmp / "c.json").write_text('{"chat_template": 3}') and tmp / "c.json", "chat_template is int"),
    ],
)
def test_bad_sides_are_usage_errors_naming_the_path(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match=message):
        read_side(make(tmp_path))


def test_an_unknown_probe_and_a_template_that_does_not_parse_are_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown probe"):
        diff_templates(GEMMA / "corrected.jinja", GEMMA / "corrected.jinja", probes=["nope"])
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(TemplateError, match="not UTF-8"):
        read_side(bad)


def test_a_gguf_side_reads_its_template_and_special_tokens(tmp_path: Path) -> None:
    exporting = pytest.importorskip("hf_chat_templates.gguf.exporting", reason="GGUF export is not in this build")
    folder = chatml_folder(tmp_path / "tok", add_bos=True)
    gguf = exporting.export_vocab_gguf(folder, tmp_path / "toy.gguf", pre="gpt-2")
    side = read_side(gguf)
    assert side.origin == "GGUF tokenizer.chat_template" and side.template == GOOD
    assert side.variables["bos_token"] == "<s>"
    result = diff_templates(folder, gguf)
    assert result.renders_same and result.same_text
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["renders_same"] and doc["b"]["origin"] == "GGUF tokenizer.chat_template"


def test_a_folders_tool_use_template_renders_its_probes_with_tools(tmp_path: Path) -> None:
    a = chatml_folder(tmp_path / "a")
    b = chatml_folder(tmp_path / "b")
    (b / "additional_chat_templates").mkdir()
    (b / "additional_chat_templates" / "tool_use.jinja").write_text(GOOD.replace("<tool_call>", "<call>"))
    result = diff_templates(a, b, probes=["plain", "tool-call"])
    changed = {p.probe for p in result.probes if p.changed}
    assert changed == {"tool-call"} and not result.same_text
    assert read_side(b).to_dict()["tool_use"] is True
