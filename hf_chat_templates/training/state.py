"""What a `prepare` process loads once (`FeatureState`: the tokenizer, the compiled templates, the stop and
control tokens, the fast paths), and one record rendered with its assistant spans (`render_record`): by shape where
shapes are on, else directly by rendering differences; with `exact`, transformers' own compiled template and no
fast path at all."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _compat
from ..errors import UsageError, option
from ..families.tokens import check_declared_tokens, probe_renderings, template_tokens
from ..template.rendering import named_template
from ..template.spans import Span, assistant_spans
from ..template.syntax import has_generation_markers
from ..template.training_variant import TRAINING_TEMPLATE_NAME, export_without_markers, is_training_template
from ..tokenizer.folder import TOKENIZER_JSON, TokenizerFolder, read_folder
from .loading import compile_template, load_tokenizer
from .segments import SegmentEncoder
from .shapes import CHECK_EVERY, ShapeRenderer, shape_renderer
from .spelled_tokens import control_spellings, text_backend

_UNRENDERED = "a plain two-exchange conversation does not render"
EXACT = "--exact: each record rendered by transformers' template and encoded by the tokenizer, whole"


@dataclass
class FeatureState:
    """What a process loads once: the tokenizer, the compiled template(s), the tokens and where spans come from."""

    tokenizer: Any
    backend: Any
    kwargs: dict[str, Any]
    render_plain: Callable[[dict[str, Any]], str]
    marked: Any  # the compiled template with hand-written {% generation %} markers, or None
    stops: tuple[str, ...]
    controls: tuple[str, ...]
    spans_from: str
    tokens_from: str = ""  # declared, a bundled family, or inferred: said in prepare's report
    token_notes: tuple[str, ...] = ()  # what inference chose or could not decide: said in prepare's report
    # the folder's named `tool_use` template, compiled: transformers renders a conversation given tools with it
    render_tools: Callable[[dict[str, Any]], str] | None = None
    spelled: re.Pattern[str] = re.compile("(?!)")  # the control tokens data may not forge, longest first
    spelled_tools: re.Pattern[str] | None = None  # the same for the `tool_use` template, which renders given tools
    segments: SegmentEncoder | None = None  # the renderings encoded by segments, repeated ones from a cache
    shapes: ShapeRenderer | None = None  # records rendered by shape (rendering differences only)
    shapes_off: str = ""  # why there is no shape renderer at all
    _text_backend: Any = None

    @property
    def text_backend(self) -> Any:
        """The backend encoding special tokens as text (made on first use)."""
        if self._text_backend is None:
            self._text_backend = text_backend(self.backend)
        return self._text_backend


def _templates(tokenizer: Any, source: str, template: str | None) -> tuple[str, str | None, str]:
    """(plain template, template with hand-written markers or None, where the spans come from)."""
    marked = (
        template
        if template and has_generation_markers(template)
        else (None if template else named_template(tokenizer, TRAINING_TEMPLATE_NAME))
    )
    plain = template or named_template(tokenizer) or (export_without_markers(marked) if marked else None)
    if plain is None:
        raise UsageError(
            f"{source}: the tokenizer has no chat template",
            hint=f"install one first, or pass {option('template')} / {option('family')}",
            path=source,
        )
    if marked is not None and is_training_template(marked):
        # A derived training variant wraps the template and finds its spans by rendering differences at render time;
        # the same spans come faster from the plain template here (assistant-mask proves them equal).
        return (
            export_without_markers(marked),
            None,
            f"rendering differences (the folder's '{TRAINING_TEMPLATE_NAME}' template is derived from this template)",
        )
    if marked is not None:
        return plain, marked, f"the {{% generation %}} markers of the folder's '{TRAINING_TEMPLATE_NAME}' template"
    return plain, None, "rendering differences of the chat template"


def load_state(
    source: str,
    template: str | None,
    kwargs: dict[str, Any],
    stop_tokens: Iterable[str] | None,
    control_tokens: Iterable[str] | None,
    exact: bool = False,
    check_every: int = CHECK_EVERY,
    allow_unwritten: bool = False,
) -> FeatureState:
    """What a process loads once. `exact`: no fast path at all (the reference the fast paths are compared with):
    each record rendered by transformers' own compiled template, spans by rendering differences, and encoded whole
    by the tokenizer. Otherwise the fast paths, each checked on one record (or text) in `check_every`."""
    folder = Path(source)
    # The folder through the validated reader first: a corrupt file is named, never an unexpected error
    files = read_folder(folder) if folder.is_dir() else None
    tokenizer = load_tokenizer(source, files)
    plain, marked, origin = _templates(tokenizer, source, template)
    check_declared_tokens(
        stop_tokens,
        control_tokens,
        [plain],
        lambda: probe_renderings(tokenizer, [plain]),
        allow_unwritten=allow_unwritten,
    )
    tokens = template_tokens(
        tokenizer,
        plain,
        kwargs=kwargs,
        stop_tokens=stop_tokens,
        control_tokens=control_tokens,
        generation_config=files.generation_config if files is not None else None,
    )
    if tokens.notes and tokens.notes[0].startswith(_UNRENDERED):
        raise UsageError(
            f"{'the template file' if template else source + ': the chat template'}: {tokens.notes[0]}",
            hint="fix the template: hf-chat-templates verify SRC --template FILE shows where and why it fails",
            parameter="template",
        )
    if not tokens.stop_tokens:
        raise UsageError(
            ("; ".join(tokens.notes) if tokens.notes else "no stop token is known for this template")
            + ", so a turn's end cannot be trained",
            hint=f"declare the token that ends an assistant turn: {option('stop_tokens')} TOKEN",
            parameter="stop_tokens",
        )
    merged = {**tokenizer.special_tokens_map, **tokens.kwarg_defaults, **kwargs}
    compile_ = _compat.compile_template if exact else compile_template
    compiled = compile_(plain)
    tool_use = named_template(tokenizer, "tool_use") if template is None else None
    tool_compiled = compile_(tool_use) if tool_use is not None else None
    return FeatureState(
        tokenizer=tokenizer,
        backend=tokenizer.backend_tokenizer,
        kwargs=merged,
        render_plain=_compat.fast_renderer(compiled, {**compiled.globals, **merged, "documents": None}),
        marked=_compat.compile_template(marked) if marked else None,
        stops=tokens.stop_tokens,
        controls=tokens.control_tokens,
        spans_from=origin,
        tokens_from=tokens.origin,
        token_notes=tokens.notes,
        render_tools=_compat.fast_renderer(tool_compiled, {**tool_compiled.globals, **merged, "documents": None})
        if tool_compiled is not None
        else None,
        spelled=control_spellings(tokenizer, (marked or plain,)),
        spelled_tools=control_spellings(tokenizer, (tool_use,)) if tool_use is not None and marked is None else None,
        segments=_exact_encoder(tokenizer.backend_tokenizer)
        if exact
        else _segment_encoder(tokenizer.backend_tokenizer, folder, files, check_every),
        shapes=shape_renderer(plain, tool_use, merged, tokens.stop_tokens, tokens.control_tokens, check_every)
        if marked is None and not exact
        else None,
        shapes_off=EXACT if exact else "marked spans: rendered once per record" if marked is not None else "",
    )


def _exact_encoder(backend: Any) -> SegmentEncoder:
    """Whole strings by the tokenizer's own `encode_batch`, nothing else."""
    encoder = SegmentEncoder(backend, reason=EXACT, fast=False)
    encoder.engine_off = EXACT
    return encoder


def _segment_encoder(backend: Any, folder: Path, files: TokenizerFolder | None, check_every: int) -> SegmentEncoder:
    """The segment encoder, told the tokenizer.json the backend was loaded from and, when `read_folder` parsed that
    file in this run, its vocabulary (a file checked in an earlier run is not parsed for it: the backend's own
    vocabulary is cheaper to ask for than the file to parse)."""
    if files is None or TOKENIZER_JSON not in files.files:
        return SegmentEncoder(backend, check_every=check_every)
    parsed = files.parsed_tokenizer_json
    vocab = parsed["model"].get("vocab") if parsed is not None else None
    return SegmentEncoder(
        backend,
        source=folder / TOKENIZER_JSON,
        vocab=vocab if isinstance(vocab, dict) else None,
        check_every=check_every,
    )


def render_record(
    state: FeatureState, record: dict[str, Any], drop: tuple[str, ...] = (), by_shape: bool = True
) -> tuple[str, tuple[Span, ...], str]:
    """One record's text and assistant spans (the message keys in `drop` taken off first), and how it was
    rendered (`ShapeRenderer.render_record`: by shape unless `by_shape` is false or shapes are off)."""
    messages = messages_of(record, drop)
    tools = record.get("tools")
    if state.marked is not None:
        text, indices = _compat.render_with_assistant_indices(state.marked, messages, tools, **state.kwargs)
        return text, tuple(Span(-1, a, b, None) for a, b in indices if b > a), ""
    if by_shape and state.shapes is not None:
        return state.shapes.render_record(
            messages,
            tools,
            lambda: _direct(state, messages, tools),
            lambda: prefix_renderer(state, tools)(messages, False),
        )
    return (*_direct(state, messages, tools), "")


def messages_of(record: dict[str, Any], drop: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """What apply_chat_template does to messages, for JSON data: keys whose value is None are dropped and the
    reasoning fields aliased (its conversion of objects to plain data changes nothing in parsed JSON); the keys in
    `drop` taken off too."""
    return _compat.alias_reasoning_fields(
        [{k: v for k, v in m.items() if v is not None and k not in drop} for m in record["messages"]]
    )


def prefix_renderer(state: FeatureState, tools: Any) -> Callable[[list[dict[str, Any]], bool], str]:
    """`render(messages, add_generation_prompt)` with the template transformers uses for a record with `tools`."""
    render_with = state.render_tools if tools is not None and state.render_tools is not None else state.render_plain

    def render(prefix: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return render_with({"messages": prefix, "tools": tools, "add_generation_prompt": add_generation_prompt})

    return render


def _direct(state: FeatureState, messages: list[dict[str, Any]], tools: Any) -> tuple[str, tuple[Span, ...]]:
    """A record's text and spans by rendering differences, the template rendered for each prefix."""
    found = assistant_spans(prefix_renderer(state, tools), messages, state.stops, state.controls)
    return found.text, found.spans
