"""Training variants on the real families: install --training writes a named template that verifies, and the upstream
seeds get masks equal to their spans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import TemplateChoice, install, list_families, verify

from ..helpers import snapshot


@pytest.mark.parametrize("family", [f.name for f in list_families()])
def test_install_training_writes_a_named_template_that_verifies(
    family: str, tmp_path: Path, installed_variants: dict
) -> None:
    from transformers import AutoTokenizer

    source = installed_variants[(family, "corrected")]
    out = tmp_path / "tok"
    install(family, source, out, training=True)
    tok = AutoTokenizer.from_pretrained(str(out))
    assert set(tok.chat_template) == {"default", "training"}
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert [t["name"] for t in config["chat_template"]] == ["default", "training"]
    report = verify(out)
    mask = report.check("assistant-mask")
    assert mask.status in ("pass", "warn", "info"), mask.message
    assert "the folder's training template" in mask.message or mask.status in ("warn", "info")
    assert report.ok
    before = snapshot(out)
    install(family, out, tmp_path / "again", training=True)
    install(family, tmp_path / "again", tmp_path / "third")  # without --training: the derived one is kept in step
    assert snapshot(tmp_path / "third") == before


@pytest.mark.parametrize(
    "key", ["gemma3-tools/upstream", "gigachat3/upstream", "gpt-oss/upstream", "llama3.2-pythonic/upstream"]
)
def test_upstream_variants_get_masks_equal_to_their_spans(key: str, installed_variants: dict) -> None:
    family, variant = key.split("/")
    report = verify(
        installed_variants[(family, variant)], TemplateChoice(family=family, variant=variant), only=["assistant-mask"]
    )
    assert report.check("assistant-mask").status in ("pass", "warn", "info"), report.check("assistant-mask").message
