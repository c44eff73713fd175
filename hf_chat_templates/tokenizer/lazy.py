"""A tokenizer loaded on first use, for runs whose checks may need none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .folder import TokenizerFolder, load_tokenizer


class LazyTokenizer:
    """`load_tokenizer(path, files)` when it is first used: a run whose checks may need no tokenizer (`verify
    --only template-safety`, whose static verdict reads the template alone) neither imports transformers nor loads
    the tokenizer unless a check renders. Attributes and calls go to the loaded tokenizer."""

    def __init__(self, path: str | Path, files: TokenizerFolder | None) -> None:
        self._path = path
        self._files = files
        self._tokenizer: Any = None

    @property
    def is_loaded(self) -> bool:
        return self._tokenizer is not None

    @property
    def loaded(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self._path, self._files)
        return self._tokenizer

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_path", "_files", "_tokenizer"):  # copy and pickle ask these
            raise AttributeError(name)
        return getattr(self.loaded, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.loaded(*args, **kwargs)

    def __len__(self) -> int:
        return len(self.loaded)
