"""What every engine profile offers: render a batch of conversations with one template, or say why it cannot run.

An engine profile reproduces one real consumer of chat templates (transformers, llama.cpp, TGI, transformers.js,
vLLM): the template engine as that consumer configures it, and the consumer's own preprocessing of messages. A
profile that cannot run on this machine (a missing package, no `node`) is not an error: `unavailable()` says why,
and the checks report the profile as skipped with that note.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
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


Messages = list[dict[str, Any]]
Tools = list[dict[str, Any]] | None


@dataclass(frozen=True)
class RequestRewrite:
    """One step of an engine's own request handling that a template cannot see past: `apply` returns the messages
    and tools as the engine rewrites them (equal to those given when the step changes nothing, which are never
    changed in place); `says` words what the engine does and `hint` how to train what it serves. `engine-parity`
    applies an engine's steps to a probe and renders the result in transformers: when that gives the engine's
    text, the difference is the engine's request handling, not the template's."""

    says: str
    hint: str
    apply: Callable[[Messages, Tools], tuple[Messages, Tools]]


def _parts(content: Any) -> list[dict[str, Any]] | None:
    """A message's content parts when each is a dict and each text part holds a string text; else None."""
    if not isinstance(content, list) or not content or not all(isinstance(p, dict) for p in content):
        return None
    return content if all(isinstance(p.get("text"), str) for p in content if p.get("type") == "text") else None


def _joined(messages: Messages, with_media: bool) -> Messages:
    rewritten = []
    for message in messages:
        parts = _parts(message.get("content"))
        if parts is not None and with_media == any(p.get("type") != "text" for p in parts):
            message = {**message, "content": "\n".join(p["text"] for p in parts if p.get("type") == "text")}
        rewritten.append(message)
    return messages if rewritten == messages else rewritten


def joined_text_parts(messages: Messages, tools: Tools) -> tuple[Messages, Tools]:
    """A message whose content is text parts given them as one string, their texts joined with a newline, as
    llama-server does for a template that reads string content and vLLM for one that never loops over content."""
    return _joined(messages, with_media=False), tools


def text_of_media_messages(messages: Messages, tools: Tools) -> tuple[Messages, Tools]:
    """A message with parts that hold no text (an image) given its text parts alone, joined into one string, as
    llama-server does for a template that reads string content."""
    return _joined(messages, with_media=True), tools


JOINED_TEXT_PARTS = RequestRewrite(
    "joins a message's text parts with newlines into one string",
    "send content as one string (parts joined as you trained them) to serve exactly what was trained",
    joined_text_parts,
)
MEDIA_LEFT_OUT = RequestRewrite(
    "leaves out a message's parts without text (an image) and joins its text parts into one string",
    "train on what the engine serves: the text alone where it leaves images out (the image reaches the model, if "
    "at all, through the engine's own media input, not the template's markup)",
    text_of_media_messages,
)


class Engine(Protocol):
    """One engine profile. `name` is what `--engines` takes (e.g. "llama.cpp"); `version` names the build used.

    Optional: `label` (how findings name the engine, default `name`); `fixed_clock` (the moment an engine that
    pins its own clock reads, which `clock` cannot change: the comparison renders transformers at that moment; such
    an engine's `render_all` and `start_all` render at it whatever `clock` they are given, and `start_all` is given
    one without asking it, as asking may load the engine in this process); `start_all` (`render_all` begun in a
    process of its own; the function it returns waits for the outcomes); `server_defaults` (the variables the
    engine defines in every template context on its own); `request_rewrites` (`RequestRewrite` steps of its
    request handling that change what the template is given)."""

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
