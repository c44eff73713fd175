"""`prepare`: labels equal transformers' assistant masks, bad lines are reported by number, truncation, and the
CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import TrainingFeatures, derive_training_template, prepare
from hf_chat_templates.errors import OutputExistsError
from hf_chat_templates.training.features import IGNORE_INDEX

from ..helpers import CONTROL, CONVERSATIONS, GOOD, expected_labels, marked, run, snapshot, with_training, write_jsonl


def test_labels_equal_transformers_assistant_masks(chatml: Path, tmp_path: Path) -> None:
    from datasets import load_from_disk

    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(c) for c in CONVERSATIONS])
    report = prepare(chatml, data, tmp_path / "out")
    assert (report.records, report.written, report.skipped, report.bad_lines) == (3, 3, [], [])
    ds = load_from_disk(str(tmp_path / "out"))
    assert ds.column_names == ["input_ids", "attention_mask", "labels"]
    training = derive_training_template(GOOD, ["<|im_end|>"], CONTROL)
    for row, record in zip(ds, CONVERSATIONS):
        assert row["labels"] == expected_labels(chatml, training, record)
        assert row["attention_mask"] == [1] * len(row["input_ids"])
    assert report.trained_tokens == sum(sum(x != IGNORE_INDEX for x in row["labels"]) for row in ds)


def test_bad_lines_are_reported_by_number_and_skipped(chatml: Path, tmp_path: Path) -> None:
    lines = [
        json.dumps(CONVERSATIONS[0]),
        "{not json",
        json.dumps({"messages": "hello"}),
        json.dumps({"messages": [{"role": "user", "content": "no answer"}]}),
        "",
        json.dumps(CONVERSATIONS[1]),
    ]
    data = write_jsonl(tmp_path / "c.jsonl", lines)
    refused = prepare(chatml, data, tmp_path / "refused")
    assert refused.written == 0 and not refused.ok and "--max-skipped" in refused.over_limit
    assert not (tmp_path / "refused").exists()  # nothing written past the limit
    report = prepare(chatml, data, tmp_path / "out", max_skipped=2)
    assert report.written == 2 and report.records == 5 and report.ok
    assert [n for n, _ in report.bad_lines] == [2, 3]
    assert report.skipped == [(4, "no assistant turn to train")]
    text = report.describe()
    assert "line 2: not JSON" in text and "line 4: no assistant turn to train" in text
    assert "skipped 3 line(s)" in text


def test_max_length_truncates_and_skips_records_with_nothing_left_to_train(chatml: Path, tmp_path: Path) -> None:
    from datasets import load_from_disk

    long_prompt = {"messages": [{"role": "user", "content": "word " * 400}, {"role": "assistant", "content": "ok"}]}
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(CONVERSATIONS[1]), json.dumps(long_prompt)])
    full = TrainingFeatures(chatml).features([CONVERSATIONS[1]])[0]["input_ids"][0]
    limit = len(full) - 3
    report = prepare(chatml, data, tmp_path / "out", max_length=limit)
    ds = load_from_disk(str(tmp_path / "out"))
    assert report.truncated == 2 and report.written == 1
    assert report.skipped == [(2, f"no assistant token within the first {limit} tokens")]
    assert ds["input_ids"] == [full[:limit]]


def test_nothing_to_train_writes_no_output(chatml: Path, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps({"messages": [{"role": "user", "content": "hi"}]})])
    report = prepare(chatml, data, tmp_path / "out")
    assert report.written == 0 and not (tmp_path / "out").exists()
    assert "no output written" in report.describe()
    assert [p.name for p in tmp_path.iterdir()] == ["c.jsonl", "tok"]  # no staging left behind


def test_an_existing_output_is_kept_unless_forced(chatml: Path, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(CONVERSATIONS[0])])
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(OutputExistsError, match="exists and is not empty"):
        prepare(chatml, data, out)
    assert (out / "mine.txt").read_text() == "keep me"
    prepare(chatml, data, out, force=True)
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("out.replaced-")]
    assert len(kept) == 1 and (kept[0] / "mine.txt").read_text() == "keep me"


def test_cli_prepare_prints_the_counts_and_exits_0(chatml: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(CONVERSATIONS[0]), "oops"])
    code, out, err = run(
        capsys, "prepare", str(chatml), "--conversations", str(data), "--output", str(tmp_path / "out")
    )
    assert code == 1 and "refused:" in out and "--max-skipped" in out  # one bad line, over the default 0
    assert not (tmp_path / "out").exists()
    code, out, err = run(
        capsys,
        *("prepare", str(chatml), "--conversations", str(data), "--output", str(tmp_path / "out")),
        *("--max-skipped", "1"),
    )
    assert code == 0, err
    assert "prepared 1 of 2 records" in out and "line 2: not JSON" in out
    before = snapshot(tmp_path / "out")
    code, _, err = run(capsys, "prepare", str(chatml), "--conversations", str(data), "--output", str(tmp_path / "out"))
    assert code == 2 and "error:" in err and "--force" in err
    assert snapshot(tmp_path / "out") == before


def test_cli_prepare_rejects_a_bad_kwarg(chatml: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(CONVERSATIONS[0])])
    code, _, err = run(
        capsys,
        "prepare",
        str(chatml),
        "--conversations",
        str(data),
        "--output",
        str(tmp_path / "out"),
        "--kwarg",
        "nonsense",
    )
    assert code == 2 and "--kwarg 'nonsense' is not NAME=VALUE" in err
    assert not (tmp_path / "out").exists()


def test_hand_written_generation_markers_are_used_as_they_are(chatml: Path, tmp_path: Path) -> None:
    from datasets import load_from_disk

    with_training(chatml, marked(False, True))
    records = [CONVERSATIONS[0], CONVERSATIONS[1]]
    report = prepare(chatml, write_jsonl(tmp_path / "c.jsonl", [json.dumps(c) for c in records]), tmp_path / "out")
    assert "markers of the folder's 'training' template" in report.spans_from
    ds = load_from_disk(str(tmp_path / "out"))
    for row, record in zip(ds, records):
        assert row["labels"] == expected_labels(chatml, marked(False, True), record)
