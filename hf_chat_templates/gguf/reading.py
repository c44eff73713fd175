"""Reading a GGUF file's metadata: the chat templates and the tokenizer llama.cpp and Ollama use, without weights.

A GGUF file is a header (magic `GGUF`, version, tensor count, key/value count), the key/value metadata, the tensor
infos, padding to the alignment, then the tensor data. `read_layout` parses everything before the tensor data and
records where each key/value starts and ends, so `writing.write_gguf` can copy every byte it does not change;
`read_gguf` turns the tokenizer keys into a `GgufTokenizer`. The tensor data is never read. Version 1 files (before
August 2023) are refused; both byte orders are read.

>>> gguf = read_gguf("model.gguf")          # doctest: +SKIP
>>> gguf.chat_template, gguf.eos_token_id   # doctest: +SKIP
"""

from __future__ import annotations

import array
import mmap
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TokenizerFolderError
from .arrays import LazyArray, NumberArray, StringArray

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
# GGUF value types: id -> (struct code, size); 8 is a string, 9 an array.
SCALARS = {
    0: ("B", 1),
    1: ("b", 1),
    2: ("H", 2),
    3: ("h", 2),
    4: ("I", 4),
    5: ("i", 4),
    6: ("f", 4),
    7: ("?", 1),
    10: ("Q", 8),
    11: ("q", 8),
    12: ("d", 8),
}
STRING, ARRAY = 8, 9
# llama.cpp's token types (tokenizer.ggml.token_type).
TOKEN_TYPES = {0: "UNDEFINED", 1: "NORMAL", 2: "UNKNOWN", 3: "CONTROL", 4: "USER_DEFINED", 5: "UNUSED", 6: "BYTE"}
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4
TEMPLATE_KEY = "tokenizer.chat_template"
TEMPLATE_NAMES_KEY = "tokenizer.chat_templates"
# The special token ids a GGUF may declare, by the name GgufTokenizer gives them.
SPECIAL_ID_KEYS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "eot": "tokenizer.ggml.eot_token_id",
    "eom": "tokenizer.ggml.eom_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
}


class GgufFileError(TokenizerFolderError):
    """A GGUF file is missing, not a GGUF file, truncated or corrupt (where: `path` and the byte offset)."""


@dataclass(frozen=True)
class KeyValue:
    """One metadata entry: its key, GGUF value type (and item type for an array), value, and byte span."""

    key: str
    type: int
    item_type: int | None
    value: Any
    start: int
    end: int


@dataclass(frozen=True)
class GgufLayout:
    """Where everything before the tensor data lies in the file."""

    path: Path
    byte_order: str  # "<" or ">"
    version: int
    tensor_count: int
    entries: tuple[KeyValue, ...]
    tensor_info: tuple[int, int]  # byte span of the tensor infos
    alignment: int
    data_offset: int
    size: int

    def get(self, key: str, default: Any = None) -> Any:
        return next((e.value for e in self.entries if e.key == key), default)


class _Cursor:
    """Reads values off the mapped file; anything past its end, or invalid, is a GgufFileError naming the offset."""

    def __init__(self, path: Path, data: Any, order: str) -> None:
        self.path, self.data, self.order, self.pos = path, data, order, 0

    def fail(self, what: str, at: int | None = None) -> GgufFileError:
        at = self.pos if at is None else at
        return GgufFileError(
            f"{self.path}: {what} at byte {at}; the file is truncated or corrupt",
            hint="download the file again (compare its size and sha256 with the source)",
            path=self.path,
        )

    def take(self, size: int, what: str) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise self.fail(f"{what} runs past the end of the file ({len(self.data)} bytes)")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return bytes(chunk)

    def scalar(self, code: str, size: int, what: str) -> Any:
        return struct.unpack(self.order + code, self.take(size, what))[0]

    def string(self, what: str) -> str:
        start = self.pos
        raw = self.take(self.scalar("Q", 8, what), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8", start) from None

    def value(self, kind: int, what: str) -> tuple[Any, int | None]:
        if kind in SCALARS:
            return self.scalar(*SCALARS[kind], what), None
        if kind == STRING:
            return self.string(what), None
        if kind != ARRAY:
            raise self.fail(f"{what} has the unknown value type {kind}")
        item = self.scalar("I", 4, what)
        count = self.scalar("Q", 8, what)
        if item in SCALARS:
            size = SCALARS[item][1] * count
            if size < 0 or self.pos + size > len(self.data):
                raise self.fail(f"{what} runs past the end of the file ({len(self.data)} bytes)")
            with memoryview(self.data) as whole, whole[self.pos : self.pos + size] as raw:  # one copy, not two
                values = NumberArray(raw, item, self.order)
            self.pos += size
            return values, item
        if item == STRING:
            start, offsets = self.pos, array.array("Q")
            for i in range(count):  # each checked (in the file, UTF-8), then dropped: decoded again when read
                offsets.append(self.pos - start + 8)
                self.string(f"{what}[{i}]")
            return StringArray(bytes(self.data[start : self.pos]), offsets), item
        raise self.fail(f"{what} is an array of the unsupported type {item}")


def is_gguf(path: str | Path | None) -> bool:
    """Whether `path` names a GGUF file: by its suffix, or by the magic of a file with another name."""
    if not path:
        return False
    path = Path(path)
    if path.suffix.lower() == ".gguf":
        return True
    try:
        if not path.is_file():
            return False
        with path.open("rb") as handle:
            return handle.read(4) == MAGIC
    except OSError:
        return False


def _open(path: Path) -> tuple[Any, Any]:
    if not path.exists():
        raise GgufFileError(f"{path}: no such file", hint="pass the path of a .gguf file", path=path)
    if not path.is_file():
        raise GgufFileError(f"{path}: not a file", hint="pass the path of a .gguf file", path=path)
    if path.stat().st_size == 0:
        raise GgufFileError(f"{path}: the file is empty, not a GGUF file", hint="pass a .gguf file", path=path)
    try:
        handle = path.open("rb")
    except OSError as err:
        raise GgufFileError(f"{path}: cannot read ({err.strerror or err})", path=path) from None
    try:
        return handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as err:
        handle.close()
        raise GgufFileError(f"{path}: cannot read ({err.strerror or err})", path=path) from None


def read_layout(path: str | Path) -> GgufLayout:
    """Parse everything before the tensor data, or raise GgufFileError saying what is wrong and at which byte."""
    path = Path(path)
    handle, data = _open(path)
    try:
        return _parse(path, data)
    finally:
        data.close()
        handle.close()


def _parse(path: Path, data: Any) -> GgufLayout:
    if bytes(data[:4]) != MAGIC:
        raise GgufFileError(
            f"{path}: not a GGUF file (it starts with {bytes(data[:4])!r}, not b'GGUF')",
            hint="pass a .gguf file as llama.cpp's converter writes it",
            path=path,
        )
    order = "<" if len(data) < 8 or struct.unpack("<I", data[4:8])[0] & 0xFFFF else ">"
    cur = _Cursor(path, data, order)
    cur.pos = 4
    version = cur.scalar("I", 4, "the version")
    if version not in VERSIONS:
        raise GgufFileError(
            f"{path}: GGUF version {version} is not supported (versions {', '.join(map(str, VERSIONS))} are)",
            hint="convert the model again with a current llama.cpp (convert_hf_to_gguf.py)",
            path=path,
        )
    tensor_count = cur.scalar("Q", 8, "the tensor count")
    kv_count = cur.scalar("Q", 8, "the key/value count")
    entries: list[KeyValue] = []
    seen: set[str] = set()
    for index in range(kv_count):
        start = cur.pos
        key = cur.string(f"the key of metadata entry {index}")
        kind = cur.scalar("I", 4, f"the type of {key!r}")
        if key in seen:  # a key given twice: readers disagree on which one wins
            raise cur.fail(f"the key {key!r} is given twice (metadata entry {index})", start)
        seen.add(key)
        value, item = cur.value(kind, f"the value of {key!r}")
        entries.append(KeyValue(key, kind, item, value, start, cur.pos))
    info_start = cur.pos
    for index in range(tensor_count):
        name = cur.string(f"the name of tensor {index}")
        dims = cur.scalar("I", 4, f"the dimension count of tensor {name!r}")
        cur.take(8 * dims + 4 + 8, f"the shape, type and offset of tensor {name!r}")
    layout_entries = tuple(entries)
    alignment = next((e.value for e in entries if e.key == "general.alignment"), DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise cur.fail(f"general.alignment {alignment!r} is not a power of two", 0)
    data_offset = -(-cur.pos // alignment) * alignment
    if data_offset > len(data):
        raise cur.fail("the tensor data starts past the end of the file", cur.pos)
    return GgufLayout(
        path, order, version, tensor_count, layout_entries, (info_start, cur.pos), alignment, data_offset, len(data)
    )


@dataclass(frozen=True)
class GgufTokenizer:
    """What a GGUF file says about its tokenizer and chat templates, as a value. Ids are None when not declared;
    `add_bos_token`/`add_eos_token` are None when the file does not set them (llama.cpp then decides by model)."""

    path: Path
    architecture: str | None
    model: str | None  # tokenizer.ggml.model: gpt2 (byte-level BPE), llama (SentencePiece), t5, bert, ...
    pre: str | None  # tokenizer.ggml.pre: the pre-tokenizer llama.cpp applies (llama-bpe, qwen2, ...)
    tokens: Sequence[str] = field(repr=False)
    token_types: Sequence[int] = field(repr=False)
    chat_template: str | None
    named_templates: Mapping[str, str]
    bos_token_id: int | None
    eos_token_id: int | None
    eot_token_id: int | None
    eom_token_id: int | None
    pad_token_id: int | None
    unk_token_id: int | None
    add_bos_token: bool | None
    add_eos_token: bool | None
    merges: Sequence[str] = field(repr=False, default=())

    def token(self, token_id: int | None) -> str | None:
        """The text of `token_id`, or None when it is None or outside the vocabulary."""
        if token_id is None or not 0 <= token_id < len(self.tokens):
            return None
        return self.tokens[token_id]

    def token_type(self, token_id: int) -> str:
        if not 0 <= token_id < len(self.token_types):
            return "none"
        return TOKEN_TYPES.get(self.token_types[token_id], str(self.token_types[token_id]))

    @property
    def control_tokens(self) -> dict[str, int]:
        """Every token of type CONTROL, by text."""
        return {t: i for i, (t, kind) in enumerate(zip(self.tokens, self.token_types)) if kind == CONTROL}

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The ids the metadata declares as ends of generation: eos, eot and eom, in that order, once each."""
        ids = (self.eos_token_id, self.eot_token_id, self.eom_token_id)
        return tuple(dict.fromkeys(i for i in ids if i is not None))


def _typed(layout: GgufLayout, key: str, kind: type, what: str, item: int | None = None) -> Any:
    """The value of `key` when it is a `kind` (an array: of item type `item`, a string or any number), else None
    when absent, else GgufFileError naming the key."""
    value = layout.get(key)
    if value is None:
        return value
    if kind is LazyArray:
        entry = next(e for e in layout.entries if e.key == key)
        if isinstance(value, LazyArray) and (entry.item_type == item or (item != STRING and entry.item_type != STRING)):
            return value
    elif isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    found = type(value).__name__
    if isinstance(value, LazyArray):
        found = "an array of strings" if isinstance(value, StringArray) else "an array of numbers"
    raise GgufFileError(
        f"{layout.path}: {key} is {found}, not {what}",
        hint="the file's metadata is malformed; convert the model again",
        path=layout.path,
        key=key,
    )


def tokenizer_from_layout(layout: GgufLayout) -> GgufTokenizer:
    tokens = _typed(layout, "tokenizer.ggml.tokens", LazyArray, "a list of strings", STRING) or ()
    types = _typed(layout, "tokenizer.ggml.token_type", LazyArray, "a list of integers", 0) or ()
    if types and len(types) != len(tokens):
        raise GgufFileError(
            f"{layout.path}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens",
            hint="the file's vocabulary is malformed; convert the model again",
            path=layout.path,
            key="tokenizer.ggml.token_type",
        )
    ids = {name: _typed(layout, key, int, "an integer id") for name, key in SPECIAL_ID_KEYS.items()}
    for name, token_id in ids.items():
        if token_id is not None and tokens and not 0 <= token_id < len(tokens):
            raise GgufFileError(
                f"{layout.path}: {SPECIAL_ID_KEYS[name]} is {token_id}, outside the vocabulary of {len(tokens)} tokens",
                hint="the file's metadata is malformed; convert the model again",
                path=layout.path,
                key=SPECIAL_ID_KEYS[name],
            )
    names = _typed(layout, TEMPLATE_NAMES_KEY, LazyArray, "a list of template names", STRING) or ()
    named = {name: _typed(layout, f"{TEMPLATE_KEY}.{name}", str, "a template") for name in names}
    for entry in layout.entries:  # a named template the list forgot is still one
        if entry.key.startswith(TEMPLATE_KEY + ".") and isinstance(entry.value, str):
            named.setdefault(entry.key[len(TEMPLATE_KEY) + 1 :], entry.value)
    from ..template.syntax import template_name_problem  # jinja2: not on the light path of `is_gguf`

    for name in named:  # a name becomes a file name (additional_chat_templates/NAME.jinja) when the file is read
        if (problem := template_name_problem(name)) is not None:
            raise GgufFileError(
                f"{layout.path}: the named template {TEMPLATE_KEY}.{name!r}: {problem}",
                hint="rename it in the file (gguf's gguf_set_metadata.py or a new conversion)",
                path=layout.path,
                key=f"{TEMPLATE_KEY}.{name}",
            )
    return GgufTokenizer(
        path=layout.path,
        architecture=_typed(layout, "general.architecture", str, "a string"),
        model=_typed(layout, "tokenizer.ggml.model", str, "a string"),
        pre=_typed(layout, "tokenizer.ggml.pre", str, "a string"),
        tokens=tokens,
        token_types=types or (NORMAL,) * len(tokens),
        chat_template=_typed(layout, TEMPLATE_KEY, str, "a template"),
        named_templates={k: v for k, v in sorted(named.items()) if v is not None},
        bos_token_id=ids["bos"],
        eos_token_id=ids["eos"],
        eot_token_id=ids["eot"],
        eom_token_id=ids["eom"],
        pad_token_id=ids["pad"],
        unk_token_id=ids["unk"],
        add_bos_token=_typed(layout, "tokenizer.ggml.add_bos_token", bool, "a boolean"),
        add_eos_token=_typed(layout, "tokenizer.ggml.add_eos_token", bool, "a boolean"),
        merges=_typed(layout, "tokenizer.ggml.merges", LazyArray, "a list of strings", STRING) or (),
    )


def read_gguf(path: str | Path) -> GgufTokenizer:
    """The tokenizer and chat templates of the GGUF file at `path`; GgufFileError when it is not a readable GGUF
    file or has no vocabulary."""
    layout = read_layout(path)
    gguf = tokenizer_from_layout(layout)
    if not gguf.tokens:
        raise GgufFileError(
            f"{layout.path}: the file has no vocabulary (no tokenizer.ggml.tokens)",
            hint="pass a GGUF file converted with its tokenizer (convert_hf_to_gguf.py writes it)",
            path=layout.path,
            key="tokenizer.ggml.tokens",
        )
    return gguf
