"""Shared fixtures: real base tokenizers (built once, cached) and a small trained tokenizer for fast tests."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO_ROOT = Path(__file__).resolve().parent.parent
SEEDS = REPO_ROOT.parent / "shared" / "seeds"

TOY_SPECIALS = [
    "<unk>",
    "<s>",
    "</s>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|reserved_special_token_2|>",
]
TOY_TEXT = (
    "The quick brown fox jumps over the lazy dog. Привет, мир! 你好世界 🦙 tool call arguments "
    "user assistant system role message separator function result weather in Paris is sunny\n"
) * 20


def build_toy_tokenizer(folder: Path, *, add_bos: bool = True, generation_config: bool = True) -> Path:
    """A byte-level BPE trained in well under a second, with a BOS post-processor like Llama 3's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=TOY_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([TOY_TEXT], trainer=trainer)
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1", special_tokens=[("<s>", tok.token_to_id("<s>"))]
        )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(str(folder))
    if generation_config:
        (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}) + "\n")
    return folder


@pytest.fixture(scope="session")
def toy_tokenizer_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_toy_tokenizer(tmp_path_factory.mktemp("toy") / "tok")


@pytest.fixture
def toy_tokenizer(toy_tokenizer_master: Path, tmp_path: Path) -> Path:
    """A fresh copy per test, so a test may damage it."""
    target = tmp_path / "src"
    shutil.copytree(toy_tokenizer_master, target)
    return target


@pytest.fixture(scope="session")
def llama3_base() -> Path:
    from hf_chat_templates import base_tokenizer

    return base_tokenizer("llama3")


@pytest.fixture(scope="session")
def o200k_base() -> Path:
    from hf_chat_templates import base_tokenizer

    return base_tokenizer("o200k-harmony")


@pytest.fixture(scope="session")
def sp_base() -> Path:
    from hf_chat_templates import base_tokenizer

    return base_tokenizer("mistral-v3-sp")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes, to assert a folder was not touched."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def installed_variants(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """Every bundled family and variant installed once on its default base tokenizer."""
    from hf_chat_templates import install, list_families

    root = tmp_path_factory.mktemp("variants")
    folders = {}
    for family in list_families():
        base = base_tokenizer_path(family.base_tokenizer)
        for variant in family.variants.values():
            folder = root / f"{family.name}-{variant.name}"
            install(family, base, folder, variant=variant.name)
            folders[(family.name, variant.name)] = folder
    return folders


def base_tokenizer_path(name: str) -> Path:
    from hf_chat_templates import base_tokenizer

    return base_tokenizer(name)
