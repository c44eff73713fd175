"""`prepare` on a real tokenizer: the folder's training template and rendering differences give the same dataset."""

from __future__ import annotations

import json
from pathlib import Path

from hf_chat_templates import install, prepare

from ..helpers import CONVERSATIONS, write_jsonl


def test_training_template_and_rendering_differences_give_the_same_dataset(
    tmp_path: Path, installed_variants: dict
) -> None:
    from datasets import load_from_disk

    source = installed_variants[("llama3.2-pythonic", "corrected")]
    with_markers = tmp_path / "marked"
    install("llama3.2-pythonic", source, with_markers, training=True)
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(c) for c in CONVERSATIONS] * 3)
    a = prepare(source, data, tmp_path / "a")
    b = prepare(with_markers, data, tmp_path / "b", workers=2)
    assert "rendering differences" in a.spans_from and "'training' template" in b.spans_from
    assert load_from_disk(str(tmp_path / "a"))[:] == load_from_disk(str(tmp_path / "b"))[:]
    assert a.written == 9 and a.trained_tokens == b.trained_tokens > 0
