"""Writing a new GGUF file with its chat template and token metadata changed and every other byte copied.

Only the keys that change are encoded again: each other key/value keeps its bytes, in its place; the tensor infos
are copied as they are (their offsets are relative to the tensor data, so they stay right) and the tensor data is
copied unchanged after the padding to the file's alignment. A key the file lacks is added after the others. The
new file is staged beside the output under the output's lock and renamed into place, so a killed write leaves the
old output or the new one; the input is never written, and writing over it takes `in_place=True`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import OutputExistsError, UsageError, option
from ..outputs import STAGING_MARK, output_lock, sweep_stale, unwritable
from .reading import (
    ARRAY,
    CONTROL,
    SCALARS,
    SPECIAL_ID_KEYS,
    STRING,
    TEMPLATE_KEY,
    TEMPLATE_NAMES_KEY,
    GgufFileError,
    GgufLayout,
    read_layout,
)

UINT32, INT32, BOOL = 4, 5, 7
_COPY_CHUNK = 16 * 1024 * 1024


@dataclass(frozen=True)
class GgufValue:
    """A metadata value to write: GGUF type, item type for an array, and the value."""

    type: int
    item_type: int | None
    value: Any


@dataclass(frozen=True)
class GgufWriteResult:
    output: Path
    changed: tuple[str, ...]  # the keys written again or added, in file order
    replaced: bool  # an existing output (or the input, in place) was replaced


def _encode_string(order: str, text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack(order + "Q", len(raw)) + raw


def _encode_value(order: str, kind: int, item: int | None, value: Any) -> bytes:
    if kind in SCALARS:
        return struct.pack(order + SCALARS[kind][0], value)
    if kind == STRING:
        return _encode_string(order, value)
    assert kind == ARRAY and item is not None
    head = struct.pack(order + "IQ", item, len(value))
    if item == STRING:
        return head + b"".join(_encode_string(order, v) for v in value)
    return head + struct.pack(f"{order}{len(value)}{SCALARS[item][0]}", *value)


def encode_entry(order: str, key: str, value: GgufValue) -> bytes:
    """One key/value as GGUF stores it."""
    return (
        _encode_string(order, key)
        + struct.pack(order + "I", value.type)
        + _encode_value(order, value.type, value.item_type, value.value)
    )


def _same_kind(layout: GgufLayout, key: str, default: GgufValue) -> GgufValue:
    """`default` with the type the file already uses for `key` (an id stored as int32 stays int32)."""
    entry = next((e for e in layout.entries if e.key == key), None)
    if entry is None or entry.type == ARRAY or default.type == ARRAY or entry.type not in SCALARS:
        return default
    return GgufValue(entry.type, None, default.value)


def metadata_changes(
    layout: GgufLayout,
    *,
    chat_template: str | None = None,
    named_templates: Mapping[str, str] | None = None,
    token_ids: Mapping[str, int] | None = None,
    control_token_ids: Iterable[int] = (),
    token_texts: Mapping[int, str] | None = None,
    add_bos_token: bool | None = None,
) -> dict[str, GgufValue]:
    """The keys whose value would change, with their new values. `token_ids` sets special ids by name (bos, eos,
    eot, eom, pad, unk); `control_token_ids` become CONTROL in tokenizer.ggml.token_type; `token_texts` writes a
    token's text at an id (a reserved slot taken by a control token)."""
    wanted: dict[str, GgufValue] = {}
    if chat_template is not None:
        wanted[TEMPLATE_KEY] = GgufValue(STRING, None, chat_template)
    if named_templates:
        names = tuple(dict.fromkeys((*layout.get(TEMPLATE_NAMES_KEY, ()), *sorted(named_templates))))
        wanted[TEMPLATE_NAMES_KEY] = GgufValue(ARRAY, STRING, names)
        for name, text in sorted(named_templates.items()):
            wanted[f"{TEMPLATE_KEY}.{name}"] = GgufValue(STRING, None, text)
    for name, token_id in (token_ids or {}).items():
        if name not in SPECIAL_ID_KEYS:
            raise UsageError(f"{name!r} is not a special token GGUF declares ({', '.join(SPECIAL_ID_KEYS)})")
        wanted[SPECIAL_ID_KEYS[name]] = _same_kind(layout, SPECIAL_ID_KEYS[name], GgufValue(UINT32, None, token_id))
    tokens = list(layout.get("tokenizer.ggml.tokens", ()))
    for token_id, text in (token_texts or {}).items():
        _check_id(layout, token_id, len(tokens))
        tokens[token_id] = text
    if token_texts:
        wanted["tokenizer.ggml.tokens"] = GgufValue(ARRAY, STRING, tuple(tokens))
    control = set(control_token_ids)
    if control:
        types = list(layout.get("tokenizer.ggml.token_type", ()) or [1] * len(tokens))
        for token_id in control:
            _check_id(layout, token_id, len(types))
            types[token_id] = CONTROL
        entry = next((e for e in layout.entries if e.key == "tokenizer.ggml.token_type"), None)
        wanted["tokenizer.ggml.token_type"] = GgufValue(ARRAY, entry.item_type if entry else INT32, tuple(types))
    if add_bos_token is not None:
        wanted["tokenizer.ggml.add_bos_token"] = GgufValue(BOOL, None, add_bos_token)
    return {key: value for key, value in wanted.items() if layout.get(key) != value.value}


def _check_id(layout: GgufLayout, token_id: int, size: int) -> None:
    if not 0 <= token_id < size:
        raise UsageError(
            f"{layout.path}: token id {token_id} is outside the vocabulary of {size} tokens",
            hint="a GGUF file's vocabulary cannot grow without its embeddings: use a reserved slot of the vocabulary",
        )


def _header(layout: GgufLayout, changes: Mapping[str, GgufValue]) -> bytes:
    """Everything before the tensor infos: magic, version, counts, and the key/values (changed ones encoded)."""
    order = layout.byte_order
    present = {e.key for e in layout.entries}
    added = [key for key in changes if key not in present]
    parts = [
        b"GGUF",
        struct.pack(order + "IQQ", layout.version, layout.tensor_count, len(layout.entries) + len(added)),
    ]
    with layout.path.open("rb") as source:
        for entry in layout.entries:
            if entry.key in changes:
                parts.append(encode_entry(order, entry.key, changes[entry.key]))
            else:
                source.seek(entry.start)
                parts.append(source.read(entry.end - entry.start))
    parts += [encode_entry(order, key, changes[key]) for key in added]
    return b"".join(parts)


def _target(in_path: Path, out_path: Path, *, force: bool, in_place: bool) -> bool:
    """Whether the output exists and will be replaced; refuse what was not asked for."""
    if out_path.is_dir():
        raise OutputExistsError(f"{out_path}: is a folder", hint="give a file name such as model.gguf", path=out_path)
    if not out_path.exists():
        return False
    if out_path.resolve() == in_path.resolve() or os.path.samefile(out_path, in_path):
        if not in_place:
            raise UsageError(
                f"{out_path}: the output is the input file; it is never changed in place unless asked",
                hint=f"choose another {option('output')} (or, from Python, pass in_place=True)",
                path=out_path,
                parameter="output",
            )
        return True
    if not force:
        raise OutputExistsError(
            f"{out_path}: exists",
            hint=f"choose another {option('output')}, or pass {option('force')} to replace it",
            path=out_path,
            parameter="output",
        )
    return True


def write_gguf(
    in_path: str | Path,
    out_path: str | Path,
    *,
    force: bool = False,
    in_place: bool = False,
    **changes: Any,
) -> GgufWriteResult:
    """Write `out_path`: the GGUF file `in_path` with the metadata changes `metadata_changes(**changes)` computes
    (chat_template, named_templates, token_ids, control_token_ids, token_texts, add_bos_token) and every other
    byte the same. An existing output is replaced only with `force`; the input only with `in_place`."""
    in_path, out_path = Path(in_path), Path(out_path).absolute()
    layout = read_layout(in_path)
    edits = metadata_changes(layout, **changes)
    replaced = _target(in_path, out_path, force=force, in_place=in_place)
    header = _header(layout, edits)
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise unwritable(out_path.parent, err, "cannot create the output's folder") from None
    with output_lock(out_path):
        replaced = _target(in_path, out_path, force=force, in_place=in_place)  # again: another writer may have won
        _stage_and_publish(layout, header, out_path)
    present = {e.key for e in layout.entries}
    keys = [e.key for e in layout.entries if e.key in edits] + [k for k in edits if k not in present]
    return GgufWriteResult(out_path, tuple(keys), replaced)


def _stage_and_publish(layout: GgufLayout, header: bytes, out_path: Path) -> None:
    start, end = layout.tensor_info
    try:
        sweep_stale(out_path.parent, out_path.name)  # a killed run's staging file, under the lock
        fd, tmp = tempfile.mkstemp(prefix=f".{out_path.name}{STAGING_MARK}{os.getpid()}-", dir=out_path.parent)
    except OSError as err:
        raise unwritable(out_path.parent, err, "cannot write the output here") from None
    try:
        with os.fdopen(fd, "wb") as out, layout.path.open("rb") as source:
            out.write(header)
            source.seek(start)
            out.write(source.read(end - start))
            out.write(b"\0" * (-(len(header) + end - start) % layout.alignment))
            source.seek(layout.data_offset)
            shutil.copyfileobj(source, out, _COPY_CHUNK)
            out.flush()
            os.fsync(out.fileno())
        if Path(tmp).stat().st_size - (layout.size - layout.data_offset) < 0:
            raise GgufFileError(f"{layout.path}: the tensor data could not be copied whole", path=layout.path)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out_path)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, GgufFileError):
            raise
        raise unwritable(out_path, err, "writing failed; nothing was written") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
