"""llama.cpp's own chat-template engine: `common/jinja` compiled to WebAssembly and run with wasmtime, as the
`ggufdoctor` package ships it, pinned to one llama.cpp build (the profile's version).

The module does what `llama-server` does before rendering: it probes the template's capabilities and normalizes
the messages for it (content parts joined to a string for a template that reads strings, a system message merged
into the first user turn for a template without a system role, ...), and it pins its own clock
(`fixed_clock`). For a gpt-oss template (one that writes `<|channel|>`) it first copies each message's
`reasoning_content` to `thinking`, dropping the content of one with tool calls, as llama-server's gpt-oss format
does (`common_chat_params_init_gpt_oss`, common/chat.cpp). It gets what llama-server passes: the messages and tools
as sent (OpenAI format, not transformers' normalization; `tools` only when some are given), `add_generation_prompt`
(present only when true), `bos_token` and `eos_token` (the tokenizer's, or "" for one it lacks, as llama.cpp passes
for a vocabulary without it), and the template's kwargs. ggufdoctor fills in defaults of its own under these (bos
"<s>", eos "</s>", unk "<unk>", pad "<pad>"): every value supplied here replaces them; `unk_token` and `pad_token`
are passed when the tokenizer has them, and a rendering that reads one the tokenizer lacks says so in its note.

The WebAssembly module is compiled once per process (one shared engine), and each render runs in its own store
with ggufdoctor's fuel and memory bounds: an endless loop is a render error, never a hang. `start_all` renders in a
process of its own (`llamacpp_worker`), so that `verify` compares the other engines meanwhile.
"""

from __future__ import annotations

import atexit
import datetime as _dt
import functools
import importlib.util
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from ..rendering import Rendered
from . import json_worker
from .base import EngineRendered, RenderJob

_DEFAULTED = re.compile(r"\b(unk_token|pad_token)\b")
# What llama-server defines in every template context on its own (common/chat.cpp writes `enable_thinking`, true
# unless reasoning is turned off; common/arg.cpp defaults `preserve_reasoning` to true, which common/jinja/caps.cpp
# expands into the other four), where transformers defines nothing: `engine-parity` names them when they explain
# a difference.
SERVER_DEFAULTS = {
    "enable_thinking": True,
    "preserve_reasoning": True,
    "preserve_thinking": True,
    "clear_thinking": False,
    "truncate_history_thinking": False,
    "drop_thinking": False,
}
GPT_OSS_MARK = "<|channel|>"


@functools.lru_cache(maxsize=1)
def _wasm_engine() -> Any:
    """ggufdoctor's engine, one per process: it compiles the module on its first render and keeps it. It is let go
    at exit, while wasmtime can still free what it holds (freed later, at interpreter teardown, it prints errors)."""
    from ggufdoctor.engines.llamacpp_engine import LlamaCppEngine as WasmEngine

    atexit.register(_wasm_engine.cache_clear)
    return WasmEngine()


# What a worker (`llamacpp_worker`) found of the engine it ran: whether it runs here, its build, its pinned clock.
# Once known, this process says so without loading the engine itself.
_REPORTED: dict[str, Any] = {}


def _facts() -> dict[str, Any]:
    """The engine's facts, as a worker reported them, else from the engine loaded here (ImportError without it)."""
    if _REPORTED:
        return _REPORTED
    from ggufdoctor.engines.jinja2_engine import PINNED_NOW

    engine = _wasm_engine()
    return {
        "available": engine.available,
        "reason": engine.unavailable_reason,
        "version": engine.version,
        "commit": engine.commit,
        "pinned_now": PINNED_NOW.isoformat(),
    }


class LlamaCppEngine:
    """The `llama.cpp` profile: llama.cpp's Jinja engine and message normalization, from ggufdoctor."""

    name = "llama.cpp"
    label = "llama.cpp"
    server_defaults = SERVER_DEFAULTS

    @property
    def version(self) -> str:
        if self.unavailable():
            return "missing"
        facts = _facts()
        return f"{facts['version']} ({facts['commit'][:12]}, via ggufdoctor's WebAssembly build)"

    @property
    def fixed_clock(self) -> _dt.datetime:
        """The moment the module's `strftime_now` reads: ggufdoctor pins it, and a caller's clock cannot move it."""
        return _dt.datetime.fromisoformat(_facts()["pinned_now"])

    def unavailable(self) -> str | None:
        try:
            facts = _facts()
        except ImportError as err:
            return f"the llama.cpp profile needs the package 'ggufdoctor' ({err}); pip install ggufdoctor"
        if not facts["available"]:
            return f"ggufdoctor's llama.cpp engine cannot run here: {facts['reason']}"
        return None

    def render_all(self, template: str, jobs: list[RenderJob], *, clock: _dt.datetime) -> list[Rendered]:
        """Each job rendered by llama.cpp; `clock` is not used: the module reads `fixed_clock`."""
        del clock  # the module pins its own; the comparison renders transformers at `fixed_clock`
        engine = _wasm_engine()
        return [_outcome(engine.render(template, _context(template, job)), template, job) for job in jobs]

    def prestart(self) -> None:
        """The worker `start_all` hands its jobs to, begun now: it loads the engine while the caller loads its own
        (when ggufdoctor is installed; whether it can run here is asked later, by `unavailable`)."""
        if importlib.util.find_spec("ggufdoctor") is not None:
            json_worker.prestart(_worker_command())

    def start_all(self, template: str, jobs: list[RenderJob], *, clock: _dt.datetime) -> Callable[[], list[Rendered]]:
        """`render_all` begun in a process of its own (`llamacpp_worker`), which renders while the caller works;
        the function returned waits for it. Should that process fail (it cannot start, it dies, its output is not
        the jobs'), the jobs are rendered here instead: the same engine, the same outcomes."""
        if importlib.util.find_spec("ggufdoctor") is None:  # as `render_all` fails here, and `unavailable` says why
            return lambda: self.render_all(template, jobs, clock=clock)
        contexts = [_context(template, job) for job in jobs]
        try:
            request = json.dumps({"template": template, "contexts": contexts})
        except (TypeError, ValueError):  # what is not JSON fails job by job, as the engine says it here
            return lambda: self.render_all(template, jobs, clock=clock)
        wait = _start_worker(request)

        def outcomes() -> list[Rendered]:
            results = wait()
            if results is None or len(results) != len(jobs):
                return self.render_all(template, jobs, clock=clock)
            return [_outcome(result, template, job) for result, job in zip(results, jobs)]

        return outcomes


# How long a worker may take for a batch (ggufdoctor bounds each render with fuel, so this is only a backstop).
WORKER_SECONDS = 120.0


class _Result(NamedTuple):
    """ggufdoctor's `RenderResult`, as the worker wrote it."""

    text: str | None
    error: str | None
    extra: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.error is None


def _worker_command() -> list[str]:
    # -P: the script's folder (this package's engines) is not put first on the worker's import path
    return [sys.executable, "-P", str(Path(__file__).with_name("llamacpp_worker.py"))]


def _start_worker(request: str) -> Callable[[], list[_Result] | None]:
    """`llamacpp_worker` begun on `request`; the function returned waits for its results, None when it failed."""
    wait = json_worker.start(_worker_command(), request, WORKER_SECONDS)

    def results() -> list[_Result] | None:
        found = wait()
        try:
            facts = {key: found["engine"][key] for key in ("available", "reason", "version", "commit", "pinned_now")}
            outcomes = [_Result(x["text"], x["error"], x["extra"]) for x in found["results"]]
        except (TypeError, KeyError):
            return None
        _REPORTED.update(facts)
        return outcomes

    return results


def gpt_oss_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as llama-server's gpt-oss format hands them to the template: a string `reasoning_content`
    copied to `thinking` (the field that template reads), the content dropped from a message that also has tool
    calls."""
    adjusted = []
    for message in messages:
        if isinstance(message.get("reasoning_content"), str):
            message = {**message, "thinking": message["reasoning_content"]}
            if isinstance(message.get("tool_calls"), list) and message["tool_calls"]:
                message.pop("content", None)
        adjusted.append(message)
    return adjusted


def _context(template: str, job: RenderJob) -> dict[str, Any]:
    messages = gpt_oss_messages(job.messages) if GPT_OSS_MARK in template else job.messages
    context = {
        **job.variables,
        "bos_token": job.variables.get("bos_token") or "",
        "eos_token": job.variables.get("eos_token") or "",
        "messages": messages,
        "add_generation_prompt": job.add_generation_prompt,
    }
    if job.tools is not None:
        context["tools"] = job.tools
    return context


def _normalizations(caps: dict[str, Any], messages: list[dict[str, Any]]) -> list[str]:
    """What llama.cpp's normalization rewrote in these messages, given the capabilities its probe found missing."""
    contents = [m.get("content") for m in messages]
    calls = [c for m in messages for c in m.get("tool_calls") or []]
    found = []
    if caps.get("supports_typed_content") is False and any(isinstance(c, list) for c in contents):
        found.append("content parts joined into one string (the template does not read content parts)")
    if caps.get("supports_string_content") is False and any(isinstance(c, str) for c in contents):
        found.append("string content wrapped as a text part (the template reads content parts only)")
    if caps.get("supports_system_role") is False and any(m.get("role") == "system" for m in messages):
        found.append("the system message merged into the first user message (the template has no system role)")
    if caps.get("supports_tool_calls") is False and calls:
        found.append("tool calls rewritten as content (the template renders no tool calls)")
    elif caps.get("supports_object_arguments") is False and any(
        isinstance((c.get("function") or {}).get("arguments"), dict) for c in calls if isinstance(c, dict)
    ):
        found.append("tool-call arguments written as JSON strings (the template reads them as strings)")
    return found


def _note(result: Any, template: str, job: RenderJob) -> str | None:
    notes = []
    if result.extra.get("normalized"):
        rewritten = _normalizations(result.extra.get("caps") or {}, job.messages)
        if rewritten:
            notes.append(f"llama.cpp normalized the messages first, as llama-server does: {'; '.join(rewritten)}")
    defaulted = sorted({m for m in _DEFAULTED.findall(template) if m not in job.variables})
    if defaulted:
        notes.append(f"the template reads {', '.join(defaulted)}, which the tokenizer lacks: ggufdoctor's default")
    return "; ".join(notes) or None


def _outcome(result: Any, template: str, job: RenderJob) -> Rendered:
    note = _note(result, template, job)
    if result.ok:
        return EngineRendered(result.text, note=note)
    error = str(result.error)
    if error.startswith("raise:"):
        return EngineRendered(None, f"raise_exception: {error[len('raise:') :]}", refused=True, note=note)
    return EngineRendered(None, error, note=note)
