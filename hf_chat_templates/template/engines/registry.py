"""The engine profiles by name, in a fixed order: transformers (the reference every profile is compared with),
then llama.cpp, TGI, transformers.js, vLLM and Ollama. Ollama renders a Go template, not the Jinja one: it is
compared by default only once it has one (`ollama_profile().given`, or `.translating` for the Jinja template's own
translation), and skipped with that reason when asked for by name without one.

A profile whose code or package is missing is still listed: it says why in `unavailable()`, and the checks report
it as skipped with that reason. Profiles are made once per process (llama.cpp compiles its module once).
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections.abc import Iterable
from typing import Any

from ...errors import UsageError
from ..rendering import Rendered
from .base import Engine, RenderJob

REFERENCE = "transformers"
ENGINES = (REFERENCE, "llama.cpp", "tgi", "transformers.js", "vllm", "ollama")


class MissingProfile:
    """A profile whose code cannot be imported here: it renders nothing and says why."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason

    @property
    def version(self) -> str:
        return "missing"

    def unavailable(self) -> str | None:
        return self.reason

    def render_all(self, template: str, jobs: list[RenderJob], *, clock: _dt.datetime) -> list[Rendered]:
        return [Rendered(None, f"the {self.name} profile is unavailable: {self.reason}") for _ in jobs]


def _make(name: str) -> Engine:
    # Imported here, not at the top: a profile whose module is missing or broken is one unavailable profile, and
    # the others still run.
    try:
        if name == "llama.cpp":
            from .llamacpp import LlamaCppEngine

            return LlamaCppEngine()
        if name == "tgi":
            from .minijinja_tgi import TgiEngine

            return TgiEngine()
        if name == "transformers.js":
            from .js import TransformersJsEngine

            return TransformersJsEngine()
        if name == "ollama":
            from .ollama import OllamaEngine

            return OllamaEngine()
        from .vllm import VllmEngine

        return VllmEngine()
    except ImportError as err:
        return MissingProfile(name, f"the {name} profile cannot be imported ({err})")


@functools.cache
def _profile(name: str) -> Engine:
    return _make(name)


def engine_names(names: Iterable[str] | str | None) -> tuple[str, ...]:
    """The profiles to compare with transformers, in ENGINES order: every one for None, else the names given (a
    comma-separated string or a list; "transformers", the reference, is accepted and always compared with).
    Raises UsageError naming an unknown name and listing the known ones."""
    if names is None:
        return tuple(n for n in ENGINES[1:] if n != "ollama" or _ollama_has_template())
    wanted = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    unknown = [n for n in wanted if n not in ENGINES]
    if unknown:
        raise UsageError(
            f"unknown engine(s) {', '.join(unknown)}; engines: {', '.join(ENGINES)}",
            hint="--engines llama.cpp,tgi (transformers is the reference and always runs)",
            parameter="engines",
        )
    if not wanted:
        raise UsageError(
            f"no engine named; engines: {', '.join(ENGINES)}", hint="--engines llama.cpp,tgi", parameter="engines"
        )
    return tuple(n for n in ENGINES[1:] if n in wanted)


def _ollama_has_template() -> bool:
    profile = _profile("ollama")
    return getattr(profile, "given", None) is not None or bool(getattr(profile, "translating", False))


def ollama_profile() -> Any:
    """The Ollama profile this process compares with (set `.given` to a Go template, or `.translating`)."""
    return _profile("ollama")


def engine_profiles(names: Iterable[str] | str | None = None) -> list[Engine]:
    """The profiles `engine_names(names)` picks, available or not (`unavailable()` says why one cannot run)."""
    return [_profile(name) for name in engine_names(names)]
