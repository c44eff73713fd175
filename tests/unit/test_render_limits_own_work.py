"""A render is limited by its own work: the CPU time of its own thread, and the memory it asks for. Threads that
burn CPU or allocate beside it (prepare's encoders) neither trip its limits nor are refused because of it; a render
that really loops or blows up still fails, naming the limit."""

from __future__ import annotations

import hashlib
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hf_chat_templates.template import limits as limits_module
from hf_chat_templates.template.limits import RenderBudget, RenderLimitExceeded, RenderLimits, limited

LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
SHORT = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
MB = 1 << 20


def render(source: str) -> str:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment().from_string(source).render(messages=[{"role": "user", "content": "hi"}])


@pytest.fixture
def busy() -> Iterator[None]:
    """Another thread hashing a large buffer over and over: CPU time spent without the GIL, as an encoder does."""
    stop = threading.Event()
    started = threading.Event()
    buffer = bytes(8 * MB)

    def burn() -> None:
        while not stop.is_set():
            hashlib.sha256(buffer).digest()
            started.set()

    thread = threading.Thread(target=burn, daemon=True)
    thread.start()
    started.wait(10)
    yield
    stop.set()
    thread.join()


def idle_while_others_burn(seconds: float, step: Callable[[], Any] = lambda: None) -> None:
    """Sleep, with `step` between sleeps, until the process has spent `seconds` more of CPU time (the busy thread
    spends it: however loaded the machine, the process's clock passes the render's limit)."""
    end, give_up = time.process_time() + seconds, time.monotonic() + 60
    while time.process_time() < end and time.monotonic() < give_up:
        step()
        time.sleep(0.02)
    assert time.process_time() >= end, "the busy thread did not run"


def test_a_thread_burning_cpu_does_not_trip_a_short_render_on_the_main_thread(busy: None) -> None:
    own = time.thread_time()
    with limited(RenderLimits(seconds=0.2)):
        # the render waits between short renders; the other thread spends the process's CPU time meanwhile, past
        # the render's limit, so the process's timer rings, more than once
        idle_while_others_burn(0.6, lambda: render(SHORT))
        assert render(SHORT) == "<|user|>hi"
    assert time.thread_time() - own < 0.2


def test_a_render_that_loops_past_its_limit_trips_on_the_main_thread(busy: None) -> None:
    own = time.thread_time()
    with pytest.raises(RenderLimitExceeded, match=r"time limit of 0\.2 s"), limited(RenderLimits(seconds=0.2)):
        render(LOOP)
    assert 0.2 <= time.thread_time() - own < 1.0


def in_thread(work: Callable[[], Any]) -> Any:
    """What `work` returns or raises in a thread of its own."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as err:
            outcome.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    return outcome[0]


def test_off_the_main_thread_a_loop_trips_and_a_short_render_does_not(busy: None) -> None:
    def looping() -> float:
        own = time.thread_time()
        try:
            with limited(RenderLimits(seconds=0.2)):
                render(LOOP)
        except RenderLimitExceeded:
            return time.thread_time() - own
        raise AssertionError("the loop was not stopped")

    def short() -> str:
        with limited(RenderLimits(seconds=0.2)):
            idle_while_others_burn(0.6)
            return render(SHORT)

    assert 0.2 <= in_thread(looping) < 1.0
    assert in_thread(short) == "<|user|>hi"


def test_the_budget_counts_the_renders_own_cpu_time(busy: None) -> None:
    budget = RenderBudget(RenderLimits(seconds=5))
    with limited(budget=budget):
        idle_while_others_burn(0.4)
    assert budget.seconds < 0.05
    with limited(budget=budget):
        end = time.thread_time() + 0.1
        while time.thread_time() < end:
            pass
    assert 0.1 <= budget.seconds < 0.2


def test_a_render_inside_another_keeps_the_outer_deadline() -> None:
    with pytest.raises(RenderLimitExceeded, match=r"time limit of 0\.2 s"), limited(RenderLimits(seconds=0.2)):
        with limited(RenderLimits(seconds=30)):
            pass  # the inner render ends well within both
        with limited(RenderLimits(seconds=30)):
            render(LOOP)


def test_a_timer_set_before_the_render_waits_and_rings_after() -> None:
    rang: list[int] = []
    previous = signal.signal(signal.SIGPROF, lambda signum, frame: rang.append(signum))
    try:
        signal.setitimer(signal.ITIMER_PROF, 0.05)
        with limited(RenderLimits(seconds=5)):
            end = time.thread_time() + 0.1
            while time.thread_time() < end:
                pass
        assert not rang and signal.getsignal(signal.SIGPROF) is not limits_module._on_alarm
        assert 0 < signal.getitimer(signal.ITIMER_PROF)[0] <= 0.05
        end = time.thread_time() + 1
        while not rang and time.thread_time() < end:
            pass
        assert rang == [signal.SIGPROF]
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


# ---- memory: a cap the other threads do not meet; a MemoryError is the render's only when it asked for too much


class Allocator:
    """A thread that holds the memory it is asked for, started (its stack and malloc arena made) before a render.
    `bytes(size)` is calloc'd: address space, which the cap counts, but no page is touched."""

    def __init__(self) -> None:
        self.requests: queue.Queue[int | None] = queue.Queue()
        self.done: queue.Queue[BaseException | None] = queue.Queue()
        self.held: list[bytes] = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        self.allocate(MB)

    def run(self) -> None:
        while (size := self.requests.get()) is not None:
            try:
                self.held.append(bytes(size))
                self.done.put(None)
            except BaseException as err:
                self.done.put(err)

    def allocate(self, size: int) -> None:
        self.requests.put(size)
        error = self.done.get(timeout=30)
        if error is not None:
            raise error

    def close(self) -> None:
        self.requests.put(None)
        self.thread.join()
        self.held.clear()


# The render's own 256 MB, the others' 512 MB: the cap is 768 MB above the address space when the render starts.
# The render's allocations are large, so that no free space left in the heap could hold them.
SMALL = RenderLimits(seconds=30, max_memory_bytes=256 * MB)


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch) -> Iterator[Allocator]:
    monkeypatch.setattr(limits_module, "OTHERS_HEADROOM", 512 * MB)
    other = Allocator()
    yield other
    other.close()


def test_another_threads_allocation_during_a_render_is_not_refused(allocator: Allocator) -> None:
    with limited(SMALL):
        allocator.allocate(450 * MB)  # over the render's 256 MB, within the others' headroom
        own = bytes(200 * MB)
    assert len(own) == 200 * MB


def test_a_memory_error_the_other_threads_caused_is_not_blamed_on_the_render(allocator: Allocator) -> None:
    budget = RenderBudget(SMALL)
    with pytest.raises(MemoryError), limited(budget=budget):
        allocator.allocate(600 * MB)  # past the others' headroom, within the cap
        bytes(240 * MB)  # within the render's own 256 MB, but past the cap
    assert budget.stopped is None
    with limited(budget=budget):  # the template is not stopped for the run
        pass


def test_a_render_that_asks_for_more_than_its_memory_fails_naming_the_limit(allocator: Allocator) -> None:
    budget = RenderBudget(SMALL)
    with pytest.raises(RenderLimitExceeded, match="needed more than 256 MB"), limited(budget=budget):
        allocator.allocate(100 * MB)  # the others within their headroom
        bytes(1000 * MB)
    assert budget.stopped and "HF_CHAT_TEMPLATES_RENDER_MAX_MEMORY_MB" in budget.stopped
    with pytest.raises(RenderLimitExceeded, match="needed more than 256 MB"), limited(SMALL):
        render("{{ 'x' * 2000000000 }}")  # the others idle: a string bomb in the sandbox


def test_the_cap_is_put_back_after_renders_in_two_threads() -> None:
    import resource

    before = resource.getrlimit(resource.RLIMIT_AS)
    inside = threading.Event()
    leave = threading.Event()

    def outlasting() -> None:
        with limited(SMALL):
            inside.set()
            leave.wait(30)

    thread = threading.Thread(target=outlasting)
    thread.start()
    inside.wait(30)
    with limited(SMALL):
        pass
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != before[0]  # the other render still has its cap
    leave.set()
    thread.join()
    assert resource.getrlimit(resource.RLIMIT_AS) == before


def test_a_limit_tripped_inside_a_loops_filter_is_named_not_jinjas_traceback_error() -> None:
    """Jinja rewriting the traceback of an exception raised inside a loop's `if` filter can fail itself (a
    generated frame without a line number: a TypeError). The limit stopped the render, and is what it says."""
    filtered = (
        "{% set s = 'abcdefgh' * 64 %}{% for c in s * 64 %}{% for d in s * 64 if d == c %}{% endfor %}{% endfor %}"
    )
    with pytest.raises(RenderLimitExceeded, match="time limit"), limited(RenderLimits(seconds=0.2)):
        render(filtered)
