"""Where this package keeps what it builds or proves once and reads again: `$HF_CHAT_TEMPLATES_CACHE`, else
`~/.cache/hf_chat_templates` (base tokenizers, BPE proofs and ranks, records of checked files and parsed
templates). A record is a cache, never the only copy of anything: one that cannot be named, read, trusted or
written means the work is done again. Records are data: no code is loaded from the folder."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("HF_CHAT_TEMPLATES_CACHE") or Path.home() / ".cache" / "hf_chat_templates")


def cache_file(folder: str, name: str) -> Path | None:
    """The record `name` in the cache's `folder`, or None when there is no cache folder to name (no home folder)."""
    try:
        return cache_root() / folder / name
    except RuntimeError:
        return None


def keep(record: Path, data: bytes) -> None:
    """Write a record: the sha256 of `data`, then `data`, staged in a file of its own (one per writer, threads
    and hosts sharing the folder included) and renamed over the record. A cache that cannot be written keeps
    nothing and leaves nothing half written."""
    staged: str | None = None
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        handle, staged = tempfile.mkstemp(dir=record.parent, prefix=f".{record.name}.")
        with os.fdopen(handle, "wb") as out:
            out.write(hashlib.sha256(data).digest() + data)
        os.replace(staged, record)
    except OSError:
        if staged is not None:
            with contextlib.suppress(OSError):
                os.unlink(staged)


def read_kept(record: Path) -> bytes | None:
    """What `keep` wrote to `record`, or None when it is missing, unreadable or not what was written (its sha256
    does not match)."""
    try:
        kept = record.read_bytes()
    except OSError:
        return None
    digest, data = kept[:32], kept[32:]
    return data if len(digest) == 32 and hashlib.sha256(data).digest() == digest else None
