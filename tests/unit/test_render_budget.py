"""A batch whose renderings are larger than the budget is encoded in parts: the same dataset, never all the
renderings held at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import prepare
from hf_chat_templates.conversations.batches import render_batch
from hf_chat_templates.training import dataset

from ..helpers import CONVERSATIONS, write_jsonl


def test_rendering_stops_past_the_budget_after_at_least_one_item() -> None:
    items = ["a" * 10, "b" * 10, "c" * 10, "d" * 10]
    outcomes = render_batch(items, lambda text: text, budget_chars=15)
    assert [index for index, _, _ in outcomes] == [0, 1]  # the second brings 20 past 15: the rest waits
    assert len(render_batch(items, lambda text: text, budget_chars=0)) == 1
    assert len(render_batch(items, lambda text: text)) == 4


def test_a_batch_over_the_budget_prepares_the_same_dataset(
    chatml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datasets import load_from_disk

    bad = {"messages": [{"role": "user", "content": "no answer"}]}
    lines = [json.dumps(c) for c in CONVERSATIONS * 5] + [json.dumps(bad)]
    data = write_jsonl(tmp_path / "c.jsonl", lines)
    whole = prepare(chatml, data, tmp_path / "whole")
    monkeypatch.setattr(dataset, "RENDER_BUDGET_CHARS", 40)  # one or two renderings per part
    parts = prepare(chatml, data, tmp_path / "parts")
    assert parts.written == whole.written == len(CONVERSATIONS) * 5
    assert parts.skipped == whole.skipped and parts.records == whole.records
    assert load_from_disk(str(tmp_path / "parts"))[:] == load_from_disk(str(tmp_path / "whole"))[:]


@pytest.mark.parametrize("options", [{}, {"pack": 64}, {"workers": 2}], ids=["plain", "packed", "workers"])
def test_batches_in_parts_pipelined_prepare_the_same_dataset(
    chatml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict
) -> None:
    """A batch in parts that render while the part before is encoded (or, with workers, one after the other in the
    worker): the rows, their order, what was left out and the packing are those of the whole batch."""
    from datasets import load_from_disk

    bad = {"messages": [{"role": "user", "content": "no answer"}]}
    lines = [json.dumps(c) for c in CONVERSATIONS * 7] + [json.dumps(bad)] + [json.dumps(c) for c in CONVERSATIONS]
    data = write_jsonl(tmp_path / "c.jsonl", lines)
    whole = prepare(chatml, data, tmp_path / "whole", **options)
    monkeypatch.setattr(dataset, "RENDER_BUDGET_CHARS", 40)  # one or two renderings per part
    parts = prepare(chatml, data, tmp_path / "parts", **options)
    assert (parts.written, parts.skipped, parts.records) == (whole.written, whole.skipped, whole.records)
    assert load_from_disk(str(tmp_path / "parts"))[:] == load_from_disk(str(tmp_path / "whole"))[:]
