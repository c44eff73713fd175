"""What a `prepare` process loads once, loaded so that its fixed and per-record costs stay small.

- The tokenizer: `tokenizer.folder.load_tokenizer` hands transformers the added tokens `read_folder` read (it would
  parse tokenizer.json again, in Python, to find them), and loads a plain TokenizersBackend folder without importing
  AutoTokenizer's tables of every model type.
- The template: rendering differences render every record several times (once per prefix), and a template that
  writes the tools with `tojson(indent=4)` serializes them again each time with Python's pure-Python encoder (the C
  one has no indent). `memoized_tojson` compiles the template with a `tojson` that keeps the text of each value it
  wrote, keyed by the value's compact C serialization: the same text, not the same work.
- Compiling: jinja2 takes 0.13 s to compile a long template (Llama 3.2's). `compile_template` compiles a source
  once per process and environment (plain, shapes) and keeps the template in memory. Compiled code is never read
  from disk: a record in the cache folder would run outside the sandbox, whoever wrote it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from .. import _compat
from ..tokenizer.folder import load_tokenizer
from .shape_environment import (
    contains,
    shape_binop,
    shape_call,
    shape_concat,
    shape_filters,
    shape_join,
    shape_tojson,
    unfollowed,
)

__all__ = ["compile_template", "load_tokenizer", "memoized_tojson"]

MEMO_ENTRIES = 4096  # distinct values kept (tool schemas, argument objects); the memo starts over past it
COMPILED_ENTRIES = 16  # templates kept compiled per process (a run uses up to four: plain and tools, each with shapes)


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


@lru_cache(maxsize=COMPILED_ENTRIES)
def compile_template(source: str, shapes: bool = False) -> Any:
    """transformers' compiled template for `source`, on an overlay of its environment whose `tojson` is memoized
    (the shared environment is left as it is); with `shapes`, its `tojson` also writes the markers of a shape's
    strings (`shapes.shape_tojson`). The environment is the one transformers makes for an empty template: the
    source is compiled once, on the overlay, and the template is kept for the rest of the process."""
    base = _compat.compile_template("").environment
    environment = base.overlay()
    environment.filters = {**base.filters}
    tojson = memoized_tojson(base.filters["tojson"])
    environment.filters["tojson"] = shape_tojson(tojson) if shapes else tojson
    if shapes:  # what jinja2 joins (`~`, a macro's output, a `{% set %}` block) keeps the data's strings followed
        environment.code_generator_class = _compat.join_generator()
        environment.concat = shape_concat
        environment.join_strings = shape_join
        environment.filters, environment.tests = shape_filters(environment.filters, dict(environment.tests))
        environment.contains = contains  # `in` and `not in`
        environment.unfollowed = unfollowed
        environment.call = shape_call(environment.call)  # a method of the template's text given the data's strings
        environment.call_binop = shape_binop(environment.call_binop)
        environment.intercepted_binops = frozenset({"%"})  # compiled as `environment.call_binop(...)`
    return environment.from_string(source)
