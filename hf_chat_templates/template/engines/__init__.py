"""The same template in the engines that run it besides transformers: engine profiles (`base.Engine`) that
reproduce llama.cpp, TGI, transformers.js and vLLM, each as that consumer configures its template engine, by name
in `registry` (`ENGINES`, `engine_profiles`)."""

from __future__ import annotations

from .base import Engine, EngineRendered, RenderJob
from .minijinja_tgi import render_minijinja
from .registry import ENGINES, REFERENCE, engine_names, engine_profiles

__all__ = [
    "ENGINES",
    "REFERENCE",
    "Engine",
    "EngineRendered",
    "RenderJob",
    "engine_names",
    "engine_profiles",
    "render_minijinja",
]
