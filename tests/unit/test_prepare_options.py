"""`prepare --pack` and `--train-on weighted` account for every record: a row longer than a sequence is cut by
line before packing, the headline counts records (not sequences), a malformed weight counts toward --max-skipped."""

from __future__ import annotations

import json
from pathlib import Path

from hf_chat_templates import prepare

from ..helpers import CONVERSATIONS, write_jsonl


def test_pack_cuts_long_rows_by_line_and_counts_records(chatml: Path, tmp_path: Path) -> None:
    long_prompt = {"messages": [{"role": "user", "content": "word " * 400}, {"role": "assistant", "content": "ok"}]}
    lines = [json.dumps(c) for c in CONVERSATIONS] + [json.dumps(long_prompt)]
    data = write_jsonl(tmp_path / "c.jsonl", lines)
    report = prepare(chatml, data, tmp_path / "out", pack=256)
    assert report.written == len(CONVERSATIONS) and report.records == len(CONVERSATIONS) + 1
    assert report.skipped == [(len(lines), "no assistant token within the first 256 tokens")]
    assert report.packing.examples == len(CONVERSATIONS) and report.packing.dropped == 0
    assert f"prepared {len(CONVERSATIONS)} of {len(lines)} records" in report.describe()


def test_a_malformed_weight_counts_toward_max_skipped(chatml: Path, tmp_path: Path) -> None:
    weighted = json.loads(json.dumps(CONVERSATIONS[0]))
    next(m for m in weighted["messages"] if m["role"] == "assistant")["weight"] = 0.5
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(CONVERSATIONS[1]), json.dumps(weighted)])
    refused = prepare(chatml, data, tmp_path / "refused", train_on="weighted")
    assert not refused.ok and "1 normalize" in refused.over_limit
    report = prepare(chatml, data, tmp_path / "out", train_on="weighted", max_skipped=1)
    assert report.ok and report.bad_lines == [(2, "message 1: weight 0.5 is not 0 or 1")]
