"""A vocabulary-only GGUF file from a tokenizer folder, as llama.cpp's `convert_hf_to_gguf.py --vocab-only` writes
the tokenizer part of one: tokens, token types, merges, special ids, add-BOS flag and chat templates, no tensors.

Only byte-level BPE tokenizers (tokenizer model `gpt2`: Llama 3, GPT-2, Qwen, o200k) are exported; anything else
is refused with the reason. The pre-tokenizer name (`tokenizer.ggml.pre`, e.g. `llama-bpe`, `gpt-4o`, `qwen2`) is
not inferred from the split pattern: the caller names it, as llama.cpp's converter does by a hash of the
tokenizer's output. Token types follow the converter: an added special token is CONTROL, an added token that is
not special USER_DEFINED, every other token NORMAL. eos is the folder's eos_token; the first other id of
generation_config.json's eos_token_id becomes eot and the next eom, so llama.cpp stops where transformers does.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TokenizerFolderError, UsageError
from ..outputs import write_file
from ..tokenizer.folder import read_folder
from .reading import (
    ARRAY,
    CONTROL,
    DEFAULT_ALIGNMENT,
    NORMAL,
    STRING,
    TEMPLATE_KEY,
    TEMPLATE_NAMES_KEY,
    USER_DEFINED,
)
from .writing import BOOL, INT32, UINT32, GgufValue, encode_entry


@dataclass(frozen=True)
class _Vocab:
    tokens: tuple[str, ...]
    types: tuple[int, ...]
    merges: tuple[str, ...]


def _byte_level_vocab(folder: Any) -> _Vocab:
    tj = folder.tokenizer_json
    model = (tj or {}).get("model", {})
    if not tj or model.get("type") != "BPE" or "ByteLevel" not in str(tj.get("pre_tokenizer")):
        raise TokenizerFolderError(
            f"{folder.path}: only byte-level BPE tokenizers (GGUF tokenizer model 'gpt2') can be exported; this one "
            f"is {model.get('type', 'not a tokenizers model')}",
            hint="convert the model with llama.cpp's convert_hf_to_gguf.py instead",
            path=folder.path,
        )
    by_id: dict[int, str] = {i: t for t, i in model["vocab"].items()}
    types = {i: NORMAL for i in by_id}
    for added in tj.get("added_tokens", []):
        by_id[added["id"]] = added["content"]
        types[added["id"]] = CONTROL if added.get("special") else USER_DEFINED
    size = max(by_id) + 1
    if missing := [i for i in range(size) if i not in by_id]:
        raise TokenizerFolderError(
            f"{folder.path}: ids {missing[:5]} have no token; a GGUF vocabulary has no holes", path=folder.path
        )
    merges = tuple(m if isinstance(m, str) else " ".join(m) for m in model.get("merges", []))
    return _Vocab(tuple(by_id[i] for i in range(size)), tuple(types[i] for i in range(size)), merges)


def _special_ids(folder: Any, tokens: tuple[str, ...]) -> dict[str, int]:
    """bos/eos/pad/unk from the folder's config; eot and eom from generation_config.json's other eos ids."""
    index = {t: i for i, t in enumerate(tokens)}
    config = folder.tokenizer_config
    ids: dict[str, int] = {}
    for name in ("bos", "eos", "pad", "unk"):
        token = config.get(f"{name}_token")
        token = token.get("content") if isinstance(token, dict) else token
        if isinstance(token, str) and token in index:
            ids[name] = index[token]
    listed = (folder.generation_config or {}).get("eos_token_id")
    listed = listed if isinstance(listed, list) else [listed] if isinstance(listed, int) else []
    others = [i for i in listed if isinstance(i, int) and i != ids.get("eos")]
    for name, token_id in zip(("eot", "eom"), others):
        ids[name] = token_id
    return ids


def _adds_bos(path: Path) -> bool:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    return tok.bos_token_id is not None and tok("a")["input_ids"][:1] == [tok.bos_token_id]


def export_vocab_gguf(
    folder: str | Path, output: str | Path, *, pre: str, architecture: str = "llama", force: bool = False
) -> Path:
    """Write the vocabulary-only GGUF file `output` for the tokenizer folder `folder` (see the module)."""
    if not pre:
        raise UsageError("pre (tokenizer.ggml.pre) names the pre-tokenizer llama.cpp applies, e.g. llama-bpe")
    src = read_folder(folder)
    output = Path(output)
    if output.exists() and not force:
        raise UsageError(f"{output}: exists", hint="choose another output, or pass force=True", path=output)
    vocab = _byte_level_vocab(src)
    entries: list[tuple[str, GgufValue]] = [
        ("general.architecture", GgufValue(STRING, None, architecture)),
        ("general.name", GgufValue(STRING, None, src.path.name)),
        ("general.alignment", GgufValue(UINT32, None, DEFAULT_ALIGNMENT)),
        ("tokenizer.ggml.model", GgufValue(STRING, None, "gpt2")),
        ("tokenizer.ggml.pre", GgufValue(STRING, None, pre)),
        ("tokenizer.ggml.tokens", GgufValue(ARRAY, STRING, vocab.tokens)),
        ("tokenizer.ggml.token_type", GgufValue(ARRAY, INT32, vocab.types)),
        ("tokenizer.ggml.merges", GgufValue(ARRAY, STRING, vocab.merges)),
    ]
    for name, token_id in _special_ids(src, vocab.tokens).items():
        key = "padding" if name == "pad" else "unknown" if name == "unk" else name
        entries.append((f"tokenizer.ggml.{key}_token_id", GgufValue(UINT32, None, token_id)))
    entries.append(("tokenizer.ggml.add_bos_token", GgufValue(BOOL, None, _adds_bos(src.path))))
    if (default := src.named_template("default")) is not None:
        entries.append((TEMPLATE_KEY, GgufValue(STRING, None, default)))
    named = sorted({*src.additional_templates, *src.config_templates()} - {"default"})
    if named:
        entries.append((TEMPLATE_NAMES_KEY, GgufValue(ARRAY, STRING, tuple(named))))
        entries += [(f"{TEMPLATE_KEY}.{n}", GgufValue(STRING, None, src.named_template(n))) for n in named]
    body = b"".join(encode_entry("<", key, value) for key, value in entries)
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + body
    write_file(output, header + b"\0" * (-len(header) % DEFAULT_ALIGNMENT))
    return Path(os.path.abspath(output))
