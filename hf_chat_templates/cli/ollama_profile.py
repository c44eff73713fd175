"""The Go template `verify` has the Ollama profile compare: a Modelfile's TEMPLATE (--ollama-modelfile), or for a
GGUF file verified with its own template, the one Ollama would pick for it (`template.engines.ollama_named`)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..gguf.reading import GgufTokenizer


def _modelfile_template(path: Path) -> tuple[str, tuple[str, ...]]:
    """The Modelfile's TEMPLATE (the Go template the ollama profile renders) and its stop parameters."""
    from ..errors import UsageError
    from ..installation.modelfile import read_modelfile

    found = read_modelfile(path.read_text(encoding="utf-8"))
    if found.template is None:
        raise UsageError(
            f"{path} has no TEMPLATE line",
            hint='add TEMPLATE """…""" with the Go template, or export one: hf-chat-templates export ollama SOURCE',
            parameter="ollama_modelfile",
        )
    return found.template, found.stops


@contextlib.contextmanager
def ollama_template(modelfile: Path | None, gguf: GgufTokenizer | None = None) -> Iterator[None]:
    """The ollama profile compares the Modelfile's template for the duration (the profile is one per process);
    without one, for a GGUF file verified with its own template (`gguf`, as read), the Go template Ollama would
    pick for it."""
    from ..template.engines.ollama_named import ollama_pick
    from ..template.engines.registry import ollama_profile

    profile = ollama_profile()
    saved = profile.given, profile.given_stops, getattr(profile, "picked", None)
    if modelfile is not None:
        profile.given, profile.given_stops = _modelfile_template(modelfile)
    elif gguf is not None and hasattr(profile, "use_pick"):
        bos = (gguf.token(gguf.bos_token_id) or "") if gguf.add_bos_token else ""
        profile.use_pick(dataclasses.replace(ollama_pick(gguf.chat_template), bos=bos))
    try:
        yield
    finally:
        profile.given, profile.given_stops = saved[:2]
        if hasattr(profile, "picked"):
            profile.picked = saved[2]
