"""What a `prepare` process loads once, loaded so that its fixed and per-record costs stay small.

- The tokenizer: `tokenizer.json` is parsed once here (to validate the folder) and once by the tokenizers library;
  transformers would parse it a third time, in Python, to find the added tokens when `tokenizer_config.json` has
  no `added_tokens_decoder` (`load_tokenizer` hands it the ones already parsed), and a plain TokenizersBackend
  folder is loaded without importing AutoTokenizer's tables of every model type.
- The template: rendering differences render every record several times (once per prefix), and a template that
  writes the tools with `tojson(indent=4)` serializes them again each time with Python's pure-Python encoder (the C
  one has no indent). `memoized_tojson` compiles the template with a `tojson` that keeps the text of each value it
  wrote, keyed by the value's compact C serialization: the same text, not the same work.
"""

from __future__ import annotations

import json
from typing import Any

from .. import _compat
from ..tokenizer.folder import load_tokenizer
from .followed import shape_concat, shape_filters, shape_join, shape_tojson

__all__ = ["compile_template", "load_tokenizer", "memoized_tojson"]

MEMO_ENTRIES = 4096  # distinct values kept (tool schemas, argument objects); the memo starts over past it


def memoized_tojson(tojson: Any) -> Any:
    """`tojson` (transformers' filter: `json.dumps` with its options) remembering what it wrote with an indent.
    The compact serialization (C, fast) names the value: two values with the same one serialize the same way."""
    memo: dict[tuple[Any, ...], str] = {}

    def filter_(x: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("indent") is None and len(args) < 2:  # no indent: the C encoder does it already
            return tojson(x, *args, **kwargs)
        try:
            key = (json.dumps(x, ensure_ascii=False), args, tuple(sorted(kwargs.items())))
            text = memo.get(key)
        except (TypeError, ValueError):  # not JSON, or unhashable options: as the filter does, error included
            return tojson(x, *args, **kwargs)
        if text is None:
            if len(memo) >= MEMO_ENTRIES:
                memo.clear()
            text = memo[key] = tojson(x, *args, **kwargs)
        return text

    return filter_


def compile_template(source: str, shapes: bool = False) -> Any:
    """transformers' compiled template for `source`, on an overlay of its environment whose `tojson` is memoized
    (the shared environment is left as it is); with `shapes`, its `tojson` also writes the markers of a shape's
    strings (`shapes.shape_tojson`)."""
    compiled = _compat.compile_template(source)
    environment = compiled.environment.overlay()
    environment.filters = {**compiled.environment.filters}
    tojson = memoized_tojson(compiled.environment.filters["tojson"])
    environment.filters["tojson"] = shape_tojson(tojson) if shapes else tojson
    if shapes:  # what jinja2 joins (`~`, a macro's output, a `{% set %}` block) keeps the data's strings followed
        environment.code_generator_class = _compat.join_generator()
        environment.concat = shape_concat
        environment.join_strings = shape_join
        environment.filters, environment.tests = shape_filters(environment.filters, dict(environment.tests))
    return environment.from_string(source)
