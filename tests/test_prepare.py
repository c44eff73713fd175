"""`prepare`: labels equal transformers' assistant masks, bad lines are reported by number, truncation, the
picklable per-batch function in datasets.map, and the CLI."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from hf_chat_templates.errors import OutputExistsError
from hf_chat_templates import install
from hf_chat_templates import TrainingFeatures, prepare
from hf_chat_templates.training.features import IGNORE_INDEX
from hf_chat_templates import derive_training_template

from .conftest import snapshot
from .test_cli import run
from .test_verify_checks import CONTROL, GOOD, chatml_folder

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello, friend"}]},
    {"messages": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "One?"},
                  {"role": "assistant", "content": "Yes"}, {"role": "user", "content": "Two?"},
                  {"role": "assistant", "content": "Also yes"}]},
    {"messages": [{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
                  {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "It is sunny"}],
     "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]},
]


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def chatml(tmp_path: Path) -> Path:
    return chatml_folder(tmp_path / "tok")


def expected_labels(folder: Path, template: str, record: dict) -> list[int]:
    """What transformers' own assistant mask gives with the derived training template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    out = tok.apply_chat_template(record["messages"], tools=record.get("tools"), chat_template=template,
                                  tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    return [i if m else IGNORE_INDEX for i, m in zip(out["input_ids"], out["assistant_masks"])]


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
    lines = [json.dumps(CONVERSATIONS[0]), "{not json", json.dumps({"messages": "hello"}),
             json.dumps({"messages": [{"role": "user", "content": "no answer"}]}), "",
             json.dumps(CONVERSATIONS[1])]
    report = prepare(chatml, write_jsonl(tmp_path / "c.jsonl", lines), tmp_path / "out")
    assert report.written == 2 and report.records == 5
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


def test_the_batch_function_pickles_and_runs_in_datasets_map(chatml: Path) -> None:
    from datasets import Dataset

    features = TrainingFeatures(chatml)
    features.features([CONVERSATIONS[0]])  # loaded state is not pickled, only the settings
    clone = pickle.loads(pickle.dumps(features))
    assert clone._state is None
    ds = Dataset.from_list([{"messages": c["messages"]} for c in CONVERSATIONS[:2]])
    mapped = ds.map(clone, batched=True, remove_columns=ds.column_names, num_proc=2)
    direct, _ = features.features([{"messages": c["messages"]} for c in CONVERSATIONS[:2]])
    assert mapped["labels"] == direct["labels"]


@pytest.mark.slow
def test_training_template_and_rendering_differences_give_the_same_dataset(tmp_path: Path,
                                                                         installed_variants: dict) -> None:
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


def test_cli_prepare_prints_the_counts_and_exits_0(chatml: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(CONVERSATIONS[0]), "oops"])
    code, out, err = run(capsys, "prepare", str(chatml), "--conversations", str(data), "--output",
                         str(tmp_path / "out"))
    assert code == 0, err
    assert "prepared 1 of 2 records" in out and "line 2: not JSON" in out
    before = snapshot(tmp_path / "out")
    code, _, err = run(capsys, "prepare", str(chatml), "--conversations", str(data), "--output", str(tmp_path / "out"))
    assert code == 2 and "error:" in err and "--force" in err
    assert snapshot(tmp_path / "out") == before


def test_cli_prepare_rejects_a_bad_kwarg(chatml: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(CONVERSATIONS[0])])
    code, _, err = run(capsys, "prepare", str(chatml), "--conversations", str(data), "--output",
                       str(tmp_path / "out"), "--kwarg", "nonsense")
    assert code == 2 and "--kwarg 'nonsense' is not NAME=VALUE" in err
    assert not (tmp_path / "out").exists()


def test_hand_written_generation_markers_are_used_as_they_are(chatml: Path, tmp_path: Path) -> None:
    from datasets import load_from_disk

    from .test_training import _marked, _with_training

    _with_training(chatml, _marked(False, True))
    records = [CONVERSATIONS[0], CONVERSATIONS[1]]
    report = prepare(chatml, write_jsonl(tmp_path / "c.jsonl", [json.dumps(c) for c in records]), tmp_path / "out")
    assert "markers of the folder's 'training' template" in report.spans_from
    ds = load_from_disk(str(tmp_path / "out"))
    for row, record in zip(ds, records):
        assert row["labels"] == expected_labels(chatml, _marked(False, True), record)
