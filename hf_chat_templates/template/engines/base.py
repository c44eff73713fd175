"""What every engine profile offers: render a batch of conversations with one template, or say why it cannot run.

An engine profile reproduces one real consumer of chat templates (transformers, llama.cpp, TGI, transformers.js,
vLLM): the template engine as that consumer configures it, and the consumer's own preprocessing of messages. A
profile that cannot run on this machine (a missing package, no `node`) is not an error: `unavailable()` says why,
and the checks report the profile as skipped with that note.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..rendering import Rendered


@dataclass(frozen=True)
class RenderJob:
    """One conversation to render: the inputs `apply_chat_template` takes, and the template's other variables
    (bos_token, eos_token, the family's kwargs) already merged into `variables`."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    add_generation_prompt: bool
    variables: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineRendered(Rendered):
    """A `Rendered` that also says what the engine did to the input before rendering: `note`, the rewrite it made
    (llama.cpp rewrites the messages for a template that lacks a capability, as its server does), or None when it
    changed nothing; `input_refused`, the engine refused the request itself before any template ran (an input it
    does not serve), which is no failure of the template. A profile that returns a plain `Rendered` says the
    latter with an error worded "<engine> refuses the request: <why>"."""

    note: str | None = None
    input_refused: bool = False


class Engine(Protocol):
    """One engine profile. `name` is what `--engines` takes (e.g. "llama.cpp"); `version` names the build used.

    Optional: `label` (how findings name the engine, default `name`); `fixed_clock` (the moment an engine that
    pins its own clock reads, which `clock` cannot change: the comparison renders transformers at that moment; such
    an engine's `render_all` and `start_all` render at it whatever `clock` they are given, and `start_all` is given
    one without asking it, as asking may load the engine in this process); `start_all` (`render_all` begun in a
    process of its own; the function it returns waits for the outcomes)."""

    name: str

    @property
    def version(self) -> str: ...

    def unavailable(self) -> str | None:
        """None when the profile can run here; otherwise why not and how to enable it (e.g. "pip install ...")."""
        ...

    def render_all(self, template: str, jobs: list[RenderJob], *, clock: _dt.datetime) -> list[Rendered]:
        """Render each job with the template, in order; `clock` pins `strftime_now` and any date the engine
        supplies. A failure of one job (parse error, unknown filter, the template's raise_exception) is that job's
        `Rendered(None, error, refused=...)`, never an exception."""
        ...
