"""Where this package keeps what it builds or proves once and reads again: `$HF_CHAT_TEMPLATES_CACHE`, else
`~/.cache/hf_chat_templates` (base tokenizers, BPE proofs, records of checked files and parsed templates)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("HF_CHAT_TEMPLATES_CACHE") or Path.home() / ".cache" / "hf_chat_templates")
