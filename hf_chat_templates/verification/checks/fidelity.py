"""What the model sees is what the data said: strings as their text, not escaped or encoded again; structured values
as the format requires; tool results linked to their calls."""

from __future__ import annotations

from ..context import VerifyContext
from ..results import CheckResult


def values_faithful(ctx: VerifyContext) -> CheckResult:
    return CheckResult("values-faithful", "skip", "not written yet")
