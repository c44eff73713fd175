"""Bounds on rendering an untrusted template: time, memory, output size, per render and per run. Defaults never
bother a real template.

transformers' sandbox stops attribute escapes, but not a loop that runs for hours, a string of gigabytes, or a
macro that recurses until the interpreter gives up. `limited()` wraps one render:

- time: CPU time, not wall time, so a busy machine never fails a render that a quiet one passes: a CPU-time timer
  (SIGPROF) in the main thread, a trace-function deadline on the thread's CPU clock elsewhere;
- memory: the address space may grow by at most `max_memory_bytes` while the render runs (RLIMIT_AS), so a
  string bomb fails with MemoryError instead of taking the machine;
- output: a rendering longer than `max_chars` is refused (`check_output`).

Each surfaces as RenderLimitExceeded naming the limit. Override the defaults with HF_CHAT_TEMPLATES_RENDER_SECONDS,
HF_CHAT_TEMPLATES_RENDER_MAX_CHARS and HF_CHAT_TEMPLATES_RENDER_MAX_MEMORY_MB.

A run (one command: `verify` renders a template some hundred times) gives each template a `RenderBudget`: the
renders of that template may spend together `RUN_FACTOR` times the time and output one render may, and once one
render trips a limit the template is stopped for the rest of the run: every later render fails at once with the
same message. A hostile template costs one finding and about twice the per-render limit, not one wait per probe.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
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


# What the renders of one template may spend together in one run, in units of one render's limits.
RUN_FACTOR = 2


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


@dataclass
class RenderBudget:
    """What the renders of one template have spent in one run (CPU seconds, characters), and the message of the
    limit that stopped it, if one did."""

    limits: RenderLimits
    seconds: float = 0.0
    chars: int = 0
    stopped: str | None = None

    @property
    def seconds_left(self) -> float:
        return self.limits.seconds * RUN_FACTOR - self.seconds

    def stop(self, err: RenderLimitExceeded) -> RenderLimitExceeded:
        self.stopped = self.stopped or str(err)
        return err

    def check(self) -> None:
        """Fail at once when an earlier render of this run stopped the template."""
        if self.stopped is not None:
            raise RenderLimitExceeded(self.stopped)
        if self.seconds_left <= 0:
            raise self.stop(RenderLimitExceeded(_run_time_message(self.limits)))


_RUN: contextvars.ContextVar[dict[tuple[str, RenderLimits], RenderBudget] | None] = contextvars.ContextVar(
    "hf_chat_templates_render_run", default=None
)


@contextlib.contextmanager
def render_run() -> Iterator[None]:
    """One run (a command): within it, every renderer of the same template under the same limits shares one
    budget. Outside a run, each renderer has its own."""
    token = _RUN.set({})
    try:
        yield
    finally:
        _RUN.reset(token)


def budget_for(template: str, limits: RenderLimits) -> RenderBudget:
    """The current run's budget for `template` under `limits`; a new budget outside a run."""
    run = _RUN.get()
    if run is None:
        return RenderBudget(limits)
    key = (hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest(), limits)
    return run.setdefault(key, RenderBudget(limits))


def _run_time_message(limits: RenderLimits) -> str:
    return (
        f"the renders of this template together ran past the time limit of {limits.seconds * RUN_FACTOR:g} s of "
        f"CPU time for one run ({RUN_FACTOR} × HF_CHAT_TEMPLATES_RENDER_SECONDS)"
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
def _cpu_timer(seconds: float, message: str) -> Iterator[None]:
    """SIGPROF after `seconds` of the process's CPU time; an outer timer of the same kind is resumed after."""

    def on_timer(signum: int, frame: Any) -> None:
        raise RenderLimitExceeded(message)

    previous = signal.signal(signal.SIGPROF, on_timer)
    start = time.process_time()
    outer, _ = signal.setitimer(signal.ITIMER_PROF, seconds)
    if 0 < outer < seconds:
        signal.setitimer(signal.ITIMER_PROF, outer)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
        if outer > 0:
            signal.setitimer(signal.ITIMER_PROF, max(outer - (time.process_time() - start), 1e-3))


@contextlib.contextmanager
def _deadline(seconds: float, message: str) -> Iterator[None]:
    seconds = max(seconds, 1e-3)  # a zero timer is no timer
    if threading.current_thread() is threading.main_thread():
        with _cpu_timer(seconds, message):
            yield
        return
    end = time.thread_time() + seconds
    previous_trace = sys.gettrace()

    def trace(frame: Any, event: str, arg: Any) -> Any:
        if time.thread_time() > end:
            raise RenderLimitExceeded(message)
        return trace

    sys.settrace(trace)
    try:
        yield
    finally:
        sys.settrace(previous_trace)


@contextlib.contextmanager
def limited(limits: RenderLimits | None = None, budget: RenderBudget | None = None) -> Iterator[RenderLimits]:
    """Run one render within `limits` (default: the budget's, else the environment's); MemoryError and
    RecursionError become RenderLimitExceeded too. With a `budget`, a render of a stopped template fails at once,
    the render may use at most what the run has left, and a limit it trips stops the template for the run."""
    limits = limits or (budget.limits if budget is not None else RenderLimits.from_env())
    seconds, message = (
        limits.seconds,
        (
            f"the render ran past the time limit of {limits.seconds:g} s of CPU time "
            "(raise it with HF_CHAT_TEMPLATES_RENDER_SECONDS)"
        ),
    )
    if budget is not None:
        budget.check()
        if budget.seconds_left < seconds:
            seconds, message = budget.seconds_left, _run_time_message(limits)
    start = time.process_time()
    try:
        with _memory_cap(limits.max_memory_bytes), _deadline(seconds, message):
            yield limits
    except MemoryError:
        raise _stopped(
            budget,
            f"the render needed more than {limits.max_memory_bytes >> 20} MB "
            "(raise it with HF_CHAT_TEMPLATES_RENDER_MAX_MEMORY_MB)",
        ) from None
    except RecursionError:
        raise _stopped(budget, "the render recursed past Python's recursion limit (a macro calling itself?)") from None
    except RenderLimitExceeded as err:
        raise _stopped(budget, str(err)) from None
    finally:
        if budget is not None:
            budget.seconds += time.process_time() - start


def _stopped(budget: RenderBudget | None, message: str) -> RenderLimitExceeded:
    err = RenderLimitExceeded(message)
    return budget.stop(err) if budget is not None else err


def check_output(text: str, limits: RenderLimits, budget: RenderBudget | None = None) -> str:
    """`text`, or RenderLimitExceeded when it is over `max_chars`, or when the run's renderings of the template
    add up to more than `RUN_FACTOR` times that (then the budget is stopped)."""
    if len(text) > limits.max_chars:
        raise _stopped(
            budget,
            f"the rendering has {len(text):,} characters, over the limit of {limits.max_chars:,} "
            "(raise it with HF_CHAT_TEMPLATES_RENDER_MAX_CHARS)",
        )
    if budget is not None:
        budget.chars += len(text)
        if budget.chars > limits.max_chars * RUN_FACTOR:
            raise _stopped(
                budget,
                f"the renderings of this template add up to {budget.chars:,} characters, over the limit of "
                f"{limits.max_chars * RUN_FACTOR:,} for one run ({RUN_FACTOR} × HF_CHAT_TEMPLATES_RENDER_MAX_CHARS)",
            )
    return text
