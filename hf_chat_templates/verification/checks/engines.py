"""`engine-parity`: every probe rendered by each engine profile (llama.cpp, TGI, transformers.js, vLLM) as that
engine serves it, compared with transformers' rendering.

Per engine the check says whether the template loads, how many probes render, which are identical, where the first
difference lies (position, message, both sides) and which fail; a failure or difference names the Jinja construct
to blame and its portable rewrite (`template.engines.constructs`). A difference that is the engine's documented
behaviour (TGI's `tojson` escaping) is a warning that says so. A difference the engine's own request handling
explains entirely is info naming it: a variable llama-server defines on its own, text parts joined into a string,
images left out, vLLM's parsed arguments and null tool parameters (`RequestRewrite`); the proof is transformers
given the request so rewritten rendering the engine's very text, and any other difference keeps its severity. A
list or dict the template prints whole, which transformers writes as Python's repr and an engine as JSON, is a note
(the template does not read the value: `values-faithful` and `nothing-dropped` judge that). Each engine renders all
probes in one batch; a profile that cannot run here is skipped with its reason, in the message and in
`detail["engines"]`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ...conversations.probes import Probe
from ...template.engines.base import JOINED_TEXT_PARTS, MEDIA_LEFT_OUT, Engine, RenderJob, RequestRewrite
from ...template.engines.constructs import Blame, blame_difference, blame_error
from ...template.engines.registry import engine_profiles
from ...template.rendering import Rendered, frozen_clock
from ...template.syntax import transformers_text
from ..context import CLOCKS, VerifyContext
from ..results import CheckResult, Finding, verdict
from .refusals import (
    NO_PARTS_FORMAT,
    NO_TOOL_FORMAT,
    carries_calls,
    has_no_tool_format,
    parts_written_as_data,
)

# Why an engine writes "\r\n" where transformers writes "\n": a template with CRLF line endings (a config key).
CARRIAGE_RETURNS = (
    "the template holds carriage returns (CRLF line endings): transformers' Jinja reads them as newlines, "
    "minijinja keeps them (TGI passes the config key to it as it is)"
)
CRLF_HINT = "save the template with LF line endings (hf-chat-templates install writes the config key with LF)"
# How a profile that returns a plain `Rendered` words a request its engine refuses before any template runs (an
# `EngineRendered` says it with `input_refused`).
REFUSES_REQUEST = " refuses the request: "
PREPROCESSED = (
    "{engine} {steps} before rendering, as that server does; the template writes what it is given, and transformers "
    "given the request so rewritten renders exactly so: the engine's request handling, not the template's"
)
STRINGIFIED = (
    "{engine} prints a list or dict the template writes whole as JSON where transformers prints Python's repr: the "
    "same value, written whole by both; only how a stringified value looks differs"
)
STRINGIFIED_HINT = "make the template read the value's fields (e.g. loop over content parts) instead of printing it"
SERVER_DEFAULTED = (
    "{engine} defines {names} in the template's context on its own (llama-server does in every request; transformers "
    "leaves them undefined), and transformers renders exactly so with them: the engine's default, not the template's"
)
GENERIC_HINT = "write the construct the message names the portable way, or avoid what the engine lacks"


def label_of(engine: Engine) -> str:
    return str(getattr(engine, "label", engine.name))


def _batches(ctx: VerifyContext, probes: list[Probe]) -> list[tuple[str, list[Probe], list[RenderJob]]]:
    """The probes as the engines get them: one batch of jobs per template (a `tool_use` template takes the probes
    with tools)."""
    variables = {**ctx.renderer.template_variables(), **ctx.kwargs}
    groups: dict[str, list[Probe]] = defaultdict(list)
    for probe in probes:
        groups[ctx.renderer.template_for(probe.tool_list())].append(probe)
    return [
        (
            template,
            group,
            [RenderJob(p.message_list(), p.tool_list(), p.add_generation_prompt, variables) for p in group],
        )
        for template, group in groups.items()
    ]


def _failed(engine: Engine, err: Exception, count: int) -> list[Rendered]:
    return [Rendered(None, f"the {engine.name} profile itself raised {type(err).__name__}: {err}")] * count


def render_in(ctx: VerifyContext, engine: Engine, probes: list[Probe]) -> dict[str, Rendered]:
    """Each probe rendered by the engine, one `render_all` batch per template (a `tool_use` template takes the
    probes with tools). A profile that raises fails its batch with that error, never the check."""
    clock = getattr(engine, "fixed_clock", None) or CLOCKS[0]
    outs: dict[str, Rendered] = {}
    for template, group, jobs in _batches(ctx, probes):
        try:
            rendered = engine.render_all(template, jobs, clock=clock)
        except Exception as err:
            rendered = _failed(engine, err, len(jobs))
        outs.update(zip((p.id for p in group), rendered))
    return outs


def start_in(ctx: VerifyContext, engine: Engine, probes: list[Probe]) -> Callable[[], dict[str, Rendered]]:
    """`render_in` begun, for a profile that renders in a process of its own (`start_all`: transformers.js in
    node): its batches start now and render while the caller works; the function returned waits for them."""
    # A profile with a `fixed_clock` renders at it whatever it is given, so it is not asked for it here: asking
    # may load in this process the engine that `start_all` runs in another.
    clock = CLOCKS[0]
    begun: list[tuple[list[Probe], Callable[[], list[Rendered]] | Exception]] = []
    for template, group, jobs in _batches(ctx, probes):
        try:
            begun.append((group, engine.start_all(template, jobs, clock=clock)))  # type: ignore[attr-defined]
        except Exception as err:  # reported when the outcomes are asked for, as a `render_all` that raised
            begun.append((group, err))

    def outcomes() -> dict[str, Rendered]:
        outs: dict[str, Rendered] = {}
        for group, batch in begun:
            try:
                if isinstance(batch, Exception):
                    raise batch
                rendered = batch()
            except Exception as err:
                rendered = _failed(engine, err, len(group))
            outs.update(zip((p.id for p in group), rendered))
        return outs

    return outcomes


def reference(ctx: VerifyContext, engine: Engine, probe: Probe) -> Rendered:
    """transformers' rendering at the engine's clock (the shared rendering when the template reads no clock)."""
    clock = getattr(engine, "fixed_clock", None) or CLOCKS[0]
    if "strftime_now" not in ctx.renderer.template_for(probe.tool_list()):
        return ctx.rendered[probe.id]
    with frozen_clock(clock):
        return ctx.renderer.render(
            probe.message_list(), probe.tool_list(), cache=False, add_generation_prompt=probe.add_generation_prompt
        )


def rerender(
    ctx: VerifyContext,
    engine: Engine,
    probe: Probe,
    messages: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> Rendered:
    """transformers' rendering of the probe (or of `messages` and `tools` in their place) at the engine's clock, with
    `extra` variables: what the engine's rendering is compared with once its own rewrite is applied."""
    with frozen_clock(getattr(engine, "fixed_clock", None) or CLOCKS[0]):
        return ctx.renderer.render(
            probe.message_list() if messages is None else messages,
            probe.tool_list() if tools is None else tools,
            cache=False,
            add_generation_prompt=probe.add_generation_prompt,
            **(extra or {}),
        )


def _blamed(finding: Finding, engine: Engine, blame: Blame | None) -> Finding:
    if blame is None:
        return finding
    finding.text += f"; {blame.describe(label_of(engine))}"
    finding.detail.update(
        construct=blame.construct, rewrite=blame.rewrite, template_line=blame.line, engine_behaviour=blame.behaviour
    )
    if blame.behaviour:
        finding.severity, finding.cause = "warning", "engine"
    else:
        finding.cause, finding.hint = "template", f"write {blame.rewrite}"
    return finding


def _failures(
    ctx: VerifyContext, engine: Engine, failed: dict[str, list[str]], outs: dict[str, Rendered]
) -> tuple[list[Finding], bool]:
    """One finding per distinct error, and whether the template loads at all (it does not when every probe fails
    with one parse error). A request the engine refuses before any template runs is a warning, not the
    template's failure; a note on what the engine rewrote first is kept."""
    label, findings = label_of(engine), []
    everything = sum(len(ids) for ids in failed.values())
    loads = not (
        len(failed) == 1
        and not any(out.ok for out in outs.values())
        and any(m in next(iter(failed)) for m in ("compile:", "syntax error", "Parser Error"))
    )
    for error, ids in failed.items():
        template = ctx.renderer.template_for(ctx.probe(ids[0]).tool_list())
        also = f" (and {len(ids) - 1} more probe(s): {', '.join(ids[1:4])}{', …' if len(ids) > 4 else ''})"
        text = (
            f"{label} cannot load the template ({everything} probes fail): {error}"
            if not loads
            else f"probe {ids[0]}: {label} cannot render it: {error}" + (also if len(ids) > 1 else "")
        )
        finding = Finding(ids[0], text, {"engine": engine.name, "error": error, "probes": ids})
        first = outs[ids[0]]
        if note := getattr(first, "note", None):
            finding.text += f"; {note}"
            finding.detail["note"] = note
        if getattr(first, "input_refused", False) or REFUSES_REQUEST in error:  # the engine's rule, not the template's
            finding.severity, finding.cause = "info", "input normalization"
            finding.hint = f"{label} does not serve this input: send it in a form the engine accepts"
        elif has_no_tool_format(ctx) and all(carries_calls(ctx.probe(i)) for i in ids):
            finding.text += f"; {NO_TOOL_FORMAT}: it does not support tool calling"
            finding.severity, finding.cause = "info", "template format"
            finding.hint = "send such a model no tool calls, or train a template with a tool-call format"
            findings.append(finding)
            continue
        elif all(parts_written_as_data(ctx, ctx.probe(i)) for i in ids):
            finding.text += f"; {NO_PARTS_FORMAT}"
            finding.severity, finding.cause = "info", "template"
            finding.hint = "write each text part's text: `{% for p in message.content %}{{ p.text }}{% endfor %}`"
            findings.append(finding)
            continue
        findings.append(_blamed(finding, engine, blame_error(engine.name, template, error)))
    return findings, loads


def _difference(ctx: VerifyContext, engine: Engine, probe: Probe, ours: str, other: Rendered) -> Finding:
    label, theirs = label_of(engine), other.text or ""
    finding = ctx.text_difference(probe, f"{label} renders differently", ("transformers", label), ours, theirs)
    finding.detail["engine"] = engine.name
    note = getattr(other, "note", None)
    if transformers_text(theirs) == ours:
        finding.text += f"; {CARRIAGE_RETURNS}"
        finding.detail["carriage_returns"] = True
        finding.hint = CRLF_HINT
        return finding
    if _same_values(probe, ours, theirs):
        finding.text += f"; {STRINGIFIED.format(engine=label)}"
        finding.detail["stringified_values"] = True
        finding.severity, finding.cause, finding.hint = "info", "value formatting", STRINGIFIED_HINT
        return finding
    pos = finding.detail["char_position"]
    blame = blame_difference(engine.name, ctx.renderer.template_for(probe.tool_list()), ours, theirs, pos)
    if blame is None and (defaults := _server_defaults(ctx, engine, probe, theirs)):
        names = ", ".join(f"`{k}` = {json.dumps(v)}" for k, v in defaults.items())
        finding.text += f"; {SERVER_DEFAULTED.format(engine=label, names=names)}"
        finding.detail["engine_defaults"] = defaults
        finding.severity, finding.cause = "info", "engine"
        finding.hint = _defaults_hint(ctx, engine, probe, ours, defaults)
        return finding
    if blame is None and (steps := _preprocessing(ctx, engine, probe, theirs)):
        finding.text += f"; {PREPROCESSED.format(engine=label, steps=' and '.join(step.says for step in steps))}"
        finding.detail["preprocessing"] = [step.says for step in steps]
        if JOINED_TEXT_PARTS in steps or MEDIA_LEFT_OUT in steps:
            finding.detail["joins_text_parts"] = True
        finding.severity, finding.cause = "info", "input normalization"
        finding.hint = "; ".join(step.hint for step in steps)
        return finding
    if blame is None and note:  # the engine rewrote the input first, as it does when serving: its behaviour
        finding.text += f"; {note}"
        finding.detail["note"] = note
        finding.severity, finding.cause = "warning", "input normalization"
        finding.hint = (
            f"{label} serves such requests this way: send the messages in the form the template reads, or make the "
            "template read the form it is sent (e.g. loop over content parts)"
        )
    if blame is None and (hint := getattr(engine, "difference_hint", None)):  # a profile with its own fix
        finding.hint = hint
    return _blamed(finding, engine, blame)


def _missing_stop(engine: Engine, stop: str) -> Finding:
    return Finding(
        None,
        f"{label_of(engine)}'s Modelfile has no PARAMETER stop {stop!r}, a token that ends the template's turns: "
        "Ollama stops there only if the GGUF marks it end-of-generation, else the model writes past its turn",
        {"engine": engine.name, "stop_token": stop},
        severity="warning",
        cause="tokenizer config",
        hint=f'add the line PARAMETER stop "{stop}" to the Modelfile',
    )


def _same_values(probe: Probe, ours: str, theirs: str) -> bool:
    """Whether the engine's rendering is transformers' but for lists and dicts of the messages printed whole as
    JSON (`[{"type": "text"}]`) where Python prints their repr (`[{'type': 'text'}]`)."""
    values = [v for m in probe.message_list() for v in m.values() if isinstance(v, (list, dict)) and v]
    if not values:
        return False
    for value in values:
        for spaced in (True, False):
            for ascii_only in (False, True):
                separators = (", ", ": ") if spaced else (",", ":")
                written = json.dumps(value, ensure_ascii=ascii_only, separators=separators)
                theirs = theirs.replace(written, str(value))
    return theirs == ours


def _server_defaults(ctx: VerifyContext, engine: Engine, probe: Probe, theirs: str) -> dict[str, Any]:
    """The variables the engine defines on its own (`server_defaults`) that the template reads and the check's
    kwargs do not set, when transformers given them renders exactly the engine's text; else {}."""
    template = ctx.renderer.template_for(probe.tool_list())
    defaults = {
        k: v
        for k, v in (getattr(engine, "server_defaults", None) or {}).items()
        if k in template and k not in ctx.kwargs
    }
    if not defaults:
        return {}
    rendered = rerender(ctx, engine, probe, extra=defaults)
    return defaults if rendered.ok and rendered.text == theirs else {}


def _defaults_hint(ctx: VerifyContext, engine: Engine, probe: Probe, ours: str, defaults: dict[str, Any]) -> str:
    """How to serve what was trained: the opposite values, when transformers given them renders `ours` again."""
    off = {k: not v if isinstance(v, bool) else v for k, v in defaults.items()}
    rendered = rerender(ctx, engine, probe, extra=off)
    both = "or pass the values you serve with to transformers too, so that training sees the same prompt"
    if rendered.ok and rendered.text == ours:
        flag = f"--chat-template-kwargs '{json.dumps(off)}'"
        return f"serve it with `llama-server {flag}` (per request: `chat_template_kwargs`), {both}"
    return f"set {', '.join(defaults)} explicitly: in llama-server's `--chat-template-kwargs`, {both}"


def _preprocessing(ctx: VerifyContext, engine: Engine, probe: Probe, theirs: str) -> list[RequestRewrite]:
    """The steps of the engine's request handling (text parts joined into a string, images left out, as llama-server
    and vLLM do, and the profile's own `request_rewrites`) that change the probe's request, when transformers given
    the request so rewritten renders exactly the engine's text; else []."""
    steps: list[RequestRewrite] = []
    messages, tools = probe.message_list(), probe.tool_list()
    for step in (JOINED_TEXT_PARTS, MEDIA_LEFT_OUT, *getattr(engine, "request_rewrites", ())):
        rewritten, rewritten_tools = step.apply(messages, tools)
        if rewritten != messages or rewritten_tools != tools:
            steps.append(step)
            messages, tools = rewritten, rewritten_tools
    if not steps:
        return []
    rendered = rerender(ctx, engine, probe, messages, tools=tools)
    return steps if rendered.ok and rendered.text == theirs else []


def compare(
    ctx: VerifyContext, engine: Engine, probes: list[Probe], begun: Callable[[], dict[str, Rendered]] | None = None
) -> tuple[list[Finding], dict[str, Any]]:
    """The findings of one engine, and its status: loads, renders, identical, differs, fails. `begun`: its
    renderings, started earlier by `start_in`."""
    outs = begun() if begun is not None else render_in(ctx, engine, probes)
    failed: dict[str, list[str]] = defaultdict(list)
    differs, identical, findings = [], 0, []
    for probe in probes:
        other = outs[probe.id]
        if not other.ok:
            failed[other.error or "no output"].append(probe.id)
            continue
        ours = reference(ctx, engine, probe).text or ""
        if other.text == ours:
            identical += 1
            continue
        differs.append(probe.id)
        findings.append(_difference(ctx, engine, probe, ours, other))
    failures, loads = _failures(ctx, engine, dict(failed), outs)
    findings = _as_picked(engine, failures + findings)
    summary = {
        "status": "does not load" if not loads else "fails" if failed else "differs" if differs else "identical",
        "version": engine.version,
        "loads": loads,
        "renders": len(probes) - sum(len(ids) for ids in failed.values()),
        "identical": identical,
        "differs": differs,
        "fails": sorted(p for ids in failed.values() for p in ids),
        "worst": next(
            (s for s in ("error", "warning", "info") if any((f.severity or "error") == s for f in findings)), None
        ),
        "first_finding": {"probe": findings[0].probe, "message": findings[0].text} if findings else None,
    }
    if hasattr(engine, "follows"):  # a profile that reproduces an engine's code says which source it follows
        summary["follows"] = engine.follows
    return findings, summary


def _as_picked(engine: Engine, findings: list[Finding]) -> list[Finding]:
    """A profile that compares a template the engine picks on its own (Ollama's for a GGUF: `finding_note`) says
    so first in each finding, gives its own fix, and caps the severity (`severity_cap`)."""
    note, cap = getattr(engine, "finding_note", None), getattr(engine, "severity_cap", None)
    if note is None:
        return findings
    for finding in findings:
        finding.text = f"{note}; {finding.text}"
        finding.hint = str(getattr(engine, "difference_hint", finding.hint))
        finding.detail["picked_template"] = note
        if cap is not None and (finding.severity or "error") == "error":
            finding.severity = cap
    return findings


def _collected(
    engine: Engine, outcomes: Callable[[], dict[str, Rendered]]
) -> tuple[Engine, Callable[[], dict[str, Rendered]]]:
    found = outcomes()
    return engine, lambda: found


def _compared(ctx: VerifyContext) -> list[Probe]:
    """The probes the engines render: those transformers renders, prefills left out."""
    return [p for p in ctx.probes if not p.continue_final_message and ctx.rendered[p.id].ok]


def prestart(engines: Any) -> None:
    """The processes of the profiles among `engines` that render in one of their own begun now, before the
    tokenizer loads: they set up their engine meanwhile, and `begin` hands them the probes."""
    for engine in engine_profiles(engines):
        if hasattr(engine, "prestart"):
            engine.prestart()


def begin(ctx: VerifyContext) -> None:
    """The renderings of the profiles that render in a process of their own (`start_all`: transformers.js in
    node, llama.cpp in a worker) begun now, before the other checks run, so that they render meanwhile;
    `engine_parity` collects them from `ctx.begun_engines`."""
    probes = _compared(ctx)
    for engine in engine_profiles(ctx.engines):
        # whether it runs here is not asked first: its own process says so (asking may load the engine here)
        if engine.name not in ctx.begun_engines and hasattr(engine, "start_all"):
            ctx.begun_engines[engine.name] = (engine, start_in(ctx, engine, probes))


def engine_parity(ctx: VerifyContext) -> CheckResult:
    probes = _compared(ctx)
    prefills = sum(1 for p in ctx.probes if p.continue_final_message)
    unrendered = sum(1 for p in ctx.probes if not p.continue_final_message and not ctx.rendered[p.id].ok)
    left_out = ", ".join(
        f"{n} {what}"
        for n, what in ((prefills, "prefill probe(s)"), (unrendered, "probe(s) transformers does not render: renders"))
        if n
    )
    findings: list[Finding] = []
    engines: dict[str, Any] = {}
    begin(ctx)  # what `run_checks` has not begun before the first check
    # collected first: a profile's own process also says whether it runs here, and which build it is
    begun = {name: _collected(*ctx.begun_engines.pop(name)) for name in list(ctx.begun_engines)}
    profiles = [(engine, engine.unavailable()) for engine in engine_profiles(ctx.engines)]
    for engine, why in profiles:
        if why:
            engines[engine.name] = {"status": "skipped", "version": engine.version, "reason": why}
            continue
        engine, outcomes = begun.get(engine.name, (engine, None))
        found, engines[engine.name] = compare(ctx, engine, probes, outcomes)
        if hasattr(engine, "missing_stops"):  # a profile whose server is given its stops with the template
            found += [_missing_stop(engine, stop) for stop in engine.missing_stops(ctx.stop_tokens)]
        findings += found
    ran = [name for name, s in engines.items() if s["status"] != "skipped"]
    skipped = "; ".join(f"{name} skipped: {s['reason']}" for name, s in engines.items() if s["status"] == "skipped")
    if not ran:
        message = "no engine profile to compare with" + (f" ({skipped})" if skipped else "")
        return CheckResult("engine-parity", "skip", message, detail={"engines": engines})
    hint = CRLF_HINT if any(f.detail.get("carriage_returns") for f in findings) else GENERIC_HINT
    versions = ", ".join(f"{name} {engines[name]['version']}" for name in ran)
    result = verdict(
        "engine-parity",
        findings,
        f"{versions} render all {len(probes)} probes exactly as transformers"
        + (f" (not compared: {left_out})" if left_out else "")
        + (f" ({skipped})" if skipped else ""),
        hint,
    )
    result.detail["engines"] = engines
    if skipped and result.status != "pass":
        result.detail["skipped"] = skipped
    return result
