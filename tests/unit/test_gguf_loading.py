"""A GGUF file's tokenizer is built without torch: transformers' converters fed this package's reading of the
metadata give the tokenizer transformers' own `from_pretrained(gguf_file=...)` gives, for every tokenizer model it
supports; a package the build still needs is named as missing, never blamed on the file. (Processes without torch:
tests/e2e/test_gguf_cli.py.)"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates.errors import MissingDependencyError
from hf_chat_templates.gguf import read_gguf
from hf_chat_templates.gguf.exporting import export_vocab_gguf
from hf_chat_templates.gguf.loading import load_gguf_tokenizer, tokenizer_only
from hf_chat_templates.gguf.reading import ARRAY, STRING
from hf_chat_templates.gguf.writing import BOOL, INT32, UINT32, GgufValue, encode_entry
from tests.helpers import chatml_folder

FLOAT32 = 6
TEXTS = ("Hello world", "  two  spaces", "ab ba\nabab", "<s>a</s> b<|im_end|>", "unknown ⚡ é", "")
# A small SentencePiece vocabulary: control tokens, pieces with scores, byte fallbacks.
PIECES = ("<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "▁", "a", "b", "▁a", "ab", "▁ab", "▁b", "ba", "<0x0A>")
TYPES = (2, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 6)
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def sentencepiece_gguf(path: Path, model: str, architecture: str = "llama") -> Path:
    """A vocabulary-only GGUF file of tokenizer model `model` (llama, t5, gemma4) over `PIECES`."""
    scores = tuple(0.0 if kind != 1 else -float(i) for i, kind in enumerate(TYPES))
    entries = [
        ("general.architecture", GgufValue(STRING, None, architecture)),
        ("tokenizer.ggml.model", GgufValue(STRING, None, model)),
        ("tokenizer.ggml.tokens", GgufValue(ARRAY, STRING, PIECES)),
        ("tokenizer.ggml.scores", GgufValue(ARRAY, FLOAT32, scores)),
        ("tokenizer.ggml.token_type", GgufValue(ARRAY, INT32, TYPES)),
        ("tokenizer.ggml.bos_token_id", GgufValue(UINT32, None, 1)),
        ("tokenizer.ggml.eos_token_id", GgufValue(UINT32, None, 2)),
        ("tokenizer.ggml.unknown_token_id", GgufValue(UINT32, None, 0)),
        ("tokenizer.ggml.add_space_prefix", GgufValue(BOOL, None, True)),
        ("tokenizer.chat_template", GgufValue(STRING, None, TEMPLATE)),
    ]
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + b"".join(encode_entry("<", k, v) for k, v in entries)
    path.write_bytes(header + b"\0" * (-len(header) % 32))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf-loading")
    built = {"gpt2": export_vocab_gguf(chatml_folder(root / "tok"), root / "gpt2.gguf", pre="gpt-2")}
    for model, architecture in (("llama", "llama"), ("gemma", "gemma2"), ("t5", "t5"), ("gemma4", "gemma4")):
        built[model] = sentencepiece_gguf(root / f"{model}.gguf", "llama" if model == "gemma" else model, architecture)
    return built


def saved(tokenizer: Any, folder: Path) -> dict[str, Any]:
    tokenizer.save_pretrained(str(folder))
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    for key in ("is_local", "local_files_only"):  # where from_pretrained read it from
        config.pop(key, None)
    return {"tokenizer.json": json.loads((folder / "tokenizer.json").read_text(encoding="utf-8")), "config": config}


@pytest.mark.parametrize("model", ["gpt2", "llama", "gemma", "t5", "gemma4"])
def test_the_tokenizer_is_the_one_transformers_builds_from_the_file(
    files: dict[str, Path], model: str, tmp_path: Path
) -> None:
    pytest.importorskip("torch", reason="transformers' own GGUF reader needs torch: pip install torch==2.13.0")
    from transformers import PreTrainedTokenizerFast

    gguf = read_gguf(files[model])
    ours = load_gguf_tokenizer(gguf)
    (tmp_path / "only").mkdir()
    only = tokenizer_only(gguf.path, tmp_path / "only" / gguf.path.name)  # what transformers reads
    theirs = PreTrainedTokenizerFast.from_pretrained(str(only.parent), gguf_file=only.name)
    theirs.chat_template = ours.chat_template  # type: ignore[attr-defined]
    assert saved(ours, tmp_path / "ours") == saved(theirs, tmp_path / "theirs")
    for text in TEXTS:
        for special in (True, False):
            assert ours.encode(text, add_special_tokens=special) == theirs.encode(text, add_special_tokens=special)  # type: ignore[attr-defined]


def test_a_missing_package_is_named_with_its_install_command_not_blamed_on_the_file(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import hf_chat_templates.gguf.loading as loading

    def needs_torch(gguf: Any) -> Any:
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(loading, "_build", needs_torch)
    with pytest.raises(MissingDependencyError) as caught:
        load_gguf_tokenizer(read_gguf(files["gpt2"]))
    assert "'torch'" in str(caught.value) and "not at fault" in str(caught.value)
    assert caught.value.hint is not None and "pip install torch==2.13.0" in caught.value.hint
    assert "convert the model again" not in str(caught.value) + caught.value.hint
