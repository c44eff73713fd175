"""minijinja, the engine of TGI and mistral.rs: the `tgi` profile, and `render_minijinja` with transformers' globals.

TGI (`router/src/infer/chat_template.rs`) builds its environment as `Environment::new()` plus pycompat's unknown
method callback (`.strip()`, `.startswith()`, ... on strings, dicts and lists) and `raise_exception`, and recent
versions `strftime_now`: no trim_blocks, no lstrip_blocks, the lenient undefined, minijinja's own `tojson` (no
`ensure_ascii`, `separators` or `sort_keys`; it escapes `'`, `<`, `>` and `&` as `\\u0027`, `\\u003c`, `\\u003e`,
`\\u0026`). The `tgi` profile is that environment. It passes the messages as transformers hands them to a template
(TGI's own conversion of messages into its `TextMessage` is not reproduced), `bos_token`, `eos_token`,
`add_generation_prompt`, `tools` and the template's kwargs. The minijinja is the installed binding's (its
version is the profile's): TGI builds pin their own, and those before minijinja 2.22 print booleans and none as
`true`/`none` where this one, like Jinja2, prints `True`/`None`.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
from typing import Any

from ...errors import missing_dependency
from ..limits import check_output, limited
from ..rendering import Rendered, describe_exception, normalize_for_template
from .base import RenderJob

# minijinja's own guard against endless loops: the instructions one render may run
FUEL = 50_000_000


class _Refused(Exception):
    """The template's own raise_exception."""


class TgiEngine:
    """The `tgi` profile: minijinja as TGI configures it."""

    name = "tgi"
    label = "TGI's minijinja"

    @property
    def version(self) -> str:
        try:
            return f"minijinja {importlib.metadata.version('minijinja')} (the Python binding of the Rust engine)"
        except importlib.metadata.PackageNotFoundError:
            return "missing"

    def unavailable(self) -> str | None:
        try:
            import minijinja  # noqa: F401
        except ImportError:
            return "the tgi profile needs the package 'minijinja'; pip install 'hf-chat-templates[reference]'"
        return None

    def render_all(self, template: str, jobs: list[RenderJob], *, clock: _dt.datetime) -> list[Rendered]:
        import minijinja

        refused: list[str] = []

        def raise_exception(message: str) -> None:
            refused.append(message)
            raise _Refused(message)

        env = minijinja.Environment(undefined_behavior="lenient", fuel=FUEL)  # trim/lstrip off, pycompat on
        env.add_function("raise_exception", raise_exception)  # type: ignore[attr-defined]
        env.add_function("strftime_now", lambda fmt: clock.strftime(fmt))  # type: ignore[attr-defined]
        try:
            env.add_template("chat_template", template)
        except Exception as err:  # a template that does not parse fails every job the same way
            return [Rendered(None, describe_exception(err)) for _ in jobs]
        outs = []
        for job in jobs:
            refused.clear()
            context = {
                **job.variables,
                "messages": normalize_for_template(job.messages),
                "tools": job.tools,
                "add_generation_prompt": job.add_generation_prompt,
            }
            try:
                with limited() as limits:
                    text = env.render_template("chat_template", **context)
                outs.append(Rendered(check_output(text, limits)))
            except Exception as err:
                if refused:
                    outs.append(Rendered(None, f"raise_exception: {refused[0]}", refused=True))
                else:
                    outs.append(Rendered(None, describe_exception(err)))
        return outs


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
    env = minijinja.Environment(trim_blocks=True, lstrip_blocks=True, undefined_behavior="lenient", fuel=FUEL)
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
