"""TRL's SFTTrainer with assistant_only_loss=True on a tokenizer installed with --training.

Optional: TRL needs torch. Install the extra with `pip install -e '.[trl]'` (it pins the CPU build torch==2.13.0);
without TRL and torch these tests are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_chat_templates import install, prepare
from hf_chat_templates.training.features import IGNORE_INDEX

from ..helpers import tiny_llama, write_jsonl

pytestmark = pytest.mark.trl

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello, friend."}]},
    {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "One?"},
            {"role": "assistant", "content": "Yes."},
            {"role": "user", "content": "Two?"},
            {"role": "assistant", "content": "Also yes."},
        ]
    },
]


def _trainer(tokenizer_dir: Path, tmp_path: Path, chat_template_path: Path | None):  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    args = trl.SFTConfig(
        output_dir=str(tmp_path / "run"),
        assistant_only_loss=True,
        max_length=256,
        report_to=[],
        use_cpu=True,
        dataset_num_proc=None,
        chat_template_path=str(chat_template_path) if chat_template_path else None,
    )
    return trl.SFTTrainer(
        model=tiny_llama(tok), args=args, processing_class=tok, train_dataset=Dataset.from_list(CONVERSATIONS)
    )


@pytest.fixture(scope="module")
def llama_training(installed_variants: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trl") / "tok"
    install("llama3.2-pythonic", installed_variants[("llama3.2-pythonic", "corrected")], out, training=True)
    return out


def test_sft_trainer_masks_equal_prepare_labels(llama_training: Path, tmp_path: Path) -> None:
    from datasets import load_from_disk

    trainer = _trainer(llama_training, tmp_path, llama_training / "additional_chat_templates" / "training.jinja")
    rows = trainer.train_dataset
    assert "labels" in rows.column_names  # TRL turns the assistant mask into labels (-100 elsewhere)
    data = write_jsonl(tmp_path / "c.jsonl", [json.dumps(c) for c in CONVERSATIONS])
    prepare(llama_training, data, tmp_path / "ours")
    ours = load_from_disk(str(tmp_path / "ours"))
    for theirs, mine in zip(rows, ours):
        assert theirs["input_ids"] == mine["input_ids"]
        assert theirs["labels"] == mine["labels"]
    eot = trainer.processing_class.convert_tokens_to_ids("<|eot_id|>")
    trained = [label for label in rows[0]["labels"] if label != IGNORE_INDEX]
    assert trained[-1] == eot  # the model learns to stop


def test_sft_trainer_without_the_training_template_cannot_mask(llama_training: Path, tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"(?i)template|generation"):
        _trainer(llama_training, tmp_path, None)
