"""Batches in worker processes: `verify --conversations` in spawned workers, and prepare's per-batch function
pickled into datasets.map's worker processes."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from hf_chat_templates import TrainingFeatures

from ..helpers import CONVERSATIONS


def test_conversations_with_workers(good: Path, tmp_path: Path) -> None:
    from hf_chat_templates.verification.dataset import verify_conversations

    data = tmp_path / "data.jsonl"
    record = {"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}]}
    data.write_text("\n".join(json.dumps(record) for _ in range(600)) + "\n")
    report = verify_conversations(good, data, workers=2)
    assert report.records == 600 and report.ok


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
