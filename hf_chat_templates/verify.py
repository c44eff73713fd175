"""`verify`: named checks that a template on a tokenizer does what training and serving rely on.

>>> report = verify("path/to/tokenizer", family="llama3.2-pythonic")   # doctest: +SKIP
>>> report.ok, report.summary                                          # doctest: +SKIP

The checks themselves live in checks_tokens.py (how the rendering becomes ids) and checks_format.py (what the
rendering keeps); this module builds the context they share, runs them, and shapes the report.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable

import jinja2.nodes

from .errors import UsageError
from .folder import TokenizerFolder, read_folder, resolve_source
from .probes import CAPABILITIES, Probe, build_probes
from .registry import Family, Variant, get_family, list_families
from .rendering import Rendered, Renderer, named_template
from .templates import _parse_environment, check_template_syntax, read_template_file

STATUSES = ("pass", "fail", "warn", "skip")
CHECK_ORDER = (
    "renders",
    "control-tokens-atomic",
    "ids-match-string",
    "no-double-bos",
    "decode-roundtrip",
    "nothing-dropped",
    "completion-matches-content",
    "assistant-mask",
    "prefix-stable",
    "boundary-merge",
    "stop-token-registered",
    "deterministic",
    "engine-parity",
    "reference-parity",
    "injection",
    "template-sources-agree",
    "added-tokens-agree",
    "generation-config-consistent",
)
# Shapes that control tokens take in the wild; text tags like <tools> are deliberately not among them.
CONTROL_TOKEN_SHAPES = re.compile(
    r"<\|[^<>|\s]{1,48}\|>|<(?:start|end)_of_turn>|</?s>|<(?:bos|eos|pad)>|\[/?[A-Z][A-Z_]{1,30}\]"
)


_KIND_CAPABILITY = {"part": "content_parts"}


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict. On failure `message` names the probe, message, position and tokens; `hint` the fix."""

    id: str
    status: str
    message: str
    probe: str | None = None
    detail: dict[str, Any] = field(default_factory=dict, hash=False)
    hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "probe": self.probe, "message": self.message,
                "detail": self.detail, "hint": self.hint}


@dataclass(frozen=True)
class VerificationReport:
    source: str
    family: str | None
    variant: str | None
    tokenizer: str
    versions: dict[str, str]
    capabilities: dict[str, str]
    checks: tuple[CheckResult, ...]

    @property
    def summary(self) -> dict[str, int]:
        counts = {"passed": 0, "failed": 0, "warned": 0, "skipped": 0}
        names = {"pass": "passed", "fail": "failed", "warn": "warned", "skip": "skipped"}
        for check in self.checks:
            counts[names[check.status]] += 1
        return counts

    @property
    def ok(self) -> bool:
        return not any(c.status == "fail" for c in self.checks)

    def check(self, check_id: str) -> CheckResult:
        return next(c for c in self.checks if c.id == check_id)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "family": self.family, "variant": self.variant, "tokenizer": self.tokenizer,
                "versions": self.versions, "capabilities": self.capabilities,
                "checks": [c.to_dict() for c in self.checks], "summary": self.summary}


def visible(text: str) -> str:
    """Whitespace made visible, on one line."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r").replace(" ", "·")


def around(text: str, pos: int, width: int = 24) -> str:
    """`text` near `pos`, whitespace visible, the position marked with ⟨here⟩."""
    start, end = max(0, pos - width), min(len(text), pos + width)
    return (("…" if start else "") + visible(text[start:pos]) + "⟨here⟩" + visible(text[pos:end])
            + ("…" if end < len(text) else ""))


def first_difference(a: str | list[Any], b: str | list[Any]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


@dataclass
class Finding:
    """One place where a check fails, before it becomes a CheckResult."""

    probe: str | None
    text: str
    detail: dict[str, Any] = field(default_factory=dict)


def verdict(check_id: str, findings: list[Finding], passed: str, hint: str, *, status: str = "fail") -> CheckResult:
    """Turn findings into a result: the first is the message, the first few go in the detail."""
    if not findings:
        return CheckResult(check_id, "pass", passed)
    first = findings[0]
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    detail = {**first.detail, "failures": len(findings),
              "examples": [{"probe": f.probe, "message": f.text, **f.detail} for f in findings[:5]]}
    return CheckResult(check_id, status, first.text + more, first.probe, detail, hint)


def template_literals(template: str) -> str:
    """Every string literal and raw text of the template, joined: where control tokens are written."""
    ast = _parse_environment().parse(template)
    parts = [node.value for node in ast.find_all(jinja2.nodes.Const) if isinstance(node.value, str)]
    parts += [node.data for node in ast.find_all(jinja2.nodes.TemplateData)]
    return "\n".join(parts)


class VerifyContext:
    """What every check reads: the tokenizer, the template, its tokens, the probes and their renderings."""

    def __init__(self, tokenizer: Any, template: str, *, folder: TokenizerFolder | None = None,
                 variant: Variant | None = None, kwargs: dict[str, Any] | None = None,
                 probes: Iterable[Probe] | None = None) -> None:
        self.tokenizer = tokenizer
        self.template = template
        self.folder = folder
        self.variant = variant
        self.kwargs = dict(kwargs if kwargs is not None else (variant.kwarg_defaults if variant else {}))
        self.renderer = Renderer(tokenizer, template, self.kwargs)
        self.probes = tuple(probes if probes is not None else build_probes())
        self._probe_ids: dict[str, list[int]] = {}
        self._boundaries: dict[str, list[int] | None] = {}

    # ---- renderings -----------------------------------------------------------------------------------------
    def render(self, probe: Probe, **override: Any) -> Rendered:
        flags = {"add_generation_prompt": probe.add_generation_prompt,
                 "continue_final_message": probe.continue_final_message, **override}
        return self.renderer.render(probe.message_list(), probe.tool_list(), **flags)

    @cached_property
    def rendered(self) -> dict[str, Rendered]:
        return {p.id: self.render(p) for p in self.probes}

    def probe(self, probe_id: str) -> Probe:
        return next(p for p in self.probes if p.id == probe_id)

    @cached_property
    def capabilities(self) -> dict[str, str]:
        """yes / no / error, per capability, from whether its sentinels survive rendering."""
        found: dict[str, str] = {}
        for capability in CAPABILITIES:
            outcomes = []
            for p in self.probes:
                sentinels = [s for s in p.sentinels if (s.capability or _KIND_CAPABILITY.get(s.kind)) == capability]
                if not sentinels:
                    continue
                r = self.rendered[p.id]
                if not r.ok:
                    outcomes.append(f"error in probe {p.id}: {r.error}")
                elif any(s.text in (r.text or "") for s in sentinels):
                    outcomes.append("yes")
                else:
                    outcomes.append("no")
            found[capability] = ("yes" if "yes" in outcomes else next((o for o in outcomes if o != "no"), "no")
                                 if outcomes else "untested")
        return found

    def applicable(self, probe: Probe) -> bool:
        return all(self.capabilities.get(c) == "yes" for c in probe.requires)

    # ---- tokens ---------------------------------------------------------------------------------------------
    @cached_property
    def added_tokens(self) -> dict[str, Any]:
        return {t.content: t for t in self.tokenizer.added_tokens_decoder.values()}

    @cached_property
    def control_tokens(self) -> tuple[str, ...]:
        """Declared by the family, plus every control-token-shaped string or registered added token the template
        writes in its literals or in its renderings of the probes."""
        tokens = list(self.variant.control_tokens) if self.variant else []
        literal = template_literals(self.template)
        texts = [literal] + [r.text for r in self.rendered.values() if r.ok and r.text]
        for text in texts:
            for match in CONTROL_TOKEN_SHAPES.findall(text):
                if match not in tokens and not self._from_content(match):
                    tokens.append(match)
        for content, token in self.added_tokens.items():
            if token.special and content in literal and not content.isspace() and content not in tokens:
                tokens.append(content)
        return tuple(tokens)

    def _from_content(self, token: str) -> bool:
        return any(token in str(m.get("content", "")) for p in self.probes for m in p.messages)

    @cached_property
    def stop_tokens(self) -> tuple[str, ...]:
        """Declared by the family; otherwise the first control token after the answer in the plain probe."""
        if self.variant:
            return self.variant.stop_tokens
        # the standard plain probe, also when the context was built for other conversations (the token view)
        probe = next((p for p in self.probes if p.id == "plain"), None) or next(
            p for p in build_probes() if p.id == "plain")
        answer = probe.messages[-1]["content"]
        text = self.render(probe).text or ""
        at = text.rfind(answer)
        if at < 0:
            return ()
        rest = text[at + len(answer):]
        matches = [(rest.find(t), t) for t in self.control_tokens if t in rest]
        return (min(matches)[1],) if matches else ()

    def token_id(self, token: str) -> int | None:
        ids = self.tokenizer.encode(token, add_special_tokens=False)
        return ids[0] if len(ids) == 1 else None

    def pieces(self, ids: list[int]) -> list[str]:
        return [visible(p) for p in self.tokenizer.convert_ids_to_tokens(ids)]

    # ---- positions ------------------------------------------------------------------------------------------
    def message_boundaries(self, probe: Probe) -> list[int] | None:
        """Where each message's rendering ends, when renderings of shorter prefixes are string prefixes.
        Computed once per probe: boundary-merge and every finding's message index read it."""
        if probe.id not in self._boundaries:
            self._boundaries[probe.id] = self._message_boundaries(probe)
        return self._boundaries[probe.id]

    def _message_boundaries(self, probe: Probe) -> list[int] | None:
        full = self.rendered[probe.id]
        if not full.ok or probe.continue_final_message:
            return None
        ends = []
        messages = probe.message_list()
        for k in range(1, len(messages) + 1):
            partial = self.renderer.render(messages[:k], probe.tool_list())
            if not partial.ok or not (full.text or "").startswith(partial.text or ""):
                return None
            ends.append(len(partial.text or ""))
        return ends

    def probe_token_ids(self, probe: Probe) -> list[int]:
        """`apply_chat_template(tokenize=True)` on the probe, with its flags (computed once per probe)."""
        if probe.id not in self._probe_ids:
            self._probe_ids[probe.id] = self.renderer.token_ids(
                probe.message_list(), probe.tool_list(), add_generation_prompt=probe.add_generation_prompt,
                continue_final_message=probe.continue_final_message)
        return list(self._probe_ids[probe.id])

    def text_difference(self, probe: Probe, what: str, labels: tuple[str, str], a: str, b: str) -> Finding:
        """A finding for two texts that should be equal: first differing char, its message, both sides."""
        pos = first_difference(a, b)
        message = self.message_at(probe, pos)
        return Finding(probe.id, f"probe {probe.id}: {what} at char {pos} (message {message}): {labels[0]} "
                                 f"{around(a, pos)} vs {labels[1]} {around(b, pos)}",
                       {"char_position": pos, "message_index": message})

    def message_at(self, probe: Probe, pos: int) -> int | None:
        bounds = self.message_boundaries(probe)
        if bounds is None:
            return None
        for index, end in enumerate(bounds):
            if pos < end:
                return index
        return len(bounds) - 1


def _versions() -> dict[str, str]:
    found = {}
    for dist in ("hf-chat-templates", "transformers", "tokenizers", "jinja2", "minijinja"):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = "missing"
    return found


def _all_checks() -> dict[str, Callable[[VerifyContext], CheckResult]]:
    from . import checks_folder, checks_format, checks_tokens, checks_training

    found = {**checks_tokens.CHECKS, **checks_format.CHECKS, **checks_training.CHECKS, **checks_folder.CHECKS}
    return {check_id: found[check_id] for check_id in CHECK_ORDER}


def check_ids() -> tuple[str, ...]:
    """Every check id, in the order they run."""
    return tuple(_all_checks())


def _identify(template: str) -> tuple[Family, Variant] | None:
    digest = hashlib.sha256(template.encode("utf-8")).hexdigest()
    for fam in list_families():
        for var in fam.variants.values():
            if var.sha256 == digest:
                return fam, var
    return None


def run_checks(ctx: VerifyContext, only: Iterable[str] | None = None) -> tuple[CheckResult, ...]:
    checks = _all_checks()
    wanted = list(only) if only else list(checks)
    unknown = [c for c in wanted if c not in checks]
    if unknown:
        raise UsageError(f"unknown check(s) {', '.join(unknown)}; checks: {', '.join(checks)}",
                         hint="hf-chat-templates verify --help")
    results = []
    for check_id in wanted:
        try:
            results.append(checks[check_id](ctx))
        except Exception as err:  # a check that crashes is reported as failing, never hidden
            results.append(CheckResult(check_id, "fail", f"the check itself raised {type(err).__name__}: {err}",
                                       hint="report this with the tokenizer and template"))
    return tuple(results)


def verify(
    source: str | Path,
    *,
    family: str | None = None,
    variant: str | None = None,
    template: str | Path | None = None,
    only: Iterable[str] | None = None,
    kwargs: dict[str, Any] | None = None,
    revision: str | None = None,
    token: str | None = None,
) -> VerificationReport:
    """Verify the tokenizer at `source` with its own template, a bundled family's, or a template file."""
    return verify_with_context(source, family=family, variant=variant, template=template, only=only, kwargs=kwargs,
                               revision=revision, token=token)[0]


def verify_with_context(source: str | Path, *, only: Iterable[str] | None = None, **options: Any
                        ) -> tuple[VerificationReport, VerifyContext]:
    """`verify`, and the context its checks read (the token view draws failures from it). `options` are
    `load_context`'s: family, variant, template, kwargs, revision, token."""
    ctx, fam, var, path = load_context(source, **options)
    results = run_checks(ctx, only)
    return VerificationReport(
        source=str(source),
        family=fam.name if fam else None,
        variant=var.name if var else None,
        tokenizer=str(path),
        versions=_versions(),
        capabilities=ctx.capabilities,
        checks=results,
    ), ctx


def load_context(
    source: str | Path,
    *,
    family: str | None = None,
    variant: str | None = None,
    template: str | Path | None = None,
    kwargs: dict[str, Any] | None = None,
    revision: str | None = None,
    token: str | None = None,
    probes: Iterable[Probe] | None = None,
) -> tuple[VerifyContext, Family | None, Variant | None, Path]:
    """The tokenizer at `source` and the template to check: its own, a bundled family's, or a template file."""
    from transformers import AutoTokenizer

    if family and template:
        raise UsageError("give --family or --template, not both", hint="hf-chat-templates verify --help")
    path = resolve_source(str(source), revision=revision, token=token)
    folder = read_folder(path)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    fam: Family | None = None
    var: Variant | None = None
    if family:
        fam = get_family(family)
        var = fam.variant(variant)
        text = var.template
    elif template:
        text = read_template_file(Path(template))
        check_template_syntax(text, template)
    else:
        text = named_template(tokenizer)
        if text is None:
            raise UsageError(f"{path}: the tokenizer has no chat template",
                             hint="pass --family NAME or --template FILE, or install one first")
    if var is None and (found := _identify(text)):
        fam, var = found
    return VerifyContext(tokenizer, text, folder=folder, variant=var, kwargs=kwargs, probes=probes), fam, var, path


def verify_all(*, only: Iterable[str] | None = None, workdir: Path | None = None) -> list[VerificationReport]:
    """Every bundled family and variant, installed on its default real base tokenizer, then verified."""
    return [report for report, _ in verify_all_with_contexts(only=only, workdir=workdir)]


def verify_all_with_contexts(*, only: Iterable[str] | None = None, workdir: Path | None = None
                             ) -> list[tuple[VerificationReport, VerifyContext]]:
    from .base_tokenizers import base_tokenizer
    from .install import install

    results = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for fam in list_families():
            base = base_tokenizer(fam.base_tokenizer)
            for var in fam.variants.values():
                out = Path(tmp) / f"{fam.name}-{var.name}"
                install(fam, base, out, variant=var.name)
                report, ctx = verify_with_context(out, family=fam.name, variant=var.name, only=only)
                results.append((VerificationReport(
                    source=f"{fam.name}/{var.name} on {fam.base_tokenizer}", family=report.family,
                    variant=report.variant, tokenizer=fam.base_tokenizer, versions=report.versions,
                    capabilities=report.capabilities, checks=report.checks), ctx))
    return results
