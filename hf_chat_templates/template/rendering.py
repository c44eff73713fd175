"""Rendering a template the way training scripts do: transformers' own `apply_chat_template`, under limits.

`Renderer.render` calls `tokenizer.apply_chat_template(tokenize=False)`, so the sandbox, the globals
(`raise_exception`, `strftime_now`, `tojson`, `namespace`), the message normalization and the special-token
variables are exactly what training scripts get. `frozen_clock` pins `strftime_now`; `engines` renders the same
inputs in other engines. Every render of a renderer spends one `RenderBudget`, shared with the other renderers of
the same template in a run (`limits.render_run`): once one render trips a limit, the others fail at once with the
same message.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .. import _compat
from .limits import RenderBudget, RenderLimits, budget_for, check_output, limited
from .syntax import has_generation_markers

frozen_clock = _compat.frozen_clock


@dataclass(frozen=True)
class Rendered:
    """The outcome of one render: the text, or the error it raised."""

    text: str | None
    error: str | None = None
    refused: bool = False  # the template's own raise_exception: a deliberate, explained refusal

    @property
    def ok(self) -> bool:
        return self.text is not None


def _is_refusal(err: BaseException) -> bool:
    import jinja2

    # raise_exception raises exactly TemplateError; UndefinedError and syntax errors are subclasses of it
    return type(err) is jinja2.exceptions.TemplateError


def describe_exception(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class Renderer:
    """Renders conversations with one template on one tokenizer, and encodes the results. With a `tool_template`
    (a folder's named `tool_use` template), a conversation given tools is rendered with it, as transformers picks
    it when `tools` is passed. `budget`: what its renders may spend (default: the run's for this template).
    `clock`: the moment `strftime_now` reads in every render (verify pins one, so that no two renderings of a run
    differ because a second passed between them); a frozen_clock block around a render wins over it."""

    def __init__(
        self,
        tokenizer: Any,
        template: str,
        kwargs: dict[str, Any] | None = None,
        limits: RenderLimits | None = None,
        *,
        tool_template: str | None = None,
        budget: RenderBudget | None = None,
        clock: dt.datetime | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.clock = clock
        self.template = template
        self.tool_template = tool_template
        self.kwargs = dict(kwargs or {})
        self.limits = limits or RenderLimits.from_env()
        self.budget = budget or budget_for(template, self.limits)
        self._cache: dict[Any, Rendered] = {}
        self._encoded: dict[str, list[int]] = {}
        self._with_offsets: dict[str, tuple[list[int], list[tuple[int, int]]]] = {}

    @contextlib.contextmanager
    def _pinned(self) -> Iterator[None]:
        """The renderer's clock, unless a frozen_clock block is already open (deterministic compares two)."""
        if self.clock is None or _compat.clock_frozen():
            yield
        else:
            with frozen_clock(self.clock):
                yield

    def template_for(self, tools: list[dict[str, Any]] | None) -> str:
        """The template transformers renders a conversation with: `tool_use` when tools are given and there is
        one, else the default."""
        return self.tool_template if tools is not None and self.tool_template is not None else self.template

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
        cache: bool = True,
        **extra: Any,
    ) -> Rendered:
        key = None
        if cache and not extra:
            key = json.dumps(
                [messages, tools, add_generation_prompt, continue_final_message], sort_keys=True, default=str
            )
            if key in self._cache:
                return self._cache[key]
        try:
            with self._pinned(), limited(self.limits, self.budget) as limits:
                text = self.tokenizer.apply_chat_template(
                    messages,
                    tools=tools,
                    chat_template=self.template_for(tools),
                    tokenize=False,
                    add_generation_prompt=add_generation_prompt,
                    continue_final_message=continue_final_message,
                    **{**self.kwargs, **extra},
                )
            outcome = Rendered(check_output(text, limits, self.budget))
        except Exception as err:  # a template may raise anything; the check reports it
            outcome = Rendered(None, describe_exception(err), refused=_is_refusal(err))
        if key is not None:
            self._cache[key] = outcome
        return outcome

    def render_as_given(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
    ) -> Rendered:
        """The template on `messages` with their None values kept: transformers' `render_jinja_template` with the
        variables apply_chat_template passes, without its normalization, which drops every key whose value is None
        (`"content": None` arrives as no content key). What a template author who tests `content is none` expects."""
        variables = {**self.template_variables(), **self.kwargs}
        try:
            with self._pinned(), limited(self.limits, self.budget) as limits:
                (text,) = _compat.render_conversations(
                    self.template_for(tools),
                    [messages],
                    tools,
                    add_generation_prompt=add_generation_prompt,
                    continue_final_message=continue_final_message,
                    **variables,
                )
            return Rendered(check_output(text, limits, self.budget))
        except Exception as err:  # a template may raise anything; the caller compares the outcomes
            return Rendered(None, describe_exception(err), refused=_is_refusal(err))

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` without special tokens; each text is encoded once (checks share renderings)."""
        if text not in self._encoded:
            self._encoded[text] = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return list(self._encoded[text])

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids of `text` without special tokens, and each one's character span; each text is encoded once."""
        if text not in self._with_offsets:
            enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            self._with_offsets[text] = (list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]])
        ids, offsets = self._with_offsets[text]
        return list(ids), list(offsets)

    def _tokenized(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, **flags: Any) -> Any:
        """`apply_chat_template(tokenize=True, return_dict=True)` under the limits."""
        with self._pinned(), limited(self.limits, self.budget):
            return self.tokenizer.apply_chat_template(
                messages,
                tools=tools,
                chat_template=self.template_for(tools),
                tokenize=True,
                return_dict=True,
                **{**self.kwargs, **flags},
            )

    def token_ids(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **flags: Any
    ) -> list[int]:
        return list(self._tokenized(messages, tools, **flags)["input_ids"])

    def assistant_mask(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **flags: Any
    ) -> tuple[list[int], list[int]] | None:
        """(ids, assistant mask) from `apply_chat_template(return_assistant_tokens_mask=True)`; None when the
        template has no `{% generation %}` markers."""
        if not has_generation_markers(self.template_for(tools)):
            return None
        out = self._tokenized(messages, tools, return_assistant_tokens_mask=True, **flags)
        return list(out["input_ids"]), list(out["assistant_masks"])

    def template_variables(self) -> dict[str, Any]:
        """The special-token variables transformers passes to every template (bos_token, eos_token, …)."""
        return dict(self.tokenizer.special_tokens_map)


def named_template(tokenizer: Any, name: str = "default") -> str | None:
    """A tokenizer's template by name: transformers holds one string, or a dict when it has named templates."""
    templates = tokenizer.chat_template
    if isinstance(templates, dict):
        return templates.get(name)
    return templates if name == "default" and isinstance(templates, str) else None


def normalize_for_template(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as transformers hands them to a template (None values dropped, reasoning aliased)."""
    return _compat.alias_reasoning_fields(_compat.plain_template_data(_compat.normalize_messages(messages)))
