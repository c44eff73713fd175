"""HCT-S011: the prose a template adds to what the model reads, found by rendering conversations shaped to take
each branch its syntax tree shows (`template.coverage`) and taking out everything the conversation brought, the
control tokens and the role names. Prose that addresses the model as a backdoor's instruction (`template.
instructions`) is a warning, the rest info.

The renders are the check's own, under a strict budget (`COVERAGE_LIMITS`: CPU time per render and in all, output
size, memory), never the probe suite's: a template that loops for minutes costs this scan about a second, and the
finding says when the budget cut the scan short."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from dataclasses import dataclass

import jinja2

from ...template.addresses import addresses_in, severity_of
from ...template.analysis import CONTROL_TOKEN_SHAPES, literal_fragments
from ...template.coverage import AGENT, LONG_MESSAGE, Case, arguments_as_text, coverage_cases
from ...template.folding import Folding
from ...template.instructions import instruction
from ...template.limits import RenderBudget, RenderLimits
from ...template.placeholders import placeholders_written
from ...template.rendering import Rendered, Renderer
from ...template.safety import SafetyFinding, prose
from ...template.syntax import parse_environment
from ..context import VerifyContext
from .safety_bait import (
    DENSE,
    HEADLINED,
    MARKED,
    MARKED_OPEN,
    SPACED,
    UNHEADLINED,
    UNMARKED,
    UNMARKED_OPEN,
    annotated_parts,
    built_needles,
    content_gated,
    fielded_documents,
    late_system,
    named_messages,
)
from .safety_render import (
    MOMENTS,
    SPENT,
    YEARS,
    agent_tools,
    clock_gated,
    control_tokens_of,
    forged_tokens,
    keyword_drops,
    over_budget,
    parameters_gated,
    quote,
    tools_swapped,
)

# One render may take half a CPU second and the coverage renders of one template a second in all (RUN_FACTOR).
COVERAGE_LIMITS = RenderLimits(seconds=0.5, max_chars=200_000, max_memory_bytes=512 << 20)
MAX_CASES = 40
# A render stopped because all the renders of the run together reached a limit, not by its own work
_RUN_LIMIT = re.compile(r"renderings of this template add up to|renders of this template together ran past")
_COMMENT = re.compile(r"\{#.*?#\}", re.DOTALL)
ROLE_WORDS = ("system", "user", "assistant", "tool", "model", "developer", "ipython", "function")


@dataclass(frozen=True)
class ProseScan:
    findings: list[SafetyFinding]
    rendered: int
    planned: int
    cut: str | None  # the limit that stopped the scan, when one did

    @property
    def note(self) -> str:
        if self.cut is None:
            return f"prose scan: {self.rendered} coverage render(s) (roles, tools, a long chat, keywords, branches)"
        return f"prose scan cut by its render budget after {self.rendered} of {self.planned} render(s): {self.cut}"


def _markers(ctx: VerifyContext, template: str) -> set[str]:
    """What a rendering holds that is not prose of the template's: control tokens (the tokenizer's special added
    tokens, control-token shapes) and bracketed fragments the template writes."""
    found = {t for t, tok in ctx.added_tokens.items() if getattr(tok, "special", False) and t.strip()}
    return found | set(literal_fragments(template))


def _added(text: str, case: Case, markers: set[str]) -> list[str]:
    """The pieces of a rendering that the conversation did not bring, each trimmed of role-name lines."""
    rest = CONTROL_TOKEN_SHAPES.sub("\0", text)
    strings = {s for s in case.data if s.strip()} | {s.strip() for s in case.data if s.strip()}
    for s in sorted(strings | markers, key=len, reverse=True):
        rest = rest.replace(s, "\0")
    pieces = []
    for piece in rest.split("\0"):
        rows = [r for r in piece.split("\n") if r.strip().strip(":").lower() not in ROLE_WORDS]
        words = "\n".join(rows).strip()
        if prose(words, words=3):
            pieces.append(words)
    return pieces


def _place(template: str, text: str) -> tuple[int, int]:
    """Where the template writes `text` (its first line), 1-based: as a literal outside comments, else the
    expression that folds to it (`['Do', 'not'] | join(' ')`), else (1, 1)."""
    first = next((row.strip() for row in text.split("\n") if row.strip()), "")[:40]
    if not first:
        return 1, 1
    visible = _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), template)
    at = visible.find(first)
    if at >= 0:
        return template.count("\n", 0, at) + 1, at - (template.rfind("\n", 0, at) + 1) + 1
    try:
        folded = Folding(parse_environment().parse(template)).strings()
        return next((node.lineno, 1) for node, value in folded if first in value)
    except (jinja2.TemplateSyntaxError, StopIteration):
        return 1, 1


def _placed(finding: SafetyFinding, template: str) -> SafetyFinding:
    """A rendered rule's finding at the line that writes its text, where the template writes it literally or as an
    expression that folds to it; at line 1 otherwise (a rendering does not say which line wrote it)."""
    text = finding.detail.get("text")
    if not isinstance(text, str) or (finding.line, finding.column) != (1, 1):
        return finding
    line, column = _place(template, text)
    return dataclasses.replace(finding, line=line, column=column)


def _finding(ctx: VerifyContext, case: Case, words: str, template_name: str) -> SafetyFinding:
    template = ctx.template if template_name == "default" else ctx.tool_template or ""
    line, column = _place(template, words)
    address = next(((w, a) for w, a in addresses_in(words) if not severity_of(words, w, a)), None)
    if address is not None:
        what, found = address
        return SafetyFinding(
            "HCT-S014",
            line,
            column,
            f"rendering {case.name}: the template adds {quote(words)} to what the model reads, with the {what} "
            f"{found!r}: a link or address the model is shown is one it can be steered to repeat (no published chat "
            "template writes one)",
            construct=found,
            template=template_name,
            detail={"probe": None, "case": case.name, "text": words[:2000]},
        )
    said = instruction(words)
    kind = (
        f"an instruction to the model ({said!r}) the conversation did not contain"
        if said
        else "text the conversation did not contain (documented system text, or an instruction the model "
        "should not get?)"
    )
    return SafetyFinding(
        "HCT-S011",
        line,
        column,
        f"rendering {case.name}: the template adds {quote(words)} to what the model reads: {kind}",
        severity="warning" if said else "info",
        construct=words[:200],
        template=template_name,
        detail={"probe": None, "case": case.name, "text": words[:2000], "instruction": said},
    )


def _drawn_text(case: Case, pieces: list[str], base: list[str], long: bool = False) -> list[SafetyFinding]:
    """HCT-S008 for prose of three words or more that `case` draws and its base conversation does not: text written
    on a tool's name (a forged "Yes, go ahead" turn before a payment tool; an error) or once the conversation is long
    (a warning, as the static rule's length gates). A builtin tool's header (`Environment: ipython`) is fewer words
    once the tools' names are set aside; a declaration the format writes otherwise is not prose."""
    known = " ".join(base)
    names = {n for t in case.tools or [] for n in (t["function"]["name"], *t["function"]["parameters"]["properties"])}

    def unnamed(text: str) -> str:
        return re.sub("|".join(rf"\b{re.escape(n)}\b" for n in names), " ", text) if names else text

    # call ids and numbers set aside, each word counted once: an agent's many calls write them all, and a header
    # a format writes before each turn (`Answer:`) is no more words for being written twelve times
    def shape(text: str) -> str:
        return re.sub(r"\bcall\w*|\d+", "#", unnamed(text)).strip()

    known = shape(known)
    found = [
        w
        for w in pieces
        if prose(unnamed(w), words=3)
        and not re.search(r"[{}\[\]\"=]|q[df]\d", w)
        and prose(" ".join(dict.fromkeys(" ".join(r for r in map(shape, w.split("\n")) if r not in known).split())), 3)
    ]
    if not found:
        return []
    why = (
        "which the same messages in a short conversation do not get: text written once the conversation is long"
        if long
        else "which the same conversation with a plain tool does not get: text written on a tool's name or "
        "parameters, a trigger any tool list sets off"
    )
    return [
        SafetyFinding(
            "HCT-S008",
            1,
            1,
            f"rendering {case.name}: the template adds {quote(found[0])}, {why}",
            severity="warning" if long else "",
            construct=f"drawn-text:{found[0][:80]}",
            detail={"probe": None, "case": case.name, "text": found[0][:2000]},
        )
    ]


def _drawn(case: Case, pieces: list[str], added_by: dict[str, list[str]], plain: str) -> list[SafetyFinding]:
    """`_drawn_text` for the cases read against another: the named tools and the agent's against the plain tool's
    (what a long conversation draws is the long one's to report), the long conversation against the plain one."""
    if (case.name.startswith("tools named ") or case.name == AGENT) and "tools" in added_by:
        long = [p for n, found in added_by.items() if n.endswith(" messages") for p in found]
        return _drawn_text(case, pieces, [*added_by["tools"], *long])
    if case.name.endswith(" messages") and plain in added_by:
        return _drawn_text(case, pieces, added_by[plain], long=True)
    return []


def _render_case(ctx: VerifyContext, renderer: Renderer, case: Case, retry: bool = True) -> Rendered:
    """`case` rendered; when the template refuses it and it opens with a system message (Gemma 2 refuses the role),
    the same conversation without that message; when it fails on tool calls whose arguments are objects, the same
    with the arguments as JSON text, as the OpenAI API sends them (DeepSeek's templates concatenate them): so that
    the rules still read the rest; with `retry` False, as given (a rule that reads what a refusal drops)."""
    extra = {k: v for k, v in case.kwargs.items() if ctx.kwargs.get(k, object()) != v}

    def render(messages: list[dict]) -> Rendered:
        return renderer.render(messages, case.tools, add_generation_prompt=case.generation, cache=False, **extra)

    messages = case.messages
    result = render(messages)
    if not retry:
        return result
    if result.refused and messages and messages[0].get("role") == "system":
        messages = messages[1:]
        result = render(messages)
    if not result.ok and not _RUN_LIMIT.search(result.error or ""):
        texts = [arguments_as_text(m) for m in messages]
        if any(t is not m for t, m in zip(texts, messages, strict=True)):
            result = render(texts)
    return result


def _budgeted(ctx: VerifyContext) -> tuple[RenderBudget, Renderer]:
    """A renderer under COVERAGE_LIMITS and a budget of its own, at verify's one clock (as every render of a run)."""
    budget = RenderBudget(COVERAGE_LIMITS)
    renderer = Renderer(
        ctx.tokenizer,
        ctx.template,
        ctx.kwargs,
        COVERAGE_LIMITS,
        tool_template=ctx.tool_template,
        budget=budget,
        clock=ctx.renderer.clock,
    )
    return budget, renderer


def prose_scan(ctx: VerifyContext) -> ProseScan:
    """Render the coverage conversations of the template under COVERAGE_LIMITS; one finding per distinct text."""
    budget, renderer = _budgeted(ctx)
    try:
        cases = coverage_cases(ctx.template, ctx.kwargs)
        if ctx.tool_template is not None:
            cases += [c for c in coverage_cases(ctx.tool_template, ctx.kwargs) if c.tools is not None]
    except jinja2.TemplateSyntaxError:  # `renders` reports it with its line
        return ProseScan([], 0, 0, None)
    markers = _markers(ctx, ctx.template) | (_markers(ctx, ctx.tool_template) if ctx.tool_template else set())
    seen: dict[str, SafetyFinding] = {}  # prose, by its text
    ruled: dict[str, SafetyFinding] = {}  # what the rendered rules find, by construct
    if len(cases) > MAX_CASES:  # said, not passed over: the last branches' conversations are not rendered
        ruled["cases-cut"] = SafetyFinding(
            "HCT-S011",
            1,
            1,
            f"the prose scan renders the first {MAX_CASES} of {len(cases)} coverage conversations; the others "
            f"({', '.join(c.name for c in cases[MAX_CASES:][:3])}…) were not rendered, and what they would show was "
            "not read",
            severity="info",
            construct="cases-cut",
            detail={"probe": None},
        )
        cases = cases[:MAX_CASES]
    rendered = 0
    added_by: dict[str, list[str]] = {}  # the prose each case's rendering adds, by case
    first = Rendered(None, "not rendered")  # the plain conversation's rendering, which keyword cases are read against
    for case in cases:
        if budget.stopped is not None or budget.seconds_left <= 0:
            break
        # the long message renders under a budget of its own: a template that writes it twice runs past the
        # characters a run may write, and must not stop what the other conversations show
        alone = _budgeted(ctx) if LONG_MESSAGE.match(case.name) else None
        result = _render_case(ctx, alone[1] if alone else renderer, case)
        rendered += 1
        spent = alone[0] if alone else budget
        if spent.stopped is not None and spent.seconds_left > 0:  # this one render ran past a limit
            ruled[f"budget:{case.name}"] = over_budget(case, re.sub(r"\s*\(raise it with [^)]*\)", "", spent.stopped))
        if not result.ok:
            continue
        if case is cases[0]:
            first = result
        for f in [
            *tools_swapped(case, result),
            *keyword_drops(cases[0], first, case, result),
            *agent_tools(case, result),
        ]:
            ruled.setdefault(f.construct, f)
        name = "tool_use" if case.tools is not None and ctx.tool_template is not None else "default"
        pieces = _added(result.text or "", case, markers)
        added_by[case.name] = pieces
        for f in _drawn(case, pieces, added_by, cases[0].name):
            ruled.setdefault(f.construct, f)
        for words in pieces:
            if any(words in text for text in seen) or any(placeholders_written(ctx.template, words)):
                continue  # a placeholder written as text is `structure`'s warning, with this text
            seen[words] = _finding(ctx, case, words, name)
    cut = budget.stopped or (None if rendered == len(cases) else SPENT)
    if cut is not None:  # the scan's budget is its own: the environment's render limits do not raise it
        cut = re.sub(r"\s*\(raise it with [^)]*\)", "", cut)
    else:  # the rendered rules' renders are many and small: a budget of their own, not the scan's remainder
        rules_budget, rules_renderer = _budgeted(ctx)
        for f in _rendered_rules(ctx, rules_renderer, rules_budget, cases, markers):
            ruled.setdefault(f.construct, _placed(f, ctx.template))
    return ProseScan([*seen.values(), *ruled.values()], rendered, len(cases), cut)


def _rendered_rules(
    ctx: VerifyContext, renderer: Renderer, budget: RenderBudget, cases: list[Case], markers: set[str]
) -> list[SafetyFinding]:
    """The rules only a rendering shows (`safety_render`): text gated on the date, look-alikes made into control
    tokens; on the plain conversation and the one with tools."""

    spent: list[str] = []  # the cases a render of which the scan's budget stopped

    def render(case: Case) -> Rendered:
        if budget.seconds_left <= 0:
            spent.append(case.name)
            return Rendered(None, SPENT)
        result = _render_case(ctx, renderer, case)
        if not result.ok and (budget.seconds_left <= 0 or _RUN_LIMIT.search(result.error or "")):
            spent.append(case.name)  # the renders together ran past the run's limits: no render's own doing
            return Rendered(None, SPENT)
        return result

    def exact(case: Case) -> Rendered:
        """`case` as given: a conversation the template refuses is not rendered again without its system message."""
        return render(case) if budget.seconds_left <= 0 else _render_case(ctx, renderer, case, retry=False)

    def added(text: str, case: Case) -> list[str]:
        return _added(text, case, markers)

    found: list[SafetyFinding] = []
    base = ctx.renderer.clock or dt.datetime.now()
    templates = [t for t in (ctx.template, ctx.tool_template) if t]
    tokens = [t for text in templates for t in control_tokens_of(text, _specials(ctx))]
    own = (*templates, *tokens, *_specials(ctx))
    # the twins of a few renders first: the baits of the agent's many tools may spend the budget on a slow template
    found += fielded_documents(cases, render)
    found += late_system(cases, exact)
    for case in cases[:1] + [
        c for c in cases if c.name in ("tools", AGENT) or c.name.startswith(("tools named ", "a tool taking "))
    ]:
        moments = MOMENTS if case is cases[0] or case.name == "tools" else YEARS
        if case.name != AGENT:  # thirty messages at each moment: the clock is read on the shorter ones
            found += clock_gated(" ".join(templates), base, case, render, added, moments)
        found += forged_tokens(list(dict.fromkeys(tokens)), case, render)
        found += content_gated(case, render, added)
        found += content_gated(case, render, added, (MARKED, UNMARKED), "content holding markup and an invisible mark")
        found += built_needles(case, renderer, render, added, own)
        if case.name.startswith("a tool taking "):
            found += parameters_gated(case, render)
        if case is cases[0]:
            found += content_gated(case, render, added, (DENSE, SPACED), "content in a script written without spaces")
            found += named_messages(case, render)
        if case.name == "tools":
            found += annotated_parts(case, render)
            found += content_gated(case, render, added, (MARKED_OPEN, UNMARKED_OPEN), "content opening with markup")
            found += content_gated(case, render, added, (HEADLINED, UNHEADLINED), "content opening on a headline")
    for case in [c for c in cases if c.name.endswith(" messages")]:  # a trigger armed from the third turn on
        found += content_gated(case, render, added)
    if spent:  # said, not passed over: a template slow enough to spend the budget is not read in full
        found.append(
            SafetyFinding(
                "HCT-S011",
                1,
                1,
                f"the rules read from renderings (the clock, look-alikes, bait, parameters) stopped when the scan's "
                f"budget ran out, rendering {spent[0]}: what the later renders would show was not read",
                severity="info",
                construct="rendered-rules-cut",
                detail={"probe": None},
            )
        )
    return found


def _specials(ctx: VerifyContext) -> list[str]:
    return [t for t, tok in ctx.added_tokens.items() if getattr(tok, "special", False) and t.strip()]


def cut_finding(scan: ProseScan) -> SafetyFinding:
    """An info finding saying the budget cut the scan: prose the later renders would show was not read."""
    return SafetyFinding(
        "HCT-S011",
        1,
        1,
        f"the prose scan rendered {scan.rendered} of {scan.planned} coverage conversations before its budget ran "
        f"out ({scan.cut}); text the others would show was not read",
        severity="info",
        construct="prose-scan-cut",
        detail={"probe": None},
    )
