"""The tokenizer a GGUF file describes, as transformers builds it from the metadata, saved as a tokenizer folder
so every check `verify` runs on a folder runs on it.

transformers' GGUF tokenizer converters (`transformers.integrations.gguf.gguf_tokenizer_mapping`: the builders by
`tokenizer.ggml.model`, the special and added tokens, the split regex by `tokenizer.ggml.pre`) are given the
tokenizer metadata as this package reads it; transformers' own GGUF reader, which `from_pretrained(gguf_file=...)`
uses, imports torch, and a tokenizer needs none. What `gguf_tokenizer_arguments` gives the converters is what
transformers' `get_gguf_tokenizer` gives them (tests/unit/test_gguf_loading.py compares the two tokenizers where
torch is installed). Only the tokenizer models in `SUPPORTED_MODELS` are built; any other is refused with that
list. The GGUF's stop ids (eos, eot, eom) are written to the folder's generation_config.json, which is where the
checks read stop ids from.
"""

from __future__ import annotations

import json
import struct
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import MissingDependencyError, UsageError
from .arrays import LazyArray
from .reading import MAGIC, GgufFileError, GgufTokenizer, read_gguf, read_layout

# tokenizer.ggml.model values transformers can build a tokenizer from (integrations/gguf: GGUF_TOKENIZER_TYPES).
SUPPORTED_MODELS = ("gpt2", "llama", "t5", "gemma4")
# transformers' names for the special tokens a GGUF declares by id (gguf_tokenizer_mapping._SPECIAL_TOKENS).
_SPECIAL_TOKENS = {
    "bos_token": "bos_token_id",
    "eos_token": "eos_token_id",
    "unk_token": "unknown_token_id",
    "pad_token": "padding_token_id",
}
# How to install a package transformers' GGUF path may need; torch is the CPU build the trl extra pins.
_INSTALL = {"torch": "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"}


def load_gguf_tokenizer(gguf: GgufTokenizer) -> object:
    """transformers' tokenizer for the GGUF file, with its chat templates."""
    if gguf.model not in SUPPORTED_MODELS:
        raise UsageError(
            f"{gguf.path}: transformers cannot build a tokenizer from GGUF tokenizer model {gguf.model!r} "
            f"(it can from: {', '.join(SUPPORTED_MODELS)})",
            hint="verify the tokenizer folder the model was converted from, or compare with --against FOLDER",
            path=gguf.path,
            key="tokenizer.ggml.model",
        )
    try:
        tok = _build(gguf)
    except (GgufFileError, MissingDependencyError):
        raise
    except ModuleNotFoundError as err:
        raise _missing(gguf, err) from None
    except Exception as err:
        raise GgufFileError(
            f"{gguf.path}: transformers could not build its tokenizer ({type(err).__name__}: {err})",
            hint="check the file with llama.cpp (llama-tokenize --vocab-only), or convert the model again",
            path=gguf.path,
        ) from None
    templates = dict(gguf.named_templates)
    if gguf.chat_template is not None:
        templates["default"] = gguf.chat_template
    tok.chat_template = templates.get("default") if set(templates) <= {"default"} else templates
    return tok


def _missing(gguf: GgufTokenizer, err: ModuleNotFoundError) -> MissingDependencyError:
    package = (err.name or str(err)).split(".")[0]
    return MissingDependencyError(
        f"{gguf.path}: building the GGUF file's tokenizer with this transformers needs the package {package!r}, "
        "which is not installed (the file is not at fault)",
        hint=_INSTALL.get(package, f"pip install {package}"),
        path=gguf.path,
    )


def _build(gguf: GgufTokenizer) -> Any:
    from transformers import PreTrainedTokenizerFast

    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            GGUF_TOKENIZER_MAPPING,
            convert_gguf_tokenizer,
        )
    except ImportError:  # a transformers without the torch-free converters: its own reader, which needs torch
        with tempfile.TemporaryDirectory(prefix="hfct-gguf-") as tmp:
            only = tokenizer_only(gguf.path, Path(tmp) / gguf.path.name)
            return PreTrainedTokenizerFast.from_pretrained(str(only.parent), gguf_file=only.name)
    architecture, tokenizer, config = gguf_tokenizer_arguments(gguf.path, GGUF_TOKENIZER_MAPPING)
    backend, extra = convert_gguf_tokenizer(architecture, tokenizer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, **config, **extra)


def gguf_tokenizer_arguments(
    path: Path, mapping: Mapping[str, Mapping[str, str]]
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """`(architecture, tokenizer_dict, tokenizer_config)` as transformers' `get_gguf_tokenizer` returns them for
    the file, read by this package's reader: `mapping` (transformers' GGUF_TOKENIZER_MAPPING) renames the
    tokenizer keys; arrays become lists."""
    layout = read_layout(path)
    wanted = {f"tokenizer.{key}" for renames in mapping.values() for key in renames}
    metadata: dict[str, Any] = {
        e.key: list(e.value) if isinstance(e.value, LazyArray) else e.value for e in layout.entries if e.key in wanted
    }
    architecture = layout.get("general.architecture")
    if not isinstance(architecture, str):
        raise GgufFileError(
            f"{path}: general.architecture is missing or not a string; transformers needs it to build the tokenizer",
            hint="convert the model again (convert_hf_to_gguf.py writes it)",
            path=path,
            key="general.architecture",
        )
    grouped = {
        group: {name: metadata[f"tokenizer.{key}"] for key, name in renames.items() if f"tokenizer.{key}" in metadata}
        for group, renames in mapping.items()
    }
    tokenizer, config = grouped["tokenizer"], grouped["tokenizer_config"]
    if tokenizer.get("tokenizer_type") == "llama":  # llama.cpp adds BOS to a SentencePiece vocabulary by default
        config.setdefault("add_bos_token", True)
    elif tokenizer.get("tokenizer_type") == "gemma4":  # the chat template writes <bos> itself
        config["add_bos_token"] = False
    for name, key in _SPECIAL_TOKENS.items():
        token_id = metadata.get(f"tokenizer.ggml.{key}")
        config[name] = tokenizer["tokens"][token_id] if token_id is not None else None
    return architecture, tokenizer, config


def tokenizer_only(path: Path, output: Path) -> Path:
    """A copy of the GGUF file's header with only its tokenizer keys (and architecture), no tensors: what
    transformers reads to build the tokenizer. transformers' reader turns every metadata array into Python lists;
    given the whole file, an array that is no tokenizer's (a hostile one of 50 million integers) would cost ten
    times its size."""
    layout = read_layout(path)
    keep = [e for e in layout.entries if e.key.startswith("tokenizer.") or e.key == "general.architecture"]
    with path.open("rb") as source, output.open("wb") as out:
        out.write(MAGIC + struct.pack(layout.byte_order + "IQQ", layout.version, 0, len(keep)))
        for entry in keep:
            source.seek(entry.start)
            out.write(source.read(entry.end - entry.start))
    return output


def gguf_tokenizer_folder(gguf: GgufTokenizer | str | Path, output: str | Path) -> Path:
    """Save the GGUF's tokenizer as the folder `output` (a new or empty folder): tokenizer files, chat templates,
    and generation_config.json with the GGUF's bos and stop ids."""
    gguf = gguf if isinstance(gguf, GgufTokenizer) else read_gguf(gguf)
    tok = load_gguf_tokenizer(gguf)
    out = Path(output)
    tok.save_pretrained(str(out))  # type: ignore[attr-defined]
    generation: dict[str, object] = {"eos_token_id": list(gguf.stop_token_ids)}
    if gguf.bos_token_id is not None:
        generation["bos_token_id"] = gguf.bos_token_id
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    return out
