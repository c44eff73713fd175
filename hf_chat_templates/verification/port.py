"""`port`: a chat template rewritten so that more engines render it as transformers does, each rewrite kept only
where it is proven on every probe conversation.

>>> result = port_template("model/")                     # doctest: +SKIP
>>> [s.rewrite.name for s in result.steps if s.status == "applied"]   # doctest: +SKIP

The rewrites (`template.rewrites`) are tried one by one on the template as ported so far. One is kept only when
(1) transformers renders every probe with the rewritten template byte for byte as with the original (the probes it
cannot render fail the same way), and (2) no engine renders a probe differently from transformers that it rendered
the same before, and at least one engine renders more probes the same. Anything else leaves the template as it
was and says why. What no rewrite changes (an engine's own preprocessing of requests, a construct without a known
rewrite) is reported per engine as the probes still rendered differently.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..conversations.probes import Probe, id_format_for
from ..conversations.suite import build_probes
from ..template.engines.base import Engine, RenderJob
from ..template.engines.registry import REFERENCE, engine_profiles
from ..template.rewrites import REWRITES, Rewrite
from .context import CLOCKS
from .template_diff import TemplateSide, read_side, render_side

__all__ = ["PortResult", "PortStep", "port_template"]


@dataclass(frozen=True)
class PortStep:
    """One rewrite tried: "applied", "not used" (the template has no such construct, or no engine renders it
    differently) or "not proven" (`reason` says which probe or engine refuted it); `diff` is its text diff when
    applied; `gains` the probes each engine renders the same thanks to it."""

    rewrite: Rewrite
    status: str
    reason: str = ""
    diff: str = ""
    gains: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rewrite": self.rewrite.name,
            "construct": self.rewrite.construct,
            "status": self.status,
            "reason": self.reason,
            "diff": self.diff,
            "gains": self.gains,
        }


@dataclass(frozen=True)
class PortResult:
    """The source, the ported template, the steps tried, and per engine the probes rendered as transformers does
    (before, after, of how many); `skipped` names the engines that cannot run here and why."""

    source: TemplateSide
    template: str
    steps: tuple[PortStep, ...]
    engines: dict[str, tuple[int, int, int]]
    skipped: dict[str, str]
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.template != self.source.template

    def describe(self, diffs: bool = True) -> str:
        lines = [f"{self.source.path} ({self.source.origin})"]
        for step in self.steps:
            gains = ", ".join(f"{n} +{g}" for n, g in step.gains.items() if g)
            lines.append(
                f"  {step.status:<11} {step.rewrite.name}: {step.rewrite.construct}"
                + (f" ({gains})" if gains else "")
                + (f"; {step.reason}" if step.reason else "")
            )
            if diffs and step.diff:
                lines += ["    " + line for line in step.diff.rstrip("\n").splitlines()]
        for name, (before, after, total) in self.engines.items():
            left = f"; {total - after} still differ (no proven rewrite)" if after < total else ""
            lines.append(f"  {name}: {before} → {after} of {total} probes rendered as transformers{left}")
        lines += [f"  {name} skipped: {why}" for name, why in self.skipped.items()]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source.to_dict(),
            "changed": self.changed,
            "steps": [s.to_dict() for s in self.steps],
            "engines": {n: {"before": b, "after": a, "probes": t} for n, (b, a, t) in self.engines.items()},
            "skipped": self.skipped,
            "notes": list(self.notes),
        }


Outcome = tuple[str | None, str | None]  # (text, None) or (None, the error)


class _Prover:
    """Renders the probes with a template in transformers and in each engine, at the engine's clock."""

    def __init__(self, side: TemplateSide, probes: list[Probe], engines: list[Engine], kwargs: dict[str, Any]):
        self.side = side
        self.probes = probes
        self.engines = engines
        self.kwargs = kwargs

    def reference(self, template: str, clock: Any = CLOCKS[0]) -> list[Outcome]:
        side = replace(self.side, template=template, tool_template=None)
        return [render_side(side, p, self.kwargs, clock=clock) for p in self.probes]

    def same(self, engine: Engine, template: str) -> set[str]:
        """The probes the engine renders exactly as transformers does."""
        clock = getattr(engine, "fixed_clock", None) or CLOCKS[0]
        ours = self.reference(template, clock)
        variables = {**self.side.variables, **self.kwargs}
        jobs = [RenderJob(p.message_list(), p.tool_list(), p.add_generation_prompt, variables) for p in self.probes]
        try:
            theirs = engine.render_all(template, jobs, clock=clock)
        except Exception:  # a profile that raises renders nothing the same
            return set()
        return {
            p.id
            for p, (text, _), other in zip(self.probes, ours, theirs, strict=True)
            if text is not None and other.ok and other.text == text
        }


def _diff(before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), "before", "after", n=0)
    )


def _try(prover: _Prover, rewrite: Rewrite, current: str, same: dict[str, set[str]], base: list[Outcome]) -> PortStep:
    candidate = rewrite.apply(current)
    if candidate is None:
        return PortStep(rewrite, "not used", "the template does not use it")
    changed = [p.id for p, a, b in zip(prover.probes, base, prover.reference(candidate), strict=True) if a != b]
    if changed:
        return PortStep(
            rewrite, "not proven", f"transformers would render {len(changed)} probe(s) differently ({changed[0]})"
        )
    after = {engine.name: prover.same(engine, candidate) for engine in prover.engines}
    lost = [(name, sorted(same[name] - after[name])) for name in same if same[name] - after[name]]
    if lost:
        name, probes = lost[0]
        return PortStep(rewrite, "not proven", f"{name} would no longer render probe {probes[0]} as transformers")
    gains = {name: len(after[name] - same[name]) for name in same}
    if not any(gains.values()):
        return PortStep(rewrite, "not used", "every engine renders the probes the same without it")
    same.update(after)
    return PortStep(rewrite, "applied", diff=_diff(current, candidate), gains=gains)


def port_template(
    source: str | Path | TemplateSide, *, engines: Any = None, kwargs: dict[str, Any] | None = None
) -> PortResult:
    """The template of `source` (a template file, tokenizer folder, tokenizer_config.json or GGUF file) with every
    rewrite proven on the probes applied; `engines` as `--engines` takes them (None: every profile)."""
    side = source if isinstance(source, TemplateSide) else read_side(source)
    probes = [p for p in build_probes(id_format_for(side.template)) if not p.continue_final_message]
    profiles = engine_profiles(engines)
    skipped = {e.name: why for e in profiles if (why := e.unavailable())}
    runnable = [e for e in profiles if e.name not in skipped and e.name != REFERENCE]
    prover = _Prover(side, probes, runnable, dict(kwargs or {}))
    base = prover.reference(side.template)
    first = {engine.name: prover.same(engine, side.template) for engine in runnable}
    same = {name: set(probes_same) for name, probes_same in first.items()}
    current, steps = side.template, []
    for rewrite in REWRITES:
        step = _try(prover, rewrite, current, same, base)
        if step.status == "applied":
            current = rewrite.apply(current) or current
        steps.append(step)
    notes = []
    if side.tool_template is not None:
        notes.append("the folder's tool_use template is not ported: port it as a file of its own")
    counts = {name: (len(first[name]), len(same[name]), len(probes)) for name in first}
    return PortResult(side, current, tuple(steps), counts, skipped, tuple(notes))


def port_for_install(template: str, variables: dict[str, str]) -> tuple[str, tuple[str, ...]]:
    """`install --port`'s porter (`installation.porting.Porter`): `template` ported for every engine profile,
    rendered with the special-token strings `variables`, and what the port did as the install plan prints it."""
    side = TemplateSide(Path("the template to install"), "template", template, dict(variables))
    result = port_template(side)
    lines = [
        f"{step.status} {step.rewrite.name}: {step.rewrite.construct}"
        + ("".join(f", {name} +{n}" for name, n in step.gains.items() if n))
        + (f"; {step.reason}" if step.reason else "")
        for step in result.steps
        if step.status != "not used"
    ]
    if not result.changed:
        lines.insert(0, "no rewrite needed or proven: the template is installed as it was")
    lines += [
        f"{name}: {before} -> {after} of {total} probes rendered as transformers"
        for name, (before, after, total) in result.engines.items()
        if before < total
    ]
    lines += [f"{name} skipped: {why}" for name, why in result.skipped.items()]
    return result.template, tuple(lines)
