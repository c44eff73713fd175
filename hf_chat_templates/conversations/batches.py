"""Batches of conversations: rendered under limits, and mapped over worker processes.

`render_batch` renders a whole batch under one set of limits (a real batch renders in well under a second); only
when the batch trips them is it rendered again record by record, to name the record that did. `map_batches` runs
the same per-batch function in this process or in a pool of spawned workers, each with its own state built once.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from ..template.limits import RenderLimitExceeded, RenderLimits, check_output, limited
from ..template.rendering import describe_exception

T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S")


def _whole_text(value: Any) -> str:
    return value if isinstance(value, str) else value[0]


def render_batch(
    items: Sequence[T],
    render_one: Callable[[T], R],
    *,
    limits: RenderLimits | None = None,
    text_of: Callable[[R], str] = _whole_text,
    budget_chars: int | None = None,
) -> list[tuple[int, R | None, str | None]]:
    """(index, rendering, None) or (index, None, why) for each item. `text_of(rendering)` is the text whose size
    the limits bound (default: the rendering itself, or its first element). With `budget_chars`, rendering stops
    after the item that brings the renderings kept past that many characters: the outcomes cover a prefix of
    `items` (at least one), so a batch of huge renderings is encoded in parts, never all held at once."""
    limits = limits or RenderLimits.from_env()

    def run(guard_each: bool) -> list[tuple[int, R | None, str | None]]:
        outcomes: list[tuple[int, R | None, str | None]] = []
        held = 0
        for index, item in enumerate(items):
            if budget_chars is not None and held > budget_chars:
                break
            try:
                with limited(limits) if guard_each else contextlib.nullcontext():
                    value = render_one(item)
                check_output(text_of(value), limits)
            except RenderLimitExceeded as err:
                if not guard_each:
                    raise
                outcomes.append((index, None, f"limit: {err}"))
            except Exception as err:  # a template may raise anything; the record is reported, the batch goes on
                outcomes.append((index, None, describe_exception(err)))
            else:
                outcomes.append((index, value, None))
                held += len(text_of(value))
        return outcomes

    try:
        with limited(limits):
            return run(guard_each=False)
    except RenderLimitExceeded:
        return run(guard_each=True)


def constant(value: S) -> Callable[[], S]:
    """A picklable factory that gives `value` (already picklable itself) to each worker."""
    return functools.partial(_same, value)


def _same(value: S) -> S:
    return value


_STATE: Any = None


def _init_worker(factory: Callable[[], Any]) -> None:
    global _STATE
    _STATE = factory()


def _call(job: tuple[Callable[[Any, Any], Any], Any]) -> Any:
    work, batch = job
    return work(_STATE, batch)


def map_batches(
    factory: Callable[[], S], work: Callable[[S, T], R], batches: Iterable[T], *, workers: int | None = None
) -> Iterator[R]:
    """`work(state, batch)` for each batch, in order. With `workers` > 1 each spawned worker builds its state once
    with `factory()` (a picklable callable: only it crosses the process boundary, never a loaded tokenizer)."""
    if workers and workers > 1:
        context = multiprocessing.get_context("spawn")
        with context.Pool(workers, initializer=_init_worker, initargs=(factory,)) as pool:
            yield from pool.imap(_call, ((work, batch) for batch in batches))
        return
    state = factory()
    for batch in batches:
        yield work(state, batch)


def progress_bar(enabled: bool) -> Callable[..., None]:
    """`update(n, close=False)`: a bar on stderr when `enabled`, else nothing (the CLI enables it when stderr is a
    terminal, or HF_CHAT_TEMPLATES_PROGRESS=1)."""
    import sys

    if not enabled:
        return lambda n, close=False: None
    from tqdm import tqdm

    bar = tqdm(unit="conv", file=sys.stderr)

    def update(n: int, close: bool = False) -> None:
        bar.update(n)
        if close:
            bar.close()

    return update
