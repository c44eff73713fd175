"""A tokenizer source: a local folder as given, or a Hub repo id fetched (tokenizer files only)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import HubError, TokenizerFolderError
from ..template.syntax import unreachable_link
from .folder import TOKENIZER_FILE_PATTERNS

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def resolve_source(source: str | Path, *, revision: str | None = None, token: str | None = None) -> Path:
    """A local folder as given, or a Hub repo id downloaded (tokenizer files only) with huggingface_hub."""
    source = str(source)
    path = Path(source).expanduser()
    if broken := unreachable_link(path):
        raise TokenizerFolderError(
            broken,
            hint="point the link at a tokenizer folder, or pass the folder itself",
            path=path,
            parameter="tokenizer",
        )
    if path.exists() or not REPO_ID.match(source):
        if not path.exists():
            raise TokenizerFolderError(
                f"{source}: no such folder",
                hint="pass a tokenizer folder, or a Hub repo id such as org/name",
                path=path,
                parameter="tokenizer",
            )
        return path
    try:
        from huggingface_hub import snapshot_download

        # HF_ENDPOINT is read at call time, as `push` does, not fixed when huggingface_hub was first imported.
        return Path(
            snapshot_download(
                repo_id=source,
                revision=revision,
                token=token,
                allow_patterns=list(TOKENIZER_FILE_PATTERNS),
                endpoint=os.environ.get("HF_ENDPOINT") or None,
            )
        )
    except Exception as err:  # huggingface_hub raises many types for offline, 401, 404, network
        raise HubError(
            f"{source}: no such local folder, and the Hub repo could not be fetched ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'no detail'})",
            hint="check the repo id and your network/login (hf auth login), or download the tokenizer "
            "and pass its folder",
            parameter="tokenizer",
        ) from None
