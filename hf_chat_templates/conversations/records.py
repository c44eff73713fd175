"""Conversation records read from files: one JSON object per line (`{"messages": [...], "tools": [...]}`), or one
conversation in a JSON file. A record that is not a conversation is reported with its line number and why; the
reading goes on. `parse_kwargs` reads template keywords given as NAME=VALUE.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import TokenizerFolderError, UsageError, option

# Records per batch: large enough that encode_batch runs at full speed (SentencePiece halves its speed at 256),
# small enough that a batch of long agent conversations stays well under a gigabyte.
BATCH_SIZE = 2048


def validate_record(obj: Any) -> str | None:
    """Why a parsed line is not a conversation record, or None when it is one."""
    if not isinstance(obj, dict):
        return f"expected a JSON object, found {type(obj).__name__}"
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        return "no 'messages' list (or it is empty)"
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"message {i} is not an object"
        if not isinstance(m.get("role"), str):
            return f"message {i} has no 'role'"
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            return f"message {i}: 'content' must be a string, a list of parts or null, not {type(content).__name__}"
    tools = obj.get("tools")
    if tools is not None and not isinstance(tools, list):
        return "'tools' must be a list"
    return None


def read_records(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, record, why it is bad) for each non-blank line, streamed."""
    try:
        handle = path.open("r", encoding="utf-8", errors="strict")
    except OSError as err:
        raise TokenizerFolderError(
            f"{path}: cannot read ({err.strerror})", hint="check the path", path=path, parameter="conversations"
        ) from None
    with handle:
        number = 0
        while True:
            try:
                line = handle.readline()
            except UnicodeDecodeError as err:
                number += 1
                yield number, None, f"not UTF-8 (byte {err.start})"
                return
            if not line:
                return
            number += 1
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                yield number, None, f"not JSON: {err.msg} at column {err.colno}"
                continue
            yield number, obj, validate_record(obj)


def record_batches(
    path: Path, bad_lines: list[tuple[int, str]], size: int = BATCH_SIZE
) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    """Valid (line number, record) pairs in batches; bad lines are noted in `bad_lines` as they stream past."""
    batch: list[tuple[int, dict[str, Any]]] = []
    for number, obj, problem in read_records(path):
        if problem:
            bad_lines.append((number, problem))
            continue
        batch.append((number, obj))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def conversations_file(path: str | Path) -> Path:
    """`path` when it is a file, else a clear error."""
    file = Path(path)
    if not file.is_file():
        raise TokenizerFolderError(
            f"{file}: no such file",
            hint='pass a JSONL file of {"messages": [...]}',
            path=file,
            parameter="conversations",
        )
    return file


def read_messages_file(path: os.PathLike[str] | str) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """A JSON file holding a list of messages, or {"messages": [...], "tools": [...]}; errors name the file and
    the message."""
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(
            f"{file}: cannot read ({err.strerror or err})",
            hint=f"pass {option('messages')} FILE.json",
            path=file,
            parameter="messages",
        ) from None
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
