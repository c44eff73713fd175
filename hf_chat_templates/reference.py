"""Official renderers as references: openai-harmony for gpt-oss, llama-models for Llama 3.2."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .verify import CheckResult, VerifyContext


def reference_for(ctx: "VerifyContext") -> Callable[["VerifyContext"], "CheckResult"] | None:
    return None
