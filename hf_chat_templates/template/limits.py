"""Bounds on rendering an untrusted template: time, memory, output size, per render and per run. Defaults never
bother a real template, and a render is measured by its own work, never by what other threads of the process do
meanwhile (`prepare` renders while its encoders run).

transformers' sandbox stops attribute escapes, but not a loop that runs for hours, a string of gigabytes, or a
macro that recurses until the interpreter gives up. `limited()` wraps one render:

- time: the CPU time of the render's own thread, not wall time (a busy machine never fails a render that a quiet
  one passes) and not the process's (an encoder burning CPU beside it neither). In the main thread a timer on the
  process's CPU time (SIGPROF) is the alarm: it can only ring early, as the process has spent at least what the
  thread has, and when it rings the thread's own clock decides: past the limit the render fails, else the alarm is
  set again for what is left. Elsewhere, a trace-function deadline on the thread's CPU clock;
- memory: the render may take `max_memory_bytes` of its own. Linux counts memory per process, never per thread,
  and following the render's allocations (tracemalloc) costs more than the render. So the address space gets a
  cap (RLIMIT_AS) that is a backstop, well above what the others use: its size when the render starts, plus
  `max_memory_bytes`, plus `OTHERS_HEADROOM` for the other threads (their buffers, and a new thread's stack and
  malloc arena, address space though hardly memory; `prepare` of 100,000 agent records peaks at 810 MiB in all).
  A string bomb fails with MemoryError instead of taking the machine, and an encoder's allocation does not meet
  the cap. The MemoryError is the render's own only when, once the render's frames have let go of what they held,
  the process has grown by at most `OTHERS_HEADROOM` since the render began: the others then left it its whole
  `max_memory_bytes`, so it asked for more. Otherwise the others took the room, and the MemoryError goes on as it
  is, the template not blamed. A render never fails below `max_memory_bytes`, and may get as far as the cap when
  the others are idle. (A check in the sandbox on `*` would be exact, but would see one of the many ways to build
  a big string: `~` in a loop, filters, string methods.) Renders in several threads share one cap, the loosest;
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
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


class RenderLimitExceeded(Exception):
    """A render hit a limit; the message names it and how to raise it."""


# What the renders of one template may spend together in one run, in units of one render's limits.
RUN_FACTOR = 2
# What the other threads may add to the address space while a render runs, beyond the render's own room.
OTHERS_HEADROOM = 2 << 30
# The shortest time the main thread's alarm is set for: a render may run over its limit by this much CPU time.
MIN_ALARM = 1e-3


@dataclass(frozen=True)
class RenderLimits:
    seconds: float = 10.0
    max_chars: int = 10_000_000
    max_memory_bytes: int = 2 << 30

    @classmethod
    def from_env(cls) -> RenderLimits:
        """The limits, raised or lowered by HF_CHAT_TEMPLATES_RENDER_SECONDS, _MAX_CHARS and _MAX_MEMORY_MB (a
        positive number each; anything else is a UsageError naming the variable)."""
        return cls(
            seconds=_positive("HF_CHAT_TEMPLATES_RENDER_SECONDS", float, cls.seconds),
            max_chars=_positive("HF_CHAT_TEMPLATES_RENDER_MAX_CHARS", int, cls.max_chars),
            max_memory_bytes=_positive("HF_CHAT_TEMPLATES_RENDER_MAX_MEMORY_MB", int, cls.max_memory_bytes >> 20) << 20,
        )


def _positive(name: str, kind: type[Any], default: Any) -> Any:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = kind(text)
        if value > 0 and value == value and value != float("inf"):
            return value
    except ValueError:
        pass
    from ..errors import UsageError

    raise UsageError(
        f"{name}={text!r} is not a positive {'whole ' if kind is int else ''}number",
        hint=f"set it to a number above 0 (default {default}), or unset it",
    )


@dataclass
class RenderBudget:
    """What the renders of one template have spent in one run (their own threads' CPU seconds, characters), and
    the message of the limit that stopped it, if one did."""

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


class _SharedCap:
    """RLIMIT_AS while renders run, in any threads: the loosest cap they need, so that none has less room than its
    own (a tighter limit set outside them stays); the limit outside is put back when the last one ends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.caps: dict[object, int] = {}
        self.outside = resource.RLIM_INFINITY

    def add(self, key: object, cap: int) -> None:
        with self.lock:
            if not self.caps:
                self.outside = resource.getrlimit(resource.RLIMIT_AS)[0]
            self.caps[key] = cap
            self._apply()

    def remove(self, key: object) -> None:
        with self.lock:
            if self.caps.pop(key, None) is not None:
                self._apply()

    def _apply(self) -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = max(self.caps.values(), default=self.outside)
        for bound in (self.outside, hard):  # RLIM_INFINITY is -1: no bound, never the smaller
            if bound != resource.RLIM_INFINITY:
                soft = min(soft, bound)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


_CAP = _SharedCap()


@contextlib.contextmanager
def _memory_cap(limits: RenderLimits) -> Iterator[int | None]:
    """The address space capped at its size now plus the render's room and the others' headroom; yields that size
    (None where there is no /proc: then no cap)."""
    try:
        began = _address_space()
    except (OSError, ValueError):
        yield None
        return
    key = object()
    try:
        _CAP.add(key, began + limits.max_memory_bytes + OTHERS_HEADROOM)
        yield began
    finally:
        _CAP.remove(key)


def _own_memory_error(err: MemoryError, began: int | None) -> bool:
    """Whether a render's MemoryError is its own: once the render's frames have let go of what they held, the
    process has grown by at most `OTHERS_HEADROOM` since it began, so the others left it its whole room. Its
    caller's frames, still running, keep theirs."""
    if began is None:
        return True
    traceback.clear_frames(err.__traceback__)
    try:
        return _address_space() - began <= OTHERS_HEADROOM
    except (OSError, ValueError):
        return True


# The renders running in the main thread, outermost first: (the thread's CPU time at which each is over, message).
_MAIN_DEADLINES: list[tuple[float, str]] = []


def _set_alarm() -> None:
    """SIGPROF when the process has spent the CPU time the nearest deadline leaves the main thread: never late, as
    the process spends at least what the thread does."""
    end, _ = min(_MAIN_DEADLINES)
    signal.setitimer(signal.ITIMER_PROF, max(end - time.thread_time(), MIN_ALARM))


def _on_alarm(signum: int, frame: Any) -> None:
    """The alarm rang: the render whose own time is up fails; if none is (the other threads spent the rest), the
    alarm is set again for what is left."""
    if not _MAIN_DEADLINES:  # the render was ending as it rang
        return
    end, message = min(_MAIN_DEADLINES)
    if time.thread_time() >= end:
        raise RenderLimitExceeded(message)
    _set_alarm()


@contextlib.contextmanager
def _cpu_timer(seconds: float, message: str) -> Iterator[None]:
    """RenderLimitExceeded once the main thread has spent `seconds` of CPU time in the block. A render inside
    another keeps the outer's deadline too; a SIGPROF timer set before the outermost waits until it ends."""
    entry = (time.thread_time() + seconds, message)
    outermost = not _MAIN_DEADLINES
    if outermost:
        previous = signal.signal(signal.SIGPROF, _on_alarm)
        start = time.process_time()
        other, interval = signal.setitimer(signal.ITIMER_PROF, 0)
    try:
        _MAIN_DEADLINES.append(entry)  # in the try: an outer render's alarm may ring as soon as the call returns
        _set_alarm()
        yield
    finally:
        if entry in _MAIN_DEADLINES:  # first: from here on the alarm leaves this render alone
            _MAIN_DEADLINES.remove(entry)
        if outermost:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.signal(signal.SIGPROF, previous)
            if other > 0:
                signal.setitimer(signal.ITIMER_PROF, max(other - (time.process_time() - start), MIN_ALARM), interval)
        else:
            _set_alarm()  # for the outer render's deadline


@contextlib.contextmanager
def _deadline(seconds: float, message: str) -> Iterator[None]:
    seconds = max(seconds, MIN_ALARM)  # a zero timer is no timer
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
    RecursionError become RenderLimitExceeded too (a MemoryError only when the render itself asked for too much).
    With a `budget`, a render of a stopped template fails at once, the render may use at most what the run has
    left, and a limit it trips stops the template for the run. Time is the CPU time of the calling thread.

    >>> with limited(RenderLimits(seconds=1.0)):
    ...     text = "x" * 10
    >>> text
    'xxxxxxxxxx'
    """
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
    start = time.thread_time()
    began: int | None = None
    try:
        with _memory_cap(limits) as began, _deadline(seconds, message):
            yield limits
    except MemoryError as err:
        if not _own_memory_error(err, began):
            raise  # the other threads took the room: the process ran short, not this render
        raise _stopped(
            budget,
            f"the render needed more than {limits.max_memory_bytes >> 20} MB "
            "(raise it with HF_CHAT_TEMPLATES_RENDER_MAX_MEMORY_MB)",
        ) from None
    except RecursionError:
        raise _stopped(budget, "the render recursed past Python's recursion limit (a macro calling itself?)") from None
    except RenderLimitExceeded as err:
        raise _stopped(budget, str(err)) from None
    except Exception as err:
        # Jinja rewriting the traceback of a limit raised inside a loop's filter can itself fail (a frame without a
        # line number): the limit is what stopped the render
        if isinstance(err.__context__, RenderLimitExceeded):
            raise _stopped(budget, str(err.__context__)) from None
        raise
    finally:
        if budget is not None:
            budget.seconds += time.thread_time() - start


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
