"""Where this package keeps what it builds or proves once and reads again: `$HF_CHAT_TEMPLATES_CACHE`, else
`~/.cache/hf_chat_templates` (base tokenizers, BPE proofs and ranks, records of checked files, parsed templates and
compiled template code). A record is a cache, never the only copy of anything: one that cannot be named, read or
written means the work is done again."""

from __future__ import annotations

import contextlib
import os
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
    """Write a record atomically (written beside it, then renamed over it); a cache that cannot be written keeps
    nothing and leaves nothing half written."""
    staged = record.with_name(f".{record.name}.{os.getpid()}")
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        staged.write_bytes(data)
        os.replace(staged, record)
    except OSError:
        with contextlib.suppress(OSError):
            staged.unlink(missing_ok=True)
