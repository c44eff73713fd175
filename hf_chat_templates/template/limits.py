"""Bounds on rendering an untrusted template: time, memory, output size. Defaults never bother a real template.

transformers' sandbox stops attribute escapes, but not a loop that runs for hours, a string of gigabytes, or a
macro that recurses until the interpreter gives up. `limited()` wraps one render:

- time: a real-time timer (SIGALRM) in the main thread, a trace-function deadline elsewhere;
- memory: the address space may grow by at most `max_memory_bytes` while the render runs (RLIMIT_AS), so a
  string bomb fails with MemoryError instead of taking the machine;
- output: a rendering longer than `max_chars` is refused after the fact.

Each surfaces as RenderLimitExceeded naming the limit. Override the defaults with HF_CHAT_TEMPLATES_RENDER_SECONDS,
HF_CHAT_TEMPLATES_RENDER_MAX_CHARS and HF_CHAT_TEMPLATES_RENDER_MAX_MEMORY_MB.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


class RenderLimitExceeded(Exception):
    """A render hit a limit; the message names it and how to raise it."""


@dataclass(frozen=True)
class RenderLimits:
    seconds: float = 10.0
    max_chars: int = 10_000_000
    max_memory_bytes: int = 2 << 30

    @classmethod
    def from_env(cls) -> RenderLimits:
        env = os.environ.get
        return cls(
            seconds=float(env("HF_CHAT_TEMPLATES_RENDER_SECONDS") or cls.seconds),
            max_chars=int(env("HF_CHAT_TEMPLATES_RENDER_MAX_CHARS") or cls.max_chars),
            max_memory_bytes=int(env("HF_CHAT_TEMPLATES_RENDER_MAX_MEMORY_MB") or (cls.max_memory_bytes >> 20)) << 20,
        )


def _address_space() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def _memory_cap(extra: int) -> Iterator[None]:
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = _address_space() + extra
    except (OSError, ValueError):  # no /proc or no RLIMIT_AS here: run without the cap
        yield
        return
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield  # a tighter limit is already in force
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    message = f"the render ran past the time limit of {seconds:g} s (raise it with HF_CHAT_TEMPLATES_RENDER_SECONDS)"
    if threading.current_thread() is threading.main_thread():

        def on_alarm(signum: int, frame: Any) -> None:
            raise RenderLimitExceeded(message)

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        return
    end = time.monotonic() + seconds
    previous_trace = sys.gettrace()

    def trace(frame: Any, event: str, arg: Any) -> Any:
        if time.monotonic() > end:
            raise RenderLimitExceeded(message)
        return trace

    sys.settrace(trace)
    try:
        yield
    finally:
        sys.settrace(previous_trace)


@contextlib.contextmanager
def limited(limits: RenderLimits | None = None) -> Iterator[RenderLimits]:
    """Run one render within `limits`; MemoryError and RecursionError become RenderLimitExceeded too."""
    limits = limits or RenderLimits.from_env()
    try:
        with _memory_cap(limits.max_memory_bytes), _deadline(limits.seconds):
            yield limits
    except MemoryError:
        raise RenderLimitExceeded(
            f"the render needed more than {limits.max_memory_bytes >> 20} MB "
            "(raise it with HF_CHAT_TEMPLATES_RENDER_MAX_MEMORY_MB)"
        ) from None
    except RecursionError:
        raise RenderLimitExceeded(
            "the render recursed past Python's recursion limit (a macro calling itself?)"
        ) from None


def check_output(text: str, limits: RenderLimits) -> str:
    if len(text) > limits.max_chars:
        raise RenderLimitExceeded(
            f"the rendering has {len(text):,} characters, over the limit of {limits.max_chars:,} "
            "(raise it with HF_CHAT_TEMPLATES_RENDER_MAX_CHARS)"
        )
    return text
