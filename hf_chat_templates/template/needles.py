"""The strings a template tests message content with while it renders, whatever built them: `content.startswith(tag)`
where `tag` is the called tool's name in capitals and `::`, `key in content` with a key read from a keyword. A
literal the template compares content with is read from its syntax tree (coverage gives content holding it); a
string built at render time is seen only here. Each message's content is rendered as a `str` that notes what it is
tested with; the notes are the template's own work on one conversation, under the renderer's limits."""

from __future__ import annotations

import contextvars
from typing import Any

from .. import _compat
from .limits import check_output, limited
from .rendering import Renderer, describe_exception

_NOTED: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("noted", default=None)


def _note(*values: Any) -> None:
    noted = _NOTED.get()
    if noted is None:
        return
    for value in values:
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, str) and not isinstance(v, Watched):
                noted.append(str.__str__(v))


class Watched(str):
    """Message content that notes the strings it is tested with (a prefix, a suffix, a needle, an equal, a
    separator); what a template makes of it by case, trimming or slicing is watched too."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        _note(other)
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        _note(other)
        return str.__ne__(self, other)

    def __contains__(self, key: str) -> bool:  # type: ignore[override]
        _note(key)
        return str.__contains__(self, key)

    def __getitem__(self, key: Any) -> Watched:
        return Watched(str.__getitem__(self, key))


def _tested(name: str) -> Any:
    method = getattr(str, name)

    def tested(self: Watched, *args: Any, **kwargs: Any) -> Any:
        _note(*args[:1], *(kwargs[k] for k in ("prefix", "suffix", "sep", "old", "sub") if k in kwargs))
        return method(self, *args, **kwargs)  # as given: `split(None, 1)`, `split(maxsplit=1)`

    return tested


def _kept(name: str) -> Any:
    method = getattr(str, name)

    def kept(self: Watched, *args: Any, **kwargs: Any) -> Watched:
        return Watched(method(self, *args, **kwargs))

    return kept


for _name in ("startswith", "endswith", "find", "rfind", "index", "rindex", "count", "split", "rsplit",
              "partition", "rpartition", "replace", "removeprefix", "removesuffix"):  # fmt: skip
    setattr(Watched, _name, _tested(_name))
for _name in ("lower", "upper", "strip", "lstrip", "rstrip", "casefold", "title", "capitalize", "swapcase"):
    setattr(Watched, _name, _kept(_name))


def _watched(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: Watched(v) if k in ("content", "text") and isinstance(v, str) else _watched(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_watched(v) for v in value]
    return value


def tested_strings(
    renderer: Renderer,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    add_generation_prompt: bool = True,
    **extra: Any,
) -> tuple[list[str], str | None]:
    """The strings the template tests the messages' content with (their text parts too) while it renders them, in
    the order it first tests each, as transformers renders (its compiled template, the special-token variables,
    `documents` None unless given), under the renderer's limits and budget; and the error the render raised (None
    when it rendered), with what it noted before it."""
    noted: list[str] = []
    token = _NOTED.set(noted)
    error = None
    try:
        compiled = _compat.compile_template(renderer.template_for(tools))
        variables = {"documents": None, **renderer.template_variables(), **renderer.kwargs, **extra}
        with renderer._pinned(), limited(renderer.limits, renderer.budget) as limits:
            text = compiled.render(
                messages=_watched(messages), tools=tools, add_generation_prompt=add_generation_prompt, **variables
            )
            check_output(text, limits, renderer.budget)
    except Exception as err:  # a template may raise anything; what it tested before is what it tested
        error = describe_exception(err)
    finally:
        _NOTED.reset(token)
    return list(dict.fromkeys(noted)), error
