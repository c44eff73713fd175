"""Packed rows against TRL: the same rows as TRL's own best-fit-decreasing `pack_dataset`, the same batch as TRL's
padding-free collator and transformers' `DataCollatorWithFlattening` make of the examples unpacked, and one
SFTTrainer step on them.

Optional: TRL needs torch (`pip install -e '.[trl]'`); without them these tests are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates import TrainingFeatures, prepare
from hf_chat_templates.training.features import IGNORE_INDEX
from hf_chat_templates.training.packing import best_fit_decreasing, pack

from ..helpers import CONVERSATIONS, tiny_llama

pytestmark = pytest.mark.trl

SEQ_LEN = 96
RECORDS = [
    *CONVERSATIONS,
    *(
        {"messages": [{"role": "user", "content": "word " * n}, {"role": "assistant", "content": "ok " * (n % 5 + 1)}]}
        for n in range(1, 24)
    ),
]


@pytest.fixture(scope="module")
def unpacked(good: Path) -> dict[str, list[list[int]]]:
    features = TrainingFeatures(good)
    table, problems, _ = features.batch_table(*features.render_batch(RECORDS))
    assert problems == []
    return {name: table.column(name).to_pylist() for name in ("input_ids", "labels")}


def _trainable(unpacked: dict[str, list[list[int]]]) -> list[dict[str, list[int]]]:
    """The examples as SFTTrainer packs them: truncated to SEQ_LEN, those with nothing left to train dropped."""
    rows = [
        {"input_ids": ids[:SEQ_LEN], "labels": labels[:SEQ_LEN]}
        for ids, labels in zip(unpacked["input_ids"], unpacked["labels"])
    ]
    return [row for row in rows if any(label != IGNORE_INDEX for label in row["labels"])]


def test_the_rows_equal_trl_pack_dataset(unpacked: dict[str, list[list[int]]]) -> None:
    pytest.importorskip("torch")
    data_utils = pytest.importorskip("trl.data_utils")
    from datasets import Dataset

    trainable = _trainable(unpacked)
    theirs = data_utils.pack_dataset(Dataset.from_list(trainable), SEQ_LEN, strategy="bfd")
    ours, stats = pack(unpacked, SEQ_LEN)
    lengths = [len(ids) for ids in unpacked["input_ids"]]
    assert stats.dropped == len(lengths) - len(trainable) > 0
    assert stats.truncated == sum(len(ids) > SEQ_LEN for ids in unpacked["input_ids"]) - stats.dropped > 0
    assert stats.sequences == len(theirs) > 1
    assert theirs["input_ids"] == ours["input_ids"]
    assert theirs["seq_lengths"] == ours["seq_lengths"]
    assert [_first_masked(row, n) for row, n in zip(theirs["labels"], theirs["seq_lengths"])] == ours["labels"]


def _first_masked(labels: list[int], seq_lengths: list[int]) -> list[int]:
    starts = {sum(seq_lengths[:k]) for k in range(len(seq_lengths))}
    return [IGNORE_INDEX if i in starts else label for i, label in enumerate(labels)]


def _bins(unpacked: dict[str, list[list[int]]]) -> list[list[dict[str, Any]]]:
    """The examples of each packed row, in its order."""
    rows = _trainable(unpacked)
    return [[rows[i] for i in row] for row in best_fit_decreasing([len(r["input_ids"]) for r in rows], SEQ_LEN)]


def test_collators_make_the_same_batch_of_the_examples_unpacked(unpacked: dict[str, list[list[int]]]) -> None:
    pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    from transformers import DataCollatorWithFlattening

    padding_free = trl.trainer.sft_trainer.DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)
    flattening = DataCollatorWithFlattening(return_position_ids=True)
    ours, _ = pack(unpacked, SEQ_LEN)
    for k, examples in enumerate(_bins(unpacked)):
        expected = {name: ours[name][k] for name in ("input_ids", "labels", "position_ids")}
        for collated in (padding_free(examples), flattening(examples, return_tensors="pt")):
            assert {name: collated[name][0].tolist() for name in expected} == expected
        row = {"input_ids": ours["input_ids"][k], "labels": ours["labels"][k], "seq_lengths": ours["seq_lengths"][k]}
        collated = padding_free([row])
        assert collated["position_ids"][0].tolist() == expected["position_ids"]
        assert collated["labels"][0].tolist() == expected["labels"]


def test_sft_trainer_takes_a_step_on_prepares_packed_output(good: Path, unpacked: dict, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(good))
    args = trl.SFTConfig(
        output_dir=str(tmp_path / "run"),
        padding_free=True,
        max_length=None,
        max_steps=1,
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        dataset_num_proc=None,
    )
    data = tmp_path / "c.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n", encoding="utf-8")
    report = prepare(good, data, tmp_path / "packed", pack=SEQ_LEN)
    assert report.ok and report.packing.sequences > 0, report.describe()
    dataset = load_from_disk(str(tmp_path / "packed"))
    packed, _ = pack(unpacked, SEQ_LEN)
    assert dataset["input_ids"] == packed["input_ids"] and dataset["position_ids"] == packed["position_ids"]
    trainer = trl.SFTTrainer(model=tiny_llama(tok), args=args, processing_class=tok, train_dataset=dataset)
    assert trainer.train_dataset["input_ids"] == packed["input_ids"]
    assert trainer.train_dataset["labels"] == packed["labels"]
    result = trainer.train()
    assert trainer.state.global_step == 1 and result.training_loss == result.training_loss  # a number, not NaN
