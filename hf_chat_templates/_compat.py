"""Every access to a private part of another package, in one place, each with a test (tests/unit/test_compat.py).

When transformers, datasets, tokenizers, jinja2 or llama-models rename one of these, the test of that function
fails and names it; nothing else in the package reaches past a public API. Imports happen on call, so importing
this module stays light.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

# ---- transformers: how apply_chat_template prepares and renders ------------------------------------------------


def compile_template(template: str) -> Any:
    """The jinja2 Template transformers compiles for `template` (its sandbox, globals and `generation` tag)."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template(template)


def control_tokens(tokenizer: Any, template: str) -> tuple[str, ...]:
    """The added tokens `apply_chat_template(..., sanitize_control_tokens=True)` encodes as text when the data
    spells them, for a record `template` renders: the special ones, and the tokenizer's `chat_control_tokens` or
    else those a literal of the template holds, whitespace aside."""
    return tuple(tokenizer._get_control_tokens(template))


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as apply_chat_template hands them to a template: None values dropped, objects made plain."""
    from transformers.utils.chat_template_utils import _normalize_chat_messages

    return list(_normalize_chat_messages(messages))


def alias_reasoning_fields(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """transformers' aliasing of `reasoning_content` / `thinking` / `reasoning` on assistant messages."""
    from transformers.utils.chat_template_utils import _alias_reasoning_fields

    return list(_alias_reasoning_fields(messages))


def plain_template_data(value: Any) -> Any:
    """transformers' conversion of message objects to plain data before rendering."""
    from transformers.utils.chat_template_utils import _plain_template_data

    return _plain_template_data(value)


def render_conversations(
    template: str, conversations: list[list[dict[str, Any]]], tools: Any, **kwargs: Any
) -> list[str]:
    """transformers' own batch rendering (`render_jinja_template`), text only."""
    from transformers.utils.chat_template_utils import render_jinja_template

    result: Any = render_jinja_template(conversations=conversations, tools=tools, chat_template=template, **kwargs)
    return list(result[0])  # (rendered texts, generation indices)


def render_with_assistant_indices(
    compiled: Any, messages: list[dict[str, Any]], tools: Any, **kwargs: Any
) -> tuple[str, list[tuple[int, int]]]:
    """Render a compiled template that has `{% generation %}` markers: the text and the marked character spans."""
    from transformers.utils.chat_template_utils import _render_with_assistant_indices

    text, indices = _render_with_assistant_indices(compiled, messages, tools, None, False, **kwargs)
    return str(text), [(int(a), int(b)) for a, b in indices]


# The moments frozen_clock has pinned, innermost last: a renderer that pins its own clock leaves an outer one be.
_FROZEN: list[_dt.datetime] = []


def clock_frozen() -> bool:
    """Whether a frozen_clock block is open: `strftime_now` reads its moment, not the clock."""
    return bool(_FROZEN)


@contextlib.contextmanager
def frozen_clock(moment: _dt.datetime) -> Iterator[None]:
    """Make transformers' `strftime_now` read `moment` instead of the clock (it calls the module's `datetime`)."""
    from transformers.utils import chat_template_utils

    class _Frozen(_dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> _dt.datetime:  # type: ignore[override]
            return moment if tz is None else moment.replace(tzinfo=tz)

    original = chat_template_utils.datetime
    chat_template_utils.datetime = _Frozen  # type: ignore[misc]
    _FROZEN.append(moment)
    try:
        yield
    finally:
        _FROZEN.pop()
        chat_template_utils.datetime = original  # type: ignore[misc]


# ---- transformers: loading a plain tokenizer folder as AutoTokenizer does ---------------------------------------


def load_plain_tokenizer(path: str, **kwargs: Any) -> Any:
    """`TokenizersBackend.from_pretrained(path, **kwargs)` exactly as `AutoTokenizer.from_pretrained` calls it for
    a folder whose class is TokenizersBackend: with the private `_from_auto=True` it adds.

    Relies on `PreTrainedTokenizerBase.from_pretrained` popping `_from_auto` before the tokenizer is built (it only
    reaches the Hub user agent). Checked with transformers 5.25.0. A version that stopped popping it would keep it
    among the tokenizer's `init_kwargs`, and so in a saved tokenizer_config.json: the test of this function checks
    that it is not there."""
    from transformers import TokenizersBackend

    return TokenizersBackend.from_pretrained(path, _from_auto=True, **kwargs)


# ---- jinja2: the `{% generation %}` tag, parsed as transformers parses it ----------------------------------------


def generation_tag() -> Any:
    """A jinja2 extension that parses `{% generation %}…{% endgeneration %}` (parse only, no transformers import)
    into a `Scope` node holding the body, like transformers' AssistantTracker accepts it.

    Relies on the extension API (`Extension.tags`, `parser.stream`, `parser.parse_statements` with `drop_needle`)
    and on `jinja2.nodes.Scope`, an "artificial scope" node the AST lists but does not promise to keep; the
    `jinja2.parser` module is reached as jinja2 imports it. Checked with jinja2 3.1.6."""
    import jinja2.ext
    import jinja2.nodes
    import jinja2.parser

    class GenerationTag(jinja2.ext.Extension):
        tags = {"generation"}  # noqa: RUF012  (jinja2 declares it an instance attribute)

        def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body).set_lineno(lineno)

    return GenerationTag


# ---- jinja2: rendering one compiled template many times ---------------------------------------------------------


def fast_renderer(compiled: Any, variables: dict[str, Any]) -> Callable[[dict[str, Any]], str]:
    """`compiled.render(**variables, **extra)` without copying the globals into a new dict on every call: they are
    merged once, and each render's context shares that mapping (Template.render's own steps)."""
    from jinja2.runtime import new_context

    environment = compiled.environment
    blocks, name, root = compiled.blocks, compiled.name, compiled.root_render_func

    def render(extra: dict[str, Any]) -> str:
        context = new_context(environment, name, blocks, {**variables, **extra}, True, None, None)
        return str(environment.concat(root(context)))

    return render


def join_generator() -> Any:
    """A jinja2 code generator writing the `~` operator as `environment.join_strings((a, b, ...))` instead of
    jinja2's own `str_join`, so an environment can see the values it joins (where autoescape is off), and the `in`
    and `not in` operators as `environment.contains(a, b)`; a chain of comparisons holding one of them
    (`a in b == c`) as `environment.unfollowed(...)`, which raises."""
    from jinja2.compiler import CodeGenerator

    class JoinGenerator(CodeGenerator):
        def visit_Compare(self, node: Any, frame: Any) -> None:
            ops = [op.op for op in node.ops]
            if not {"in", "notin"} & set(ops):
                super().visit_Compare(node, frame)
                return
            if len(ops) > 1:
                self.write("environment.unfollowed('a chain of comparisons holding in')")
                return
            self.write("(not environment.contains(" if ops[0] == "notin" else "(environment.contains(")
            self.visit(node.expr, frame)
            self.write(", ")
            self.visit(node.ops[0].expr, frame)
            self.write("))")

        def visit_Concat(self, node: Any, frame: Any) -> None:
            if frame.eval_ctx.volatile or frame.eval_ctx.autoescape:
                super().visit_Concat(node, frame)
                return
            self.write("environment.join_strings((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    return JoinGenerator


# ---- transformers: the notice it logs at import without torch ------------------------------------------------

# What transformers logs once, at import, when torch is absent or hidden (transformers/__init__.py,
# `logger.warning_advice`, on the "transformers" logger). This package never needs torch for what it does with
# transformers (tokenizers and templates), so the notice is noise on every command and in every worker.
NO_TORCH_NOTICE = "PyTorch was not found"


class _NoTorchNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return NO_TORCH_NOTICE not in record.getMessage()


def quiet_no_torch_notice() -> None:
    """Drop transformers' "PyTorch was not found" notice (and nothing else it logs), once per process; importing
    transformers is not needed (the logger is the standard library's)."""
    logger = logging.getLogger("transformers")
    if not any(isinstance(f, _NoTorchNotice) for f in logger.filters):
        logger.addFilter(_NoTorchNotice())


# ---- tokenizers: a component's settings --------------------------------------------------------------------------


def component_state(component: Any) -> dict[str, Any]:
    """A normalizer / pre-tokenizer / decoder's settings, as it serializes itself (the vocabulary is not read)."""
    if component is None:
        return {}
    return dict(json.loads(component.__getstate__()))


def model_state(model: Any) -> bytes:
    """A tokenizers Model (BPE, Unigram, WordPiece …) serialized as its JSON bytes, vocabulary and merges included.

    Relies on `Model.__getstate__`, the pickle support the Rust bindings give every model, returning the JSON of
    `tokenizer.json`'s "model" object as bytes. Checked with tokenizers 0.23.3; the test of this function fails
    when it returns anything else."""
    state = model.__getstate__()
    if not isinstance(state, bytes):
        raise TypeError(f"tokenizers {type(model).__name__}.__getstate__() returned {type(state).__name__}, not bytes")
    return state


# ---- datasets: the files save_to_disk writes beside its shards --------------------------------------------------

DATASET_STATE_KEYS = ("_fingerprint", "_format_columns", "_format_kwargs", "_format_type", "_output_all_columns")


def dataset_state(dataset: Any) -> dict[str, Any]:
    """What `Dataset.save_to_disk` writes to state.json, read from the dataset's private attributes."""
    return {key: dataset.__dict__[key] for key in DATASET_STATE_KEYS}


@contextlib.contextmanager
def hidden_torch_out_of_sight() -> Iterator[None]:
    """datasets' pickler (a dataset's fingerprint) imports torch whenever "torch" is in `sys.modules`, which the
    command line's hidden torch (a None entry) is: the entry is taken out while datasets runs, and put back."""
    import sys

    hidden = "torch" in sys.modules and sys.modules["torch"] is None
    if hidden:
        del sys.modules["torch"]
    try:
        yield
    finally:
        if hidden and "torch" not in sys.modules:
            sys.modules["torch"] = None  # type: ignore[assignment]


def arrow_writer(**kwargs: Any) -> Any:
    """datasets' ArrowWriter (not exported at the top level), which writes a shard as batches arrive."""
    from datasets.arrow_writer import ArrowWriter

    return ArrowWriter(**kwargs)


# ---- llama-models: the assistant header its ChatFormat appends -------------------------------------------------


def llama_header_ids(chat_format: Any, role: str) -> list[int]:
    return list(chat_format._encode_header(role))
