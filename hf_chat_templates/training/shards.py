"""Input shards for `prepare --engine ray`: a JSONL or Parquet file, or a folder of them, cut into parts a worker
reads on its own, without the driver reading the input whole.

JSONL is cut at line starts about `shard_bytes` apart (only the bytes around each cut are read), Parquet at
row-group boundaries. A shard is read by `ShardSource` with the local engine's byte-exact reader (`records`: a line
that is not UTF-8 or not JSON is a problem of that line): its records are numbered from the shard's start, and it
says how many lines (rows) it covered, so the driver turns each number into the true line (row) of its file.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

from ..conversations.records import (
    _ROWS,
    ConversationSource,
    Value,
    _arrow_values,
    _cannot_read,
    _columns,
    _raw_lines,
    parse_json_line,
)
from ..errors import UsageError

JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
# Shard size: at most this much source per shard, and at least MIN_SHARD_BYTES; in between, about four shards per
# CPU, so a modest input still keeps every worker busy.
SHARD_BYTES = 64 << 20
MIN_SHARD_BYTES = 1 << 20
_SEEK = 1 << 16


@dataclass(frozen=True)
class Shard:
    """A part of one input file: bytes [start, end) of a JSONL file, cut at line starts, or row groups
    [start, end) of a Parquet file. `file` is the file's place among the inputs."""

    index: int
    path: str
    kind: str  # jsonl or parquet
    start: int
    end: int
    file: int


@dataclass(frozen=True)
class ShardSource(ConversationSource):
    """One shard read as the local engine reads its file: each record's `where` counts from the shard's start (its
    first line is 1, its first row 0); `covered[0]` holds the lines (rows) read once the shard is done."""

    start: int = 0
    end: int = 0
    covered: list[int] = field(default_factory=lambda: [0])

    def values(self) -> Iterator[Value]:
        yield from (self._jsonl() if self.kind == "jsonl" else self._row_groups())

    def _jsonl(self) -> Iterator[Value]:
        path = Path(self.name)
        try:
            handle = path.open("rb")
        except OSError as err:
            raise _cannot_read(path, err) from None
        with handle:
            handle.seek(self.start)
            window = _Window(handle, self.end - self.start)
            for number, raw in enumerate(_raw_lines(cast(BinaryIO, window)), start=1):
                if raw.strip():
                    # a byte-order mark is only the file's first line's
                    value, problem = parse_json_line(raw, number if self.start == 0 else number + 1)
                    yield number, value, problem, len(raw)
            self.covered[0] = window.newlines

    def _row_groups(self) -> Iterator[Value]:
        import pyarrow.parquet as pq

        file = pq.ParquetFile(self.name)
        groups = list(range(self.start, self.end))
        if not groups:  # a file without row groups: nothing to read
            return
        columns = _columns(file.schema_arrow.names, self.messages_column, self.tools_column)
        yield from _arrow_values(file.iter_batches(batch_size=_ROWS, row_groups=groups, columns=columns), columns)
        self.covered[0] = sum(file.metadata.row_group(g).num_rows for g in groups)


class _Window:
    """The next `size` bytes of a binary file, counting the newlines read."""

    def __init__(self, handle: Any, size: int) -> None:
        self.handle, self.left, self.newlines = handle, size, 0

    def read(self, n: int) -> bytes:
        data = self.handle.read(min(n, self.left))
        self.left -= len(data)
        self.newlines += data.count(b"\n")
        return bytes(data)


def _bad_input(where: str | Path, what: str, hint: str) -> UsageError:
    return UsageError(f"{where}: {what}", hint=hint, path=where, parameter="conversations")


def _kind_of(path: Path) -> str | None:
    suffix = path.suffix.lower()
    return "jsonl" if suffix in JSONL_SUFFIXES else "parquet" if suffix in PARQUET_SUFFIXES else None


def input_files(conversations: str | os.PathLike[str]) -> tuple[list[Path], str]:
    """The files `--engine ray` reads and their kind (jsonl or parquet): one file, or every file of a folder and
    its subfolders, sorted (names starting with "." or "_", as Spark's `_SUCCESS`, are not data and are passed
    over). Anything else is a clear error: a JSON file, a datasets folder, a Hub id, a folder mixing kinds."""
    local = "use --engine local, which reads it"
    path = Path(conversations)
    if path.is_file():
        kind = _kind_of(path)
        magic = _magic(path) if kind is None else b""
        if kind is None and (path.suffix.lower() == ".json" or magic.lstrip()[:1] == b"["):
            raise _bad_input(path, "a JSON file cannot be cut into shards", f"write it as JSONL, or {local}")
        return [path], kind or ("parquet" if magic == b"PAR1" else "jsonl")
    if not path.is_dir():
        raise _bad_input(path, "no such file or folder", f"pass a JSONL or Parquet file or a folder of them ({local})")
    if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
        raise _bad_input(path, "a datasets folder", f"write it with Dataset.to_parquet, or {local}")
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and not any(part.startswith((".", "_")) for part in p.relative_to(path).parts)
    )
    unknown = [p for p in files if _kind_of(p) is None]
    if unknown:
        raise _bad_input(unknown[0], "neither JSONL (.jsonl, .ndjson) nor Parquet (.parquet, .pq)", "move it out")
    kinds = {_kind_of(p) for p in files}
    if len(kinds) != 1:
        what = "mixes JSONL and Parquet files" if kinds else "holds no JSONL or Parquet file"
        raise _bad_input(path, what, "pass a folder of one kind (records are numbered by line or by row)")
    return files, kinds.pop() or "jsonl"


def _magic(path: Path) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(4)
    except OSError as err:
        raise _cannot_read(path, err) from None


def _line_cuts(path: Path, step: int) -> list[int]:
    """Offsets of line starts about `step` bytes apart, from 0 to the file's size (only the bytes around each cut
    are read)."""
    size = path.stat().st_size
    cuts = [0]
    with path.open("rb") as handle:
        while cuts[-1] + step < size:
            handle.seek(cuts[-1] + step)
            at = handle.tell()
            while chunk := handle.read(_SEEK):
                found = chunk.find(b"\n")
                if found >= 0:
                    at += found + 1
                    break
                at += len(chunk)
            if at >= size:
                break
            cuts.append(at)
    return [*cuts, size]


def _group_cuts(path: Path, step: int) -> list[int]:
    """Row-group indices where shards of about `step` bytes (uncompressed) start, and the number of groups."""
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
    except (OSError, ValueError) as err:
        raise _bad_input(path, f"not a readable Parquet file ({err})", "check the file") from None
    cuts, held = [0], 0
    for group in range(meta.num_row_groups):
        if held >= step:
            cuts.append(group)
            held = 0
        held += meta.row_group(group).total_byte_size
    return [*cuts, meta.num_row_groups] if meta.num_row_groups else [0, 0]


def plan_shards(files: list[Path], kind: str, shard_bytes: int) -> list[Shard]:
    """The shards of `files`, in input order."""
    shards: list[Shard] = []
    for number, path in enumerate(files):
        try:
            cuts = _line_cuts(path, shard_bytes) if kind == "jsonl" else _group_cuts(path, shard_bytes)
        except OSError as err:
            raise _cannot_read(path, err) from None
        for start, end in itertools.pairwise(cuts):
            shards.append(Shard(len(shards), str(path), kind, start, end, number))
    return shards


def shard_size(files: list[Path], cpus: int) -> int:
    """About four shards per CPU, each between MIN_SHARD_BYTES and SHARD_BYTES of source."""
    total = sum(p.stat().st_size for p in files)
    return max(MIN_SHARD_BYTES, min(SHARD_BYTES, total // max(4 * cpus, 1)))
