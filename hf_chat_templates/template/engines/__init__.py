"""The same template in the engines that run it besides transformers: engine profiles (`base.Engine`) that
reproduce llama.cpp, TGI, transformers.js and vLLM, each as that consumer configures its template engine."""

from __future__ import annotations

from .base import Engine, RenderJob
from .minijinja_tgi import render_minijinja

__all__ = ["Engine", "RenderJob", "render_minijinja"]
