"""What a `prepare` process loads once, loaded so that its fixed and per-record costs stay small.

- The tokenizer: `tokenizer.folder.load_tokenizer` hands transformers the added tokens `read_folder` read (it would
  parse tokenizer.json again, in Python, to find them), and loads a plain TokenizersBackend folder without importing
  AutoTokenizer's tables of every model type.
- The template: rendering differences render every record several times (once per prefix), and a template that
  writes the tools with `tojson(indent=4)` serializes them again each time with Python's pure-Python encoder (the C
  one has no indent). `memoized_tojson` compiles the template with a `tojson` that keeps the text of each value it
  wrote, keyed by the value's compact C serialization: the same text, not the same work.
- Compiling: jinja2 takes 0.13 s to compile a long template (Llama 3.2's), and a run compiles it twice (plainly, and
  for shapes). `compile_template` keeps the compiled code in the cache folder, as Python keeps a module's bytecode:
  keyed by the source and by everything the code depends on (Python's bytecode version, jinja2's and transformers'
  versions, the environment's settings, filters and tests, and this package's code that shapes them), it is read
  again instead of compiled.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import marshal
import sys
import types
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import _compat
from ..tokenizer.cache_folder import cache_file, keep, read_kept
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
    strings (`shapes.shape_tojson`). The environment is the one transformers makes for an empty template: the
    source is compiled once, on the overlay, and that compiled code is kept (`_compiled`)."""
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
    return _compiled(environment, source)


def _compiled(environment: Any, source: str) -> Any:
    """`environment.from_string(source)`, its code read from the cache folder when compiled before with the same
    key, else compiled and kept there. A record that cannot be read or trusted (`read_kept`), or whose code does
    not make a template, is compiled again; a cache folder that cannot be written keeps nothing."""
    record = _code_record(environment, source)
    kept = read_kept(record) if record is not None else None
    if kept is not None:
        with contextlib.suppress(Exception):  # not a template's code after all: compiled again below
            code = marshal.loads(kept)
            if isinstance(code, types.CodeType):
                return environment.template_class.from_code(environment, code, environment.make_globals(None), None)
    code = environment.compile(source)
    if record is not None:
        keep(record, marshal.dumps(code))
    return environment.template_class.from_code(environment, code, environment.make_globals(None), None)


def _code_record(environment: Any, source: str) -> Path | None:
    """Where the compiled code of `source` in `environment` is kept: a hash of everything the code depends on."""
    settings = (
        type(environment).__name__,
        environment.code_generator_class.__name__,
        environment.block_start_string,
        environment.block_end_string,
        environment.variable_start_string,
        environment.variable_end_string,
        environment.comment_start_string,
        environment.comment_end_string,
        environment.line_statement_prefix,
        environment.line_comment_prefix,
        environment.trim_blocks,
        environment.lstrip_blocks,
        environment.newline_sequence,
        environment.keep_trailing_newline,
        environment.autoescape,
        environment.optimized,
        environment.is_async,
        sorted(environment.extensions),
        sorted(environment.filters),
        sorted(environment.tests),
    )
    try:
        key = hashlib.sha256(
            f"{_code_fingerprint()}\n{settings!r}\n".encode() + source.encode("utf-8", "surrogatepass")
        )
    except OSError:  # this package's code could not be read
        return None
    return cache_file("compiled-templates", f"{key.hexdigest()}.marshal")


@lru_cache(maxsize=1)
def _code_fingerprint() -> str:
    """Python's bytecode version, jinja2's and transformers' versions and transformers' code that makes its
    environment, and this package's code that makes the overlays and their filters (a filter applied to a constant
    is run when compiling, its result written into the code)."""
    import importlib.util

    import jinja2
    import transformers

    here = Path(__file__).parent
    parts = [importlib.util.MAGIC_NUMBER, sys.version.encode(), jinja2.__version__.encode()]
    parts.append(transformers.__version__.encode())
    parts.append(Path(_compat.transformers_template_module()).read_bytes())
    parts += [path.read_bytes() for path in (Path(__file__), here / "followed.py", here.parent / "_compat.py")]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()
