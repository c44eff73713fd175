"""transformers.js's profile: the template rendered by `@huggingface/jinja` (the engine of transformers.js and of
the Hub's chat widgets) in `node`, set up as transformers.js's `apply_chat_template` sets it up.

transformers.js (`src/base/tokenization_utils.js`, `PreTrainedTokenizer.apply_chat_template`) compiles the template
with `new Template(chat_template)` and renders `{messages, add_generation_prompt, tools, documents,
...special_tokens_map, ...kwargs}`. It does not touch the messages: unlike transformers, a `None` value arrives as
`null` (so `content is none` is true), and a float such as `1.0` is a JavaScript number (`1`). The globals are the
library's own (`raise_exception`, `range`, `strftime_now`, `true`/`none` in both cases); `strftime_now` knows only
`%Y %m %d %b %B %H %M %%` and writes any other directive as it is. The clock it reads is pinned to `clock` (local
wall time, English month names).

The package is not bundled: `install_js_engine()` (or the npm command `unavailable()` prints) installs the version
`js/package.json` pins into a cache folder, `$HF_CHAT_TEMPLATES_JS_DIR`, else `$HF_CHAT_TEMPLATES_CACHE/js`, else
`~/.cache/hf_chat_templates/js`. Nothing is installed at import time. Each `render_all` runs one `node` process
(`js/render.cjs`) for all its jobs: the jobs as JSON on stdin, one JSON line per job on stdout. The process gets
`RUN_FACTOR` times the per-render time limit as wall time and the per-render memory limit as V8 heap; a job it
does not finish in time fails with that limit, and so does every job after it. `start_all` starts that process and
returns at once: node renders while the caller does other work, and the function it returns waits for the outcomes.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..limits import RUN_FACTOR, RenderLimitExceeded, RenderLimits, check_output
from ..rendering import Rendered
from .base import EngineRendered, RenderJob

PACKAGE = "@huggingface/jinja"
JS_DIR_ENV = "HF_CHAT_TEMPLATES_JS_DIR"
HERE = Path(__file__).resolve().parent / "js"
SCRIPT = HERE / "render.cjs"
# The directives @huggingface/jinja's strftime_now knows (src/utils.ts, `strftime`); it writes others as they are.
STRFTIME_KNOWN = frozenset("YmdbBHM%")
STRFTIME_CALL = re.compile(r"strftime_now\(\s*(['\"])(.*?)\1")
# Starting node and loading the package, on top of the render time limit.
STARTUP_SECONDS = 20.0


def pinned_version() -> str:
    """The version of @huggingface/jinja that js/package.json pins."""
    manifest = json.loads((HERE / "package.json").read_text(encoding="utf-8"))
    return str(manifest["dependencies"][PACKAGE])


def js_dir() -> Path:
    """Where the npm package is installed: $HF_CHAT_TEMPLATES_JS_DIR, else the package's cache folder + /js."""
    override = os.environ.get(JS_DIR_ENV)
    if override:
        return Path(override).expanduser()
    cache = os.environ.get("HF_CHAT_TEMPLATES_CACHE") or Path.home() / ".cache" / "hf_chat_templates"
    return Path(cache).expanduser() / "js"


def install_command(directory: Path | None = None) -> list[str]:
    """The npm command that installs the pinned @huggingface/jinja into `directory` (default: `js_dir()`)."""
    target = directory or js_dir()
    spec = f"{PACKAGE}@{pinned_version()}"
    return ["npm", "install", "--prefix", str(target), "--no-audit", "--no-fund", "--save-exact", spec]


def installed_version(directory: Path | None = None) -> str | None:
    """The version of @huggingface/jinja installed in `directory` (default: `js_dir()`), or None."""
    manifest = (directory or js_dir()) / "node_modules" / "@huggingface" / "jinja" / "package.json"
    try:
        return str(json.loads(manifest.read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError):
        return None


def install_js_engine(directory: Path | None = None, *, timeout: float = 300.0) -> Path:
    """Install the pinned @huggingface/jinja with npm into `directory` (default: `js_dir()`) and return it. Raises
    RuntimeError naming the command and npm's message when npm is missing or fails."""
    target = directory or js_dir()
    command = install_command(target)
    if shutil.which("npm") is None:
        raise RuntimeError(f"npm is not on PATH: install Node.js and npm, then run `{' '.join(command)}`")
    target.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"`{' '.join(command)}` did not finish in {timeout:g} s") from None
    if done.returncode != 0 or installed_version(target) != pinned_version():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"`{' '.join(command)}` failed (exit {done.returncode}): {' '.join(tail)}")
    return target


class TransformersJsEngine:
    """transformers.js: `@huggingface/jinja` in node, as `apply_chat_template` configures it."""

    name = "transformers.js"

    def __init__(
        self,
        directory: Path | None = None,
        limits: RenderLimits | None = None,
        startup_seconds: float = STARTUP_SECONDS,
    ) -> None:
        self._directory = directory
        self._limits = limits
        self.startup_seconds = startup_seconds

    # Read when used, not when the profile is made (profiles are made once per process): the environment decides.
    @property
    def directory(self) -> Path:
        return self._directory or js_dir()

    @property
    def limits(self) -> RenderLimits:
        return self._limits or RenderLimits.from_env()

    @property
    def version(self) -> str:
        return f"{PACKAGE} {installed_version(self.directory) or pinned_version() + ' (not installed)'}"

    def unavailable(self) -> str | None:
        command = " ".join(install_command(self.directory))
        if shutil.which("node") is None:
            return f"node is not on PATH: install Node.js 18 or later with npm, then run `{command}`"
        found = installed_version(self.directory)
        if found is None:
            return f"{PACKAGE} is not installed in {self.directory}: run `{command}`"
        if found != pinned_version():
            pinned = pinned_version()
            return f"{PACKAGE} {found} is installed in {self.directory}, not the pinned {pinned}: run `{command}`"
        return None

    def render_all(self, template: str, jobs: list[RenderJob], *, clock: _dt.datetime) -> list[Rendered]:
        return self.start_all(template, jobs, clock=clock)()

    def start_all(self, template: str, jobs: list[RenderJob], *, clock: _dt.datetime) -> Callable[[], list[Rendered]]:
        """`render_all` begun: node starts now and renders while the caller works; the function returned waits for
        it and gives what `render_all` gives."""
        if not jobs:
            return list
        reason = self.unavailable()
        if reason is not None:
            return lambda: [Rendered(None, f"transformers.js cannot run: {reason}") for _ in jobs]
        request = {
            "prefix": str(self.directory),
            "template": template,
            "clock": [clock.year, clock.month, clock.day, clock.hour, clock.minute, clock.second],
            "jobs": [_job_payload(job) for job in jobs],
        }
        run = self._start(json.dumps(request, default=str))

        def outcomes() -> list[Rendered]:
            lines, failure = run()
            found = [self._outcome(lines[i] if i < len(lines) else None, failure) for i in range(len(jobs))]
            clock_note = strftime_note(template)
            return [_with_note(outcome, job, clock_note) for outcome, job in zip(found, jobs)]

        return outcomes

    def _start(self, payload: str) -> Callable[[], tuple[list[dict[str, Any]], str]]:
        """Start node once (here, so that it gets this thread's limits), fed and read by a thread of its own; the
        function returned waits for the JSON lines node wrote and what the jobs without a line failed with."""
        limits = self.limits
        heap_mb = max(limits.max_memory_bytes >> 20, 64)
        env = {**os.environ, "LC_ALL": "en_US.UTF-8"}
        command = ["node", f"--max-old-space-size={heap_mb}", str(SCRIPT)]
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
            )
        except OSError as err:
            failure = f"transformers.js cannot run: node could not be started ({err})"
            return lambda: ([], failure)
        done: list[tuple[list[dict[str, Any]], str] | BaseException] = []

        def collect() -> None:
            try:
                done.append(_collect(process, payload, limits, heap_mb, self.startup_seconds))
            except BaseException as err:  # raised where the caller waits, as render_all would raise it
                done.append(err)

        worker = threading.Thread(target=collect, name="transformers.js", daemon=True)
        worker.start()

        def wait() -> tuple[list[dict[str, Any]], str]:
            worker.join()
            if isinstance(done[0], BaseException):
                raise done[0]
            return done[0]

        return wait

    def _outcome(self, line: dict[str, Any] | None, failure: str) -> Rendered:
        if line is None:
            return Rendered(None, failure)
        if "text" not in line:
            return Rendered(None, str(line.get("error")), refused=bool(line.get("refused")))
        try:
            return Rendered(check_output(str(line["text"]), self.limits))
        except RenderLimitExceeded as err:
            return Rendered(None, f"{RenderLimitExceeded.__name__}: {err}")


def _collect(
    process: subprocess.Popen[bytes], payload: str, limits: RenderLimits, heap_mb: int, startup_seconds: float
) -> tuple[list[dict[str, Any]], str]:
    """Feed node the jobs and wait for it: the JSON lines it wrote, and what the jobs without a line failed with."""
    with process:
        try:
            out, stderr = process.communicate(
                payload.encode("utf-8"), timeout=limits.seconds * RUN_FACTOR + startup_seconds
            )
            failure = _crash_message(process.returncode, stderr, heap_mb)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
            failure = (
                f"{RenderLimitExceeded.__name__}: the renders in transformers.js ran past the time limit of "
                f"{limits.seconds * RUN_FACTOR:g} s for one run "
                f"({RUN_FACTOR} × HF_CHAT_TEMPLATES_RENDER_SECONDS); this job was not rendered"
            )
    lines = []
    for raw in out.decode("utf-8", "surrogatepass").splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            break  # a line cut short by the kill
    return lines, failure


def _job_payload(job: RenderJob) -> dict[str, Any]:
    """A job as transformers.js receives it: the messages and tools as given (None is null), the variables last."""
    return {
        "messages": job.messages,
        "tools": job.tools,
        "add_generation_prompt": job.add_generation_prompt,
        "variables": job.variables,
    }


def _input_differences(value: Any, where: str) -> list[str]:
    """Where the JSON transformers.js reads differs from what transformers hands a template: a None it keeps (as
    null) and a float it reads as an integer."""
    if value is None:
        return [f"{where} is null (transformers drops the key)"]
    if isinstance(value, float) and value.is_integer():
        return [f"{where} is the number {value:g} (transformers writes {value!r})"]
    if isinstance(value, dict):
        return [d for key, item in value.items() for d in _input_differences(item, f"{where}.{key}")]
    if isinstance(value, (list, tuple)):
        return [d for k, item in enumerate(value) for d in _input_differences(item, f"{where}[{k}]")]
    return []


def strftime_note(template: str) -> str | None:
    """What @huggingface/jinja's `strftime_now` writes differently for the formats the template passes it, if any:
    a directive it does not know stays as it is (`%A` is written "%A")."""
    directives = {d for m in STRFTIME_CALL.finditer(template) for d in re.findall(r"%([-#_^0]?.)", m.group(2))}
    unknown = sorted(directives - STRFTIME_KNOWN)
    if not unknown:
        return None
    known = " ".join("%" + d for d in sorted(STRFTIME_KNOWN))
    return (
        f"@huggingface/jinja's strftime_now knows only {known}: it writes "
        f"{', '.join('%' + d for d in unknown)} as it is"
    )


def _with_note(outcome: Rendered, job: RenderJob, clock_note: str | None = None) -> Rendered:
    """The outcome with a note naming what transformers.js receives or writes differently, when anything does."""
    found = [d for i, m in enumerate(job.messages) for d in _input_differences(m, f"messages[{i}]")]
    found += _input_differences(job.tools or [], "tools")
    notes = [clock_note] if clock_note else []
    if found:
        shown = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
        notes.append(f"transformers.js passes the messages as given: {shown}")
    if not notes:
        return outcome
    return EngineRendered(outcome.text, outcome.error, refused=outcome.refused, note="; ".join(notes))


def _crash_message(returncode: int | None, stderr: bytes, heap_mb: int) -> str:
    text = stderr.decode("utf-8", "replace").strip()
    if "heap out of memory" in text:
        return (
            f"{RenderLimitExceeded.__name__}: the render in transformers.js needed more than {heap_mb} MB "
            "(raise it with HF_CHAT_TEMPLATES_RENDER_MAX_MEMORY_MB)"
        )
    last = text.splitlines()[-1] if text else "no message"
    return f"node exited with code {returncode} before rendering this job: {last}"
