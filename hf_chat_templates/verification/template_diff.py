"""`diff`: two chat templates side by side: their text, what each renders for every probe conversation (what
changes for the model), and the safety findings the second adds.

>>> d = diff_templates("old/chat_template.jinja", "new-model/")       # doctest: +SKIP
>>> [p.probe for p in d.probes if p.changed]                          # doctest: +SKIP

A side is a template file, a tokenizer folder (its `chat_template.jinja`, else the `chat_template` key of
`tokenizer_config.json`), a `tokenizer_config.json`, or a GGUF file (`tokenizer.chat_template`). Both are rendered
the way `apply_chat_template` renders (transformers' `render_jinja_template`, messages normalized as transformers
normalizes them, the clock pinned, under the render limits), with the special-token strings each side declares
(`bos_token`, `eos_token`, …); a template file declares none, so they render empty there, and the notes say so.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _compat
from ..conversations.probes import Probe, id_format_for
from ..conversations.suite import build_probes
from ..errors import UsageError
from ..gguf.reading import is_gguf
from ..template.limits import RenderLimits, budget_for, check_output, limited
from ..template.rendering import describe_exception, normalize_for_template
from ..template.safety import SafetyFinding, scan_template
from ..template.syntax import read_input, read_template, transformers_text, unreachable_link
from ..tokenizer.folder import SLOW_VOCAB_FILES, TOKENIZER_JSON, read_folder
from .context import CLOCKS
from .results import around

__all__ = ["ProbeDiff", "TemplateDiff", "TemplateSide", "diff_templates", "read_side", "render_side"]


SPECIAL_NAMES = ("bos_token", "eos_token", "pad_token", "unk_token")


@dataclass(frozen=True)
class TemplateSide:
    """One side of a diff: where the template came from, its text, and the special-token strings it renders with."""

    path: Path
    origin: str  # template file, chat_template.jinja, tokenizer_config.json, GGUF tokenizer.chat_template
    template: str
    variables: dict[str, str] = field(default_factory=dict)
    tool_template: str | None = None  # a folder's named `tool_use` template: transformers renders tools with it

    def template_for(self, probe: Probe) -> str:
        return self.tool_template if probe.tools and self.tool_template is not None else self.template

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "origin": self.origin,
            "variables": self.variables,
            "tool_use": self.tool_template is not None,
        }


@dataclass(frozen=True)
class ProbeDiff:
    """One probe rendered by both sides: `changes` lists each difference as the message it falls in, the
    excerpt of each side around it, and the text removed and added."""

    probe: str
    a_text: str | None
    b_text: str | None
    a_error: str | None = None
    b_error: str | None = None
    changes: tuple[dict[str, Any], ...] = ()

    @property
    def changed(self) -> bool:
        return self.a_text != self.b_text or self.a_error != self.b_error

    @property
    def status(self) -> str:
        """same, changed, or which side fails: a-fails, b-fails, both-fail."""
        if self.a_error or self.b_error:
            return "both-fail" if self.a_error and self.b_error else "a-fails" if self.a_error else "b-fails"
        return "changed" if self.changed else "same"

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "status": self.status,
            "a_error": self.a_error,
            "b_error": self.b_error,
            "changes": list(self.changes),
        }


@dataclass(frozen=True)
class TemplateDiff:
    a: TemplateSide
    b: TemplateSide
    text_diff: str
    probes: tuple[ProbeDiff, ...]
    new_findings: tuple[SafetyFinding, ...]  # safety findings of B that A does not have (by fingerprint)
    notes: tuple[str, ...] = ()

    @property
    def same_text(self) -> bool:
        return (self.a.template, self.a.tool_template) == (self.b.template, self.b.tool_template)

    @property
    def renders_same(self) -> bool:
        return not any(p.changed for p in self.probes)

    def describe(self, text_diff: bool = True) -> str:
        """The diff in words: the text diff, then per probe what changes for the model, then B's new findings."""
        lines = [f"A: {self.a.path} ({self.a.origin})", f"B: {self.b.path} ({self.b.origin})"]
        lines += [f"note: {n}" for n in self.notes]
        if self.same_text:
            lines.append("template text: identical")
        elif text_diff:
            lines += ["", self.text_diff.rstrip("\n")]
        changed = [p for p in self.probes if p.changed]
        lines += ["", f"renderings: {len(changed)} of {len(self.probes)} probes change for the model"]
        for p in changed:
            if p.status != "changed":
                lines.append(f"  {p.probe}: {p.status} (A: {p.a_error or 'renders'}; B: {p.b_error or 'renders'})")
                continue
            for c in p.changes:
                lines.append(
                    f"  {p.probe}, {c['where']}: removed {c['removed']!r}, added {c['added']!r}\n"
                    f"      A {c['a']}\n      B {c['b']}"
                )
        if self.new_findings:
            lines += ["", f"template-safety: B adds {len(self.new_findings)} finding(s)"]
            lines += [
                f"  {f.rule} {f.severity} line {f.line}, column {f.column}: {f.message}" for f in self.new_findings
            ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "same_text": self.same_text,
            "renders_same": self.renders_same,
            "text_diff": self.text_diff,
            "probes": [p.to_dict() for p in self.probes],
            "new_safety_findings": [f.to_dict() for f in self.new_findings],
            "notes": list(self.notes),
        }


# ---- reading a side ------------------------------------------------------------------------------------------
def _variables(config: dict[str, Any]) -> dict[str, str]:
    """The special-token strings a template renders with, from tokenizer_config.json."""
    return {n: t for n in SPECIAL_NAMES if (t := _token_text(config.get(n))) is not None}


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _config_template(config: dict[str, Any], path: Path) -> str | None:
    value = config.get("chat_template")
    if isinstance(value, list):  # named templates: [{"name": "default", "template": "…"}, …]
        value = next((t.get("template") for t in value if isinstance(t, dict) and t.get("name") == "default"), None)
    if value is not None and not isinstance(value, str):
        raise UsageError(
            f"{path}: chat_template is {type(value).__name__}, not a template",
            hint="fix the chat_template key",
            path=path,
            key="chat_template",
        )
    return value


MAX_CONFIG_BYTES = 256 << 20  # a tokenizer_config.json with a large added_tokens_decoder is tens of MB


def _read_config(path: Path) -> dict[str, Any]:
    raw = read_input(path, MAX_CONFIG_BYTES, "tokenizer_config.json", UsageError)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"{path}: cannot read it as JSON ({err})", hint="check the file", path=path) from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a JSON object", hint="pass a tokenizer_config.json", path=path)
    return data


def _config_side(config_path: Path, side_path: Path) -> TemplateSide:
    config = _read_config(config_path) if config_path.is_file() else {}
    variables = _variables(config)
    template = _config_template(config, config_path)
    if template is None:
        raise UsageError(
            f"{side_path}: no chat template (no chat_template.jinja, no chat_template key in tokenizer_config.json)",
            hint="pass a folder or file that holds a template",
            path=side_path,
        )
    return TemplateSide(side_path, "tokenizer_config.json", transformers_text(template), variables)


def _folder_side(path: Path) -> TemplateSide:
    """A tokenizer folder's templates as transformers loads them (the default, and `tool_use` for tools); a folder
    of template files without a tokenizer, by its chat_template.jinja or tokenizer_config.json."""
    if not any((path / name).is_file() for name in (TOKENIZER_JSON, *SLOW_VOCAB_FILES)):
        jinja, config = path / "chat_template.jinja", path / "tokenizer_config.json"
        if jinja.is_file():
            variables = _variables(_read_config(config) if config.is_file() else {})
            return _file_side(path, jinja, "chat_template.jinja", variables)
        return _config_side(config, path)
    folder = read_folder(path)
    template = folder.named_template("default")
    if template is None:
        raise UsageError(
            f"{path}: no chat template (no chat_template.jinja, no chat_template key in tokenizer_config.json)",
            hint="pass a folder or file that holds a template",
            path=path,
        )
    origin = "chat_template.jinja" if folder.chat_template_file is not None else "tokenizer_config.json"
    variables = _variables(folder.tokenizer_config)
    tool = folder.named_template("tool_use")
    return TemplateSide(
        path,
        origin,
        transformers_text(template),
        variables,
        transformers_text(tool) if tool is not None else None,
    )


def _gguf_side(path: Path) -> TemplateSide:
    try:
        from ..gguf import read_gguf
    except ImportError:  # pragma: no cover - the gguf package of this project is absent from this build
        raise UsageError(f"{path}: GGUF files cannot be read here", hint="install hf-chat-templates whole") from None
    gguf = read_gguf(path)
    if gguf.chat_template is None:
        raise UsageError(
            f"{path}: the GGUF file has no tokenizer.chat_template",
            hint="pass a GGUF file converted with its chat template",
            path=path,
            key="tokenizer.chat_template",
        )
    ids = {"bos_token": gguf.bos_token_id, "eos_token": gguf.eos_token_id, "pad_token": gguf.pad_token_id}
    variables = {n: t for n, i in ids.items() if (t := gguf.token(i)) is not None}
    return TemplateSide(path, "GGUF tokenizer.chat_template", transformers_text(gguf.chat_template), variables)


def read_side(path: str | Path) -> TemplateSide:
    """One side of a diff from a path, or UsageError naming the path and what it lacks."""
    path = Path(path)
    if broken := unreachable_link(path):
        raise UsageError(broken, hint="point the link at a template file, a tokenizer folder or a GGUF file", path=path)
    if path.is_dir():
        return _folder_side(path)
    if not path.exists():
        raise UsageError(
            f"{path}: not found", hint="pass a template file, a tokenizer folder or a GGUF file", path=path
        )
    if is_gguf(path):
        return _gguf_side(path)
    if path.suffix == ".json":
        return _config_side(path, path)
    return _file_side(path, path, "template file", {})


def _file_side(path: Path, file: Path, origin: str, variables: dict[str, str]) -> TemplateSide:
    """A template file's side, its origin saying so when the file's byte order mark was removed (as install
    removes it)."""
    read = read_template(file)
    if read.had_bom:
        origin += ", its byte order mark removed as install removes it"
    return TemplateSide(path, origin, read.text, variables)


# ---- rendering and comparing ---------------------------------------------------------------------------------
def render_side(
    side: TemplateSide, probe: Probe, kwargs: dict[str, Any], *, clock: Any = CLOCKS[0]
) -> tuple[str | None, str | None]:
    """(text, None) or (None, the error), as apply_chat_template renders `probe` with this side's template, the
    clock pinned at `clock` (verify's first moment unless an engine reads its own)."""
    limits = RenderLimits.from_env()
    template = side.template_for(probe)
    budget = budget_for(template, limits)
    messages = normalize_for_template(probe.message_list())
    flags = {
        "add_generation_prompt": probe.add_generation_prompt,
        "continue_final_message": probe.continue_final_message,
    }
    try:
        # both sides at one moment (verify's first clock): a template that reads the clock differs by its text
        with _compat.frozen_clock(clock), limited(limits, budget) as active:
            (text,) = _compat.render_conversations(
                template, [messages], probe.tool_list(), **flags, **side.variables, **kwargs
            )
        return check_output(text, active, budget), None
    except Exception as err:  # a template may raise anything; the diff reports it per side
        return None, describe_exception(err)


def _message_at(probe: Probe, text: str, pos: int) -> str:
    """Which message's content the position follows in `text` ("before message 0" when none)."""
    found, start = "before message 0", 0
    for i, m in enumerate(probe.messages):
        content = m.get("content")
        if not isinstance(content, str) or not content:
            continue
        at = text.find(content, start)
        if 0 <= at <= pos:
            found, start = f"message {i}" if pos < at + len(content) else f"after message {i}", at + len(content)
    return found


def _changes(probe: Probe, a: str, b: str, limit: int = 8) -> tuple[dict[str, Any], ...]:
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    found = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        found.append(
            {
                "where": _message_at(probe, a, i1),
                "a_position": i1,
                "b_position": j1,
                "removed": a[i1:i2],
                "added": b[j1:j2],
                "a": around(a, i1),
                "b": around(b, j1),
            }
        )
    return tuple(found[:limit])


def _probe_diff(a: TemplateSide, b: TemplateSide, probe: Probe, kwargs: dict[str, Any]) -> ProbeDiff:
    a_text, a_error = render_side(a, probe, kwargs)
    b_text, b_error = render_side(b, probe, kwargs)
    changes = _changes(probe, a_text, b_text) if a_text is not None and b_text is not None else ()
    return ProbeDiff(probe.id, a_text, b_text, a_error, b_error, changes)


def _notes(a: TemplateSide, b: TemplateSide) -> list[str]:
    notes = []
    for side, label in ((a, "A"), (b, "B")):
        if not side.variables:
            notes.append(
                f"{label} ({side.origin}) declares no special tokens: bos_token, eos_token render empty there; "
                "pass the tokenizer folder to render them"
            )
    if a.variables and b.variables and a.variables != b.variables:
        notes.append(f"the special tokens differ: A {a.variables}, B {b.variables}")
    return notes


def diff_templates(
    a: str | Path | TemplateSide,
    b: str | Path | TemplateSide,
    *,
    probes: Iterable[str] | None = None,
    kwargs: dict[str, Any] | None = None,
) -> TemplateDiff:
    """The text diff of two templates, their renderings of every probe (or the probes named in `probes`) and the
    safety findings B adds. A side that does not render a probe is reported, never raised."""
    left = a if isinstance(a, TemplateSide) else read_side(a)
    right = b if isinstance(b, TemplateSide) else read_side(b)
    suite = build_probes(id_format_for(left.template + right.template))
    if probes is not None:
        wanted = list(probes)
        known = {p.id for p in suite}
        if unknown := [p for p in wanted if p not in known]:
            raise UsageError(
                f"unknown probe(s) {', '.join(unknown)}; probes: {', '.join(sorted(known))}",
                hint="name probes the suite has",
            )
        suite = tuple(p for p in suite if p.id in wanted)
    text_diff = "".join(
        difflib.unified_diff(
            left.template.splitlines(keepends=True),
            right.template.splitlines(keepends=True),
            fromfile=f"a/{left.path}",
            tofile=f"b/{right.path}",
        )
    )
    before = {f.fingerprint for f in _scan(left)}
    new = tuple(f for f in _scan(right) if f.fingerprint not in before)
    rendered = tuple(_probe_diff(left, right, p, dict(kwargs or {})) for p in suite)
    return TemplateDiff(left, right, text_diff, rendered, new, tuple(_notes(left, right)))


def _scan(side: TemplateSide) -> tuple[SafetyFinding, ...]:
    from ..errors import TemplateError

    try:
        return scan_template(side.template)
    except TemplateError:  # the probes then fail to render on that side, and say why
        return ()
