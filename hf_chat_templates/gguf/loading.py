"""The tokenizer a GGUF file describes, as transformers builds it from the metadata, saved as a tokenizer folder
so every check `verify` runs on a folder runs on it.

transformers builds it (`from_pretrained(dir, gguf_file=name)`, the tokenizer part of
`AutoTokenizer.from_pretrained`; the config part is skipped since a tokenizer needs none) for the tokenizer models
in `SUPPORTED_MODELS`; any other model is refused with that list. The GGUF's stop ids (eos, eot, eom) are written to
the folder's generation_config.json, which is where the checks read stop ids from.
"""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

from ..errors import UsageError
from .reading import MAGIC, GgufFileError, GgufTokenizer, read_gguf, read_layout

# tokenizer.ggml.model values transformers can build a tokenizer from (integrations/gguf: GGUF_TOKENIZER_TYPES).
SUPPORTED_MODELS = ("gpt2", "llama", "t5", "gemma4")


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
    from transformers import PreTrainedTokenizerFast

    try:
        with tempfile.TemporaryDirectory(prefix="hfct-gguf-") as tmp:
            only = tokenizer_only(gguf.path, Path(tmp) / gguf.path.name)
            tok = PreTrainedTokenizerFast.from_pretrained(str(only.parent), gguf_file=only.name)
    except GgufFileError:
        raise
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
