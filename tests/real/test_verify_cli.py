"""`hf-chat-templates verify` on real tokenizers: the upstream seeds' failures, the --all matrix, and datasets on
SentencePiece."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import TemplateChoice, base_tokenizer, install, verify

from ..helpers import run


def test_upstream_gpt_oss_drifts_from_harmony(tmp_path: Path) -> None:
    install(TemplateChoice(family="gpt-oss", variant="upstream"), base_tokenizer("o200k-harmony"), tmp_path / "out")
    report = verify(tmp_path / "out", only=["reference-parity", "renders", "deterministic"])
    assert report.family == "gpt-oss" and report.variant == "upstream"  # identified by the template's sha256
    parity = report.check("reference-parity")
    assert parity.status == "fail"
    assert "differs from openai-harmony" in parity.message and "'Reasoning: medium" in parity.message
    assert report.check("renders").status == "fail"
    assert "probe tool-call" in report.check("renders").message
    clock = report.check("deterministic")  # today's date, which no kwarg pins: a warning
    assert clock.status == "warn" and clock.detail["pinned_by"] is None and not clock.detail["time_of_day"]


def test_verify_all_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "verify", "--all", "--only", "renders,nothing-dropped,deterministic")
    assert code == 0  # the default (corrected) variants pass; the upstream seeds fail where they are wrong
    assert "default variants: all pass" in out
    assert "gigachat3/upstream: nothing-dropped: probe parallel-tool-calls" in out
    assert "gpt-oss/upstream: renders: probe tool-call" in out
    assert "llama3.2-pythonic/upstream: deterministic" in out and "date_string" in out


def test_sentencepiece_word_marker_is_decoded_and_reported(installed_variants: dict, tmp_path: Path) -> None:
    """Records are decoded only where the tokenizer could lose text: on SentencePiece, those holding "▁"."""
    from hf_chat_templates.verification.dataset import verify_conversations

    data = tmp_path / "data.jsonl"
    records = [
        {"messages": [{"role": "user", "content": "plain text"}]},
        {"messages": [{"role": "user", "content": "a\u2581marker"}]},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = verify_conversations(installed_variants[("gemma3-tools", "corrected")], data)
    assert report.failed["decode-roundtrip"] == 1
    assert report.examples["decode-roundtrip"][0][0] == 2
