"""The same template in other engines than transformers: minijinja (the engine of TGI and mistral.rs)."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any

from ...errors import missing_dependency
from ..limits import check_output, limited
from ..rendering import Rendered, describe_exception, normalize_for_template


def render_minijinja(
    template: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    add_generation_prompt: bool,
    variables: dict[str, Any],
    clock: _dt.datetime,
) -> Rendered:
    """Render in minijinja with transformers' globals and its `tojson` emulated."""
    try:
        import minijinja
    except ImportError:
        raise missing_dependency("minijinja", "reference", "the engine-parity check") from None

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=tuple(separators) if separators else None,
            sort_keys=sort_keys,
        )

    # fuel bounds the instructions minijinja runs, its own guard against endless loops
    env = minijinja.Environment(trim_blocks=True, lstrip_blocks=True, undefined_behavior="lenient", fuel=50_000_000)
    env.add_filter("tojson", tojson)
    env.add_function("raise_exception", raise_exception)  # type: ignore[attr-defined]
    env.add_function("strftime_now", lambda fmt: clock.strftime(fmt))  # type: ignore[attr-defined]
    context = {
        **variables,
        "messages": normalize_for_template(messages),
        "tools": tools,
        "add_generation_prompt": add_generation_prompt,
    }
    try:
        with limited() as limits:
            text = env.render_str(template, **context)
        return Rendered(check_output(text, limits))
    except Exception as err:
        return Rendered(None, describe_exception(err))
