"""Conversation records read from a dataset, one at a time, whatever its form: JSONL, a JSON file (a list of records,
or one record), Parquet, a `datasets` folder (`save_to_disk`) or a Hub dataset id (`datasets.load_dataset`).

Each record comes with where it is: its line in JSONL and JSON, its row index otherwise. JSONL is read as bytes and
each line decoded on its own, so a line that is not UTF-8, not JSON or nested deeper than `MAX_DEPTH` levels is a
problem of that line, reported with its true number, and the reading goes on. Records are brought to one shape by
`formats.to_conversation`; `record_batches` cuts them into batches bounded by records and by source bytes.
`read_messages_file` reads one conversation for `view`; `parse_kwargs` reads template keywords given as NAME=VALUE.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import TokenizerFolderError, UsageError, missing_dependency, option
from .formats import INPUT_FORMATS, to_conversation, validate_record

# Records per batch: large enough that encode_batch runs at full speed (SentencePiece halves its speed at 256);
# `BATCH_BYTES` of source text ends a batch sooner, so that the batches of long agent conversations held at once
# (parsed, a few times their source size) stay well under a gigabyte: 100,000 records of 17 KB, each with eight tool
# schemas, peak at 810 MiB with 16 MiB batches, 1,040 MiB with 64 MiB ones, in the same time.
BATCH_SIZE = 2048
BATCH_BYTES = 16 << 20
MAX_DEPTH = 200
_CHUNK = 1 << 20
_ROWS = 256
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # in a decoded string, a surrogate is a lone one (pairs are decoded)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_TABULAR = (".parquet", ".pq")

Value = tuple[int, Any, str | None, int]  # (where, parsed value, why it cannot be read, size in bytes)
Record = tuple[int, "dict[str, Any] | None", str, str, int, tuple[str, ...]]
Note = Callable[[str, int, str], None]  # (kind, where, why) of a record left out


def json_depth(text: str) -> int:
    """How deep the brackets of a JSON text nest (strings skipped), without recursion."""
    brackets = _BRACKET.findall(_STRING.sub("", text))
    return max(accumulate(1 if b in "[{" else -1 for b in brackets), default=0)


def parse_json_line(raw: bytes, number: int) -> tuple[Any, str | None]:
    """(value, None) for one JSONL line, or (None, why) when it is not UTF-8, not JSON, nested too deep or holds a
    lone surrogate."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        found = raw[err.start : err.start + 4]
        return None, f"not UTF-8 at byte {err.start + 1} of the line ({found!r}); save the file as UTF-8"
    if number == 1:
        text = text.removeprefix("\ufeff")
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and json_depth(text) > MAX_DEPTH:
        return None, f"nested deeper than {MAX_DEPTH} levels"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        return None, f"not JSON: {err.msg} at column {err.colno}"
    except ValueError as err:  # a number of more digits than Python converts (int_max_str_digits)
        return None, f"not JSON this reader takes: {err}"
    except RecursionError:
        return None, f"nested deeper than {MAX_DEPTH} levels"
    lone = lone_surrogate(value) if b"\\ud" in raw or b"\\uD" in raw else None  # only an escape writes one
    return (None, lone) if lone else (value, None)


def lone_surrogate(value: Any) -> str | None:
    """Where a string of a parsed JSON value holds a lone surrogate (JSON's "\\ud800" escape alone: not Unicode
    text, so no tokenizer encodes it), as the record's problem; None if nowhere."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str) and (found := _SURROGATE.search(item)):
            at = f"{where.lstrip('.')} " if where else ""
            return (
                f"{at}holds a lone surrogate (\\u{ord(found.group()):x}) at character {found.start() + 1}: not "
                "Unicode text, no tokenizer encodes it; write the character it stands for, or its pair"
            )
        if isinstance(item, dict):
            stack += [(f"{where}.{k}", v) for k, v in reversed(item.items())]
        elif isinstance(item, list):
            stack += [(f"{where}[{k}]", v) for k, v in reversed(list(enumerate(item)))]
    return None


def _raw_lines(handle: BinaryIO) -> Iterator[bytes]:
    """The lines of a binary file, split on b"\\n" only (a line of any length, read in chunks)."""
    pending: list[bytes] = []
    while chunk := handle.read(_CHUNK):
        parts = chunk.split(b"\n")
        if len(parts) == 1:
            pending.append(chunk)
            continue
        pending.append(parts[0])
        yield b"".join(pending)
        yield from parts[1:-1]
        pending = [parts[-1]] if parts[-1] else []
    if pending:
        yield b"".join(pending)


def _cannot_read(path: Path, err: OSError) -> TokenizerFolderError:
    return TokenizerFolderError(
        f"{path}: cannot read ({err.strerror or err})", hint="check the path", path=path, parameter="conversations"
    )


def _jsonl_values(path: Path) -> Iterator[Value]:
    try:
        handle = path.open("rb")
    except OSError as err:
        raise _cannot_read(path, err) from None
    with handle:
        for number, raw in enumerate(_raw_lines(handle), start=1):
            if raw.strip():
                value, problem = parse_json_line(raw, number)
                yield number, value, problem, len(raw)


def _json_error(path: Path, message: str, line: int) -> UsageError:
    return UsageError(
        f"{path}: {message} at line {line}",
        hint="a JSON list of records, one record, or JSONL (one record per line)",
        path=path,
        line=line,
        parameter="conversations",
    )


def _json_values(path: Path, data: bytes) -> list[Value]:
    """The records of a JSON file (a list of them, or one), each with the line it starts on."""
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        raise _json_error(path, "not UTF-8", data.count(b"\n", 0, err.start) + 1) from None
    if json_depth(text) > MAX_DEPTH + 1:
        raise _json_error(path, f"nested deeper than {MAX_DEPTH} levels", 1)
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as err:
        raise _json_error(path, f"not JSON: {err.msg} (column {err.colno})", err.lineno) from None
    except ValueError as err:  # a number of more digits than Python converts (int_max_str_digits)
        raise _json_error(path, f"not JSON this reader takes: {err}", 1) from None
    if not isinstance(whole, list):
        lone = lone_surrogate(whole)
        return [(1, None if lone else whole, lone, len(data))]
    decoder, index, line, counted = json.JSONDecoder(), text.index("[") + 1, 1, 0
    values: list[Value] = []
    for _ in whole:
        while text[index] in " \t\r\n,":
            index += 1
        line, counted = line + text.count("\n", counted, index), index
        value, index = decoder.raw_decode(text, index)
        lone = lone_surrogate(value) if "\\ud" in text[counted:index].lower() else None
        values.append((line, None if lone else value, lone, index - counted))
    return values


def _is_jsonl(data: bytes) -> bool:
    """A .json file that holds JSON Lines (JSON's own error: extra data after the first value)."""
    try:
        json.loads(data)
    except json.JSONDecodeError as err:
        return err.msg == "Extra data"
    except (ValueError, RecursionError):  # UnicodeDecodeError, too many digits
        return False
    return False


def _arrow_values(batches: Iterable[Any], columns: list[str]) -> Iterator[Value]:
    """Rows of pyarrow batches as records, by row index; a row's size is its share of its batch's bytes."""
    index = 0
    for batch in batches:
        size = batch.nbytes // max(batch.num_rows, 1)
        for row in batch.select(columns).to_pylist():
            yield index, row, None, size
            index += 1


def _columns(names: Iterable[str], messages_column: str | None, tools_column: str) -> list[str]:
    wanted = {messages_column or "messages", "messages", "conversations", "system", tools_column}
    return [n for n in names if n in wanted]


def _dataset_rows(dataset: Any, where: str, messages_column: str | None, tools_column: str) -> Iterator[Value]:
    columns = _columns(dataset.column_names, messages_column, tools_column)
    if not columns:
        raise UsageError(
            f"{where}: no conversation column among {', '.join(dataset.column_names)}",
            hint=f"name it: {option('messages_column')} NAME (ShareGPT data: conversations)",
            path=where,
            parameter="conversations",
        )
    arrow = dataset.select_columns(columns).with_format("arrow")
    yield from _arrow_values(arrow.iter(batch_size=_ROWS), columns)


def _one_split(found: Any, where: str, split: str | None) -> tuple[Any, str | None]:
    """A `DatasetDict`'s split: `split`, else `train`. Never another one unasked (a data set whose only split is
    `test` is not silently trained on); a single Dataset has no splits to choose from. With the split's name, or
    None for a single Dataset."""
    if not hasattr(found, "keys"):
        own = getattr(found, "split", None)
        if split is not None and (own is None or str(own) != split):
            raise UsageError(
                f"{where}: {option('split')} {split!r}, but this is one Dataset"
                + (f" (its split: {str(own)!r})" if own is not None else ", with no splits"),
                hint=f"drop {option('split')}",
                path=where,
                parameter="split",
            )
        return found, None
    names = list(found.keys())
    name = split or "train"
    if name not in names:
        raise UsageError(
            f"{where}: no split {name!r}; it has {', '.join(map(repr, names))}",
            hint=f"choose one: {option('split')} NAME"
            + (f" (e.g. {option('split')} {names[0]})" if len(names) == 1 else ""),
            path=where,
            parameter="split",
        )
    return found[name], name


@dataclass(frozen=True)
class ConversationSource:
    """Where conversations come from and how to read them; `values()` streams (where, value, why, size)."""

    name: str
    kind: str  # jsonl, json, parquet, dataset, hub
    input_format: str = "auto"
    messages_column: str | None = None
    tools_column: str = "tools"
    split: str | None = None
    chosen_split: list[str] = field(default_factory=list, compare=False, repr=False)  # the DatasetDict split read

    @property
    def unit(self) -> str:
        """What `where` counts: a line of the file, or a row."""
        return "line" if self.kind in ("jsonl", "json") else "row"

    def values(self) -> Iterator[Value]:
        path = Path(self.name)
        if self.kind == "jsonl":
            yield from _jsonl_values(path)
        elif self.kind == "json":
            try:
                data = path.read_bytes()
            except OSError as err:
                raise _cannot_read(path, err) from None
            yield from (_jsonl_values(path) if _is_jsonl(data) else _json_values(path, data))
        elif self.kind == "parquet":
            yield from self._parquet()
        else:
            yield from _dataset_rows(self._dataset(), self.name, self.messages_column, self.tools_column)

    def _parquet(self) -> Iterator[Value]:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise missing_dependency("pyarrow", "train", "reading Parquet") from None
        try:
            file = pq.ParquetFile(self.name)
        except (OSError, ValueError) as err:
            raise TokenizerFolderError(
                f"{self.name}: not a readable Parquet file ({err})", hint="check the file", path=self.name
            ) from None
        columns = _columns(file.schema_arrow.names, self.messages_column, self.tools_column)
        yield from _arrow_values(file.iter_batches(batch_size=_ROWS, columns=columns), columns)

    def _dataset(self) -> Any:
        try:
            import datasets
        except ImportError:
            raise missing_dependency("datasets", "train", f"reading {self.name}") from None
        try:
            if self.kind == "dataset":
                found = datasets.load_from_disk(self.name)
            else:
                found = datasets.load_dataset(self.name, split=self.split)
        except Exception as err:  # datasets raises many kinds (ConnectionError, FileNotFoundError, ValueError…)
            where = "a datasets folder" if self.kind == "dataset" else "a file or folder here, nor a Hub dataset"
            raise UsageError(
                f"{self.name}: not {where} that can be loaded ({type(err).__name__}: {err})",
                hint="pass a JSONL, JSON or Parquet file, a folder written by save_to_disk, or a Hub dataset id "
                "(online, or cached)",
                path=self.name,
                parameter="conversations",
            ) from None
        dataset, chosen = _one_split(found, self.name, self.split)
        if chosen is not None and not self.chosen_split:
            self.chosen_split.append(chosen)
        return dataset

    @property
    def label(self) -> str:
        """The source's name, with the split read once it is known: every choice is said."""
        return self.name + (f" (split {self.chosen_split[0]!r})" if self.chosen_split else "")

    def records(self) -> Iterator[Record]:
        """(where, record or None, kind of problem, why, size, mapping steps): the kind is "read" when the value
        could not be parsed, "normalize" when it is not a conversation, "" for a record."""
        for where, value, problem, size in self.values():
            if problem:
                yield where, None, "read", problem, size, ()
                continue
            record, why, steps = to_conversation(value, self.input_format, self.messages_column, self.tools_column)
            yield where, record, "normalize" if why else "", why or "", size, steps


def open_conversations(
    conversations: str | os.PathLike[str],
    *,
    input_format: str = "auto",
    messages_column: str | None = None,
    tools_column: str = "tools",
    split: str | None = None,
) -> ConversationSource:
    """The source `conversations` names: a JSONL / JSON / Parquet file, a datasets folder, or a Hub dataset id.
    Checked here, before any work: a wrong format name or a path that is neither is a clear error."""
    if input_format not in INPUT_FORMATS:
        raise UsageError(
            f"input format {input_format!r} is not one of {', '.join(INPUT_FORMATS)}",
            hint="input_format='auto' reads OpenAI / messages and ShareGPT records alike",
            parameter="conversations",
        )
    settings = {
        "input_format": input_format,
        "messages_column": messages_column,
        "tools_column": tools_column,
        "split": split,
    }
    from ..template.syntax import unreachable_link

    path = Path(conversations)
    if broken := unreachable_link(path):
        raise UsageError(broken, hint="point the link at the data, or give the file itself", path=path)
    if path.is_dir():
        return ConversationSource(str(path), "dataset", **settings)  # type: ignore[arg-type]
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in _TABULAR or _starts_with(path, b"PAR1"):
            kind = "parquet"
        else:
            kind = "json" if suffix == ".json" else "jsonl"
        if split is not None:
            raise UsageError(
                f"{option('split')} {split!r}: {path} is a file, which has no splits",
                hint=f"drop {option('split')} (it reads a datasets folder or a Hub dataset)",
                path=path,
                parameter="split",
            )
        return ConversationSource(str(path), kind, **settings)  # type: ignore[arg-type]
    if _HUB_ID.match(str(conversations)) and path.suffix.lower() not in (".jsonl", ".json", ".parquet", ".ndjson"):
        return ConversationSource(str(conversations), "hub", **settings)  # type: ignore[arg-type]
    if path.exists():
        raise UsageError(
            f"{path}: is not a regular file or a folder (a device, FIFO or socket)",
            hint="pass a copy of the data as a file",
            path=path,
            parameter="conversations",
        )
    raise TokenizerFolderError(
        f"{path}: no such file or folder",
        hint='pass a JSONL file of {"messages": [...]}, a JSON, Parquet or datasets folder, or a Hub dataset id',
        path=path,
        parameter="conversations",
    )


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(magic)) == magic
    except OSError:
        return False


def record_batches(
    source: ConversationSource,
    note: Note,
    applied: Callable[[tuple[str, ...]], None] = lambda steps: None,
    *,
    size: int = BATCH_SIZE,
    max_bytes: int = BATCH_BYTES,
) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    """Conversations as (where, record) in batches of at most `size` records and about `max_bytes` of source;
    each record left out is told to `note(kind, where, why)`, the mapping steps of each record to `applied`."""
    batch: list[tuple[int, dict[str, Any]]] = []
    held = 0
    for where, record, kind, why, nbytes, steps in source.records():
        if record is None:
            note(kind, where, why)
            continue
        if steps:
            applied(steps)
        batch.append((where, record))
        held += nbytes
        if len(batch) >= size or held >= max_bytes:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch


MAX_MESSAGES_BYTES = 64 << 20  # one conversation to view


def read_messages_file(path: os.PathLike[str] | str) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """A JSON file holding a list of messages, or {"messages": [...], "tools": [...]}; errors name the file and
    the message."""
    from ..template.syntax import read_input

    file = Path(path)
    try:
        data = json.loads(read_input(file, MAX_MESSAGES_BYTES, "messages file", UsageError).decode("utf-8"))
    except UnicodeDecodeError as err:
        raise UsageError(
            f"{file}: not UTF-8 (byte {err.start})", hint="save the file as UTF-8", path=file, parameter="messages"
        ) from None
    except json.JSONDecodeError as err:
        raise UsageError(
            f"{file}: not JSON: {err.msg} at line {err.lineno} column {err.colno}",
            hint='a JSON list of messages, or {"messages": [...]}',
            path=file,
            line=err.lineno,
            parameter="messages",
        ) from None
    except UsageError:
        raise
    except ValueError as err:  # a number of more digits than Python converts
        raise UsageError(f"{file}: {err}", hint="write the number as a string", path=file) from None
    except RecursionError:
        raise UsageError(
            f"{file}: nested too deep", hint='a JSON list of messages, or {"messages": [...]}', path=file
        ) from None
    record = {"messages": data} if isinstance(data, list) else data
    problem = validate_record(record)
    if problem:
        raise UsageError(
            f"{file}: {problem}", hint='each message is {"role": ..., "content": ...}', path=file, parameter="messages"
        )
    return list(record["messages"]), record.get("tools")


def parse_kwargs(pairs: Iterable[str]) -> dict[str, Any]:
    """`name=value` pairs; a value that parses as JSON is taken as JSON, anything else as a string."""
    found: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UsageError(
                f"{option('kwargs')} {pair!r} is not NAME=VALUE",
                hint=f"{option('kwargs')} date_string='26 Jul 2024'",
                parameter="kwargs",
            )
        try:
            found[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            found[name.strip()] = value
    return found
