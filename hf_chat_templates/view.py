"""The conversation as the model sees it: token boundaries, control tokens set apart, whitespace made visible,
the assistant mask as an overlay, ids on hover (HTML) or on demand (terminal), and two renderings aligned.

`token_view` builds the data; `to_terminal` and `to_html` draw it; `diff_views` aligns two token sequences;
`html_page` wraps fragments into one self-contained file (inline CSS, no scripts, no fonts, no network).
`verification_html` is the `verify --html` report: the matrix, then for every failure the tokens around it.
"""

from __future__ import annotations

import difflib
import html
import os
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from .training import Span

if TYPE_CHECKING:
    from .verify import CheckResult, VerificationReport, VerifyContext


@dataclass(frozen=True)
class Tok:
    index: int
    id: int
    text: str  # the characters this token covers ("" for a continuation of a split character)
    start: int
    end: int
    control: bool
    trained: bool
    message: int | None


@dataclass
class TokenView:
    title: str
    tokens: list[Tok]
    text: str = ""
    untrained: tuple[tuple[int, str], ...] = ()
    notes: list[str] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    def token_at_char(self, pos: int) -> int | None:
        for t in self.tokens:
            if t.start <= pos < t.end:
                return t.index
        return None


def _control_ids(tokenizer: Any, control_tokens: Iterable[str]) -> set[int]:
    ids = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    for token in control_tokens:
        encoded = tokenizer.encode(token, add_special_tokens=False)
        if len(encoded) == 1:
            ids.add(encoded[0])
    return ids


def token_view(tokenizer: Any, text: str, *, title: str = "", spans: Sequence[Span] = (),
               control_tokens: Iterable[str] = (), boundaries: Sequence[int] | None = None,
               untrained: tuple[tuple[int, str], ...] = ()) -> TokenView:
    """A rendering's tokens, each with its characters, whether it is a control token, whether the mask trains it
    (it overlaps an assistant span), and the message it belongs to (from the message boundaries)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    controls = _control_ids(tokenizer, control_tokens)
    tokens, seen = [], 0
    for i, (token_id, (start, end)) in enumerate(zip(enc["input_ids"], enc["offset_mapping"])):
        piece = text[max(start, seen):end]
        seen = max(seen, end)
        trained = any(end > s.start and start < s.end for s in spans)
        message = None
        if boundaries is not None:
            message = next((k for k, b in enumerate(boundaries) if start < b), len(boundaries) - 1)
        tokens.append(Tok(i, int(token_id), piece, start, end, token_id in controls, trained, message))
    return TokenView(title, tokens, text, untrained)


def ids_view(tokenizer: Any, ids: Sequence[int], *, title: str, control_tokens: Iterable[str] = ()) -> TokenView:
    """A view of bare ids (an official renderer's output): each token's text is its own decoding."""
    controls = _control_ids(tokenizer, control_tokens)
    tokens, pos = [], 0
    for i, token_id in enumerate(ids):
        piece = tokenizer.decode([token_id])
        tokens.append(Tok(i, int(token_id), piece, pos, pos + len(piece), token_id in controls, False, None))
        pos += len(piece)
    return TokenView(title, tokens, "".join(t.text for t in tokens))


def context_view(ctx: "VerifyContext", probe_id: str) -> TokenView:
    """The view of one probe of a verification: its rendering, message boundaries and assistant spans."""
    from .checks_training import probe_spans

    probe = ctx.probe(probe_id)
    rendered = ctx.rendered[probe_id]
    text = rendered.text or ""
    spans: tuple[Span, ...] = ()
    untrained: tuple[tuple[int, str], ...] = ()
    notes = []
    if ctx.stop_tokens and not probe.continue_final_message and rendered.ok:
        try:
            found = probe_spans(ctx, probe)
            spans, untrained = found.spans, found.untrained
        except Exception as err:  # a prefix that does not render: the view shows no mask, and says why
            notes.append(f"no assistant mask: {err}")
    view = token_view(ctx.tokenizer, text, title=f"probe {probe_id}", spans=spans, control_tokens=ctx.control_tokens,
                      boundaries=ctx.message_boundaries(probe), untrained=untrained)
    view.notes += notes
    return view


# ---- alignment --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Aligned:
    """Two token sequences in aligned rows: ('equal'|'replace'|'delete'|'insert', left tokens, right tokens)."""

    left: TokenView
    right: TokenView
    rows: tuple[tuple[str, tuple[Tok, ...], tuple[Tok, ...]], ...]

    @property
    def first_difference(self) -> int | None:
        """The first position where the two token sequences differ (None when they are equal); the same index on
        both sides, as the checks count it."""
        a, b = self.left.ids, self.right.ids
        if a == b:
            return None
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def diff_views(left: TokenView, right: TokenView) -> Aligned:
    matcher = difflib.SequenceMatcher(a=left.ids, b=right.ids, autojunk=False)
    rows = tuple((tag, tuple(left.tokens[i1:i2]), tuple(right.tokens[j1:j2]))
                 for tag, i1, i2, j1, j2 in matcher.get_opcodes())
    return Aligned(left, right, rows)


# ---- terminal ----------------------------------------------------------------------------------------------------

_ANSI = {"a": "\x1b[48;5;236m", "b": "\x1b[48;5;239m", "control": "\x1b[1;38;5;215m", "trained": "\x1b[4;38;5;120m",
         "diff": "\x1b[48;5;52m", "reset": "\x1b[0m", "dim": "\x1b[2m"}


def _visible(piece: str) -> str:
    return piece.replace(" ", "·").replace("\t", "→").replace("\n", "↵\n")


def to_terminal(view: TokenView, *, width: int | None = None, color: bool | None = None, ids: bool = False,
                highlight: Iterable[int] = ()) -> str:
    """The view for a terminal: ANSI colours when `color` (default: stdout is a terminal), plain text otherwise.

    Colour: token boundaries as alternating backgrounds, control tokens bold orange, trained tokens underlined
    green. Plain: tokens separated by "|", control tokens in ⟦ ⟧, and under each line a row with ^ beneath the
    characters the mask trains. Whitespace is visible (· space, → tab, ↵ newline); `ids` adds each token's id."""
    import sys

    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR") if color is None else color
    width = width or shutil.get_terminal_size((100, 24)).columns
    marked = set(highlight)
    out_lines: list[str] = []
    line, mask_line, used = [], [], 0

    def flush() -> None:
        nonlocal line, mask_line, used
        out_lines.append("".join(line))
        if not color and any(ch == "^" for ch in "".join(mask_line)):
            out_lines.append("".join(mask_line).rstrip())
        line, mask_line, used = [], [], 0

    for tok in view.tokens:
        label = _visible(tok.text or "∙").replace("\n", "") + (f"({tok.id})" if ids else "")
        if tok.control and not color:
            label = f"⟦{label}⟧"
        sep = "" if color else "|"
        if used + len(label) + len(sep) > width and used:
            flush()
        if color:
            style = _ANSI["diff"] if tok.index in marked else _ANSI["a" if tok.index % 2 else "b"]
            if tok.control:
                style += _ANSI["control"]
            if tok.trained:
                style += _ANSI["trained"]
            line.append(f"{style}{label}{_ANSI['reset']}")
        else:
            line.append(label + sep)
            mask_line.append(("^" if tok.trained else " ") * len(label) + " " * len(sep))
        used += len(label) + len(sep)
        if "\n" in tok.text:  # the line breaks after the token that holds the newline
            flush()
    flush()
    trained = sum(t.trained for t in view.tokens)
    legend = (f"{view.title}: {len(view.tokens)} tokens, {trained} trained"
              + ("" if color else "  (| token boundary, ⟦ ⟧ control token, ^ trained, · space, ↵ newline)"))
    notes = [f"message {i} is not trained: {why}" for i, why in view.untrained] + view.notes
    return "\n".join([legend, *out_lines, *notes])


def aligned_terminal(aligned: Aligned, *, width: int | None = None, color: bool | None = None) -> str:
    """Both sides, each with the tokens that differ highlighted, and where they part ways."""
    first = aligned.first_difference
    left_marked = {t.index for tag, a, _ in aligned.rows if tag != "equal" for t in a}
    right_marked = {t.index for tag, _, b in aligned.rows if tag != "equal" for t in b}
    head = ("the two renderings are token for token equal" if first is None else
            f"they part ways at token {first} of {aligned.left.title}")
    return "\n".join([head, to_terminal(aligned.left, width=width, color=color, highlight=left_marked), "",
                      to_terminal(aligned.right, width=width, color=color, highlight=right_marked)])


# ---- HTML ---------------------------------------------------------------------------------------------------------

CSS = """
body{font:14px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#15171c;color:#d8dee9;margin:24px}
h1,h2,h3{font-family:system-ui,sans-serif;font-weight:600;color:#eceff4}h1{font-size:20px}h2{font-size:17px;
margin-top:28px}h3{font-size:14px;margin:18px 0 6px}
.legend span{margin-right:14px}.note{color:#a3acb9;font-family:system-ui,sans-serif;font-size:13px}
.view{white-space:pre-wrap;word-break:break-all;background:#1d2027;border:1px solid #2c313c;border-radius:6px;
padding:10px 12px;margin:6px 0}
.t{border-radius:2px;padding:1px 0;box-shadow:inset -1px 0 0 #4c566a}.t:nth-child(odd){background:#262a33}
.t:nth-child(even){background:#2f3440}.t:hover{outline:1px solid #88c0d0;background:#3b4252}
.c{color:#ffb86c;font-weight:700}.m{border-bottom:3px solid #50fa7b}.ws{color:#6b7385}
.x{background:#5c1f27 !important;outline:1px solid #ff5555}.here{outline:2px solid #ffd75e !important}
.gap{color:#6b7385}.ins{background:#1f4d2b !important}
table.matrix{border-collapse:collapse;font-family:system-ui,sans-serif;font-size:13px}
.matrix th,.matrix td{border:1px solid #2c313c;padding:3px 8px;text-align:center}
.matrix th.name,.matrix td.name{text-align:left}.pass{color:#50fa7b}.fail{color:#ff5555;font-weight:700}
.warn{color:#f1fa8c}.skip{color:#6b7385}.matrix a{color:inherit}
.side{display:grid;grid-template-columns:1fr 1fr;gap:12px}.msg{font-family:system-ui,sans-serif;font-size:13px}
"""


def _html_piece(text: str) -> str:
    out = []
    for ch in text or "∙":
        if ch == " ":
            out.append('<span class="ws">·</span>')
        elif ch == "\n":
            out.append('<span class="ws">↵</span>\n')
        elif ch == "\t":
            out.append('<span class="ws">→</span>')
        else:
            out.append(html.escape(ch))
    return "".join(out)


def to_html(view: TokenView, *, highlight: Iterable[int] = (), here: int | None = None,
            window: tuple[int, int] | None = None, anchor: str | None = None, side: str = "") -> str:
    """The view as an HTML fragment. Every token is a span with data-i (position), data-id (id), data-msg, and the
    classes t (token), c (control token), m (trained by the mask), x (differs from the other side), here (the
    failure's token); its title shows the id on hover."""
    marked = set(highlight)
    start, stop = window or (0, len(view.tokens))
    parts = []
    if start > 0:
        parts.append(f'<span class="gap">… {start} tokens before …</span>\n')
    for tok in view.tokens[start:stop]:
        classes = ["t"] + (["c"] if tok.control else []) + (["m"] if tok.trained else []) + (
            ["x"] if tok.index in marked else []) + (["here"] if tok.index == here else [])
        title = f"token {tok.index} · id {tok.id}" + (f" · message {tok.message}" if tok.message is not None else "") + (
            " · trained" if tok.trained else "") + (" · control" if tok.control else "")
        attrs = (f' data-i="{tok.index}" data-id="{tok.id}"' + (f' data-msg="{tok.message}"' if tok.message is not None
                                                              else "") + (f' data-side="{side}"' if side else ""))
        if tok.index == here and anchor:
            attrs += f' id="{html.escape(anchor)}"'
        parts.append(f'<span class="{" ".join(classes)}"{attrs} title="{html.escape(title)}">'
                     f"{_html_piece(tok.text)}</span>")
    if stop < len(view.tokens):
        parts.append(f'\n<span class="gap">… {len(view.tokens) - stop} tokens after …</span>')
    trained = sum(t.trained for t in view.tokens)
    notes = "".join(f'<div class="note">message {i} is not trained: {html.escape(why)}</div>'
                    for i, why in view.untrained) + "".join(f'<div class="note">{html.escape(n)}</div>'
                                                            for n in view.notes)
    return (f'<div class="note">{html.escape(view.title)}: {len(view.tokens)} tokens, {trained} trained</div>'
            f'<div class="view" data-title="{html.escape(view.title)}">{"".join(parts)}</div>{notes}')


def aligned_html(aligned: Aligned, *, anchor: str | None = None, context: int = 40) -> str:
    """Both sides side by side, the differing tokens marked, each side windowed around the first difference."""
    first = aligned.first_difference
    left_marked = {t.index for tag, a, _ in aligned.rows if tag != "equal" for t in a}
    right_marked = {t.index for tag, _, b in aligned.rows if tag != "equal" for t in b}
    right_first = None if first is None else min(first, len(aligned.right.tokens) - 1)
    here_left = None if first is None else min(first, len(aligned.left.tokens) - 1)

    def window(view: TokenView, at: int | None) -> tuple[int, int] | None:
        if at is None:
            return None
        return max(0, at - context), min(len(view.tokens), at + context)

    head = ("token for token equal" if first is None
            else f"they part ways at token {first}: {len(left_marked)} token(s) differ on the left, "
                 f"{len(right_marked)} on the right")
    return (f'<div class="msg">{html.escape(head)}</div><div class="side"><div>'
            + to_html(aligned.left, highlight=left_marked, here=here_left, window=window(aligned.left, here_left),
                      anchor=anchor, side="left")
            + "</div><div>"
            + to_html(aligned.right, highlight=right_marked, here=right_first,
                      window=window(aligned.right, right_first), side="right")
            + "</div></div>")


def html_page(title: str, body: str) -> str:
    legend = ('<div class="legend note"><span><span class="t">tok</span><span class="t">ens</span> token boundaries'
              '</span><span class="c">&lt;|control|&gt;</span> control token <span class="m">trained</span> '
              'assistant mask <span class="x">differs</span> <span class="ws">· ↵ →</span> space, newline, tab; '
              'hover a token for its id</div>')
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>{legend}{body}</body></html>\n")


# ---- verify --html ----------------------------------------------------------------------------------------------

ALIGNED_CHECKS = ("reference-parity", "engine-parity", "completion-matches-content")


def anchor_for(report: "VerificationReport", check_id: str) -> str:
    name = f"{report.family}-{report.variant}" if report.family else "template"
    return f"fail-{name}-{check_id}"


def _failure_sides(ctx: "VerifyContext", check: "CheckResult") -> Aligned | None:
    """For the checks that compare two renderings, both sides of the failing probe as token views."""
    from .checks_format import CLOCKS
    from .rendering import frozen_clock, render_minijinja

    if check.probe is None or check.probe not in ctx.rendered:
        return None
    probe = ctx.probe(check.probe)
    ours = context_view(ctx, probe.id)
    ours.title = f"template, probe {probe.id}"
    if check.id in ("reference-parity", "engine-parity"):  # both compare against the frozen clock's rendering
        with frozen_clock(CLOCKS[0]):
            text = ctx.renderer.render(probe.message_list(), probe.tool_list(), cache=False,
                                       add_generation_prompt=probe.add_generation_prompt).text or ""
    if check.id == "reference-parity":
        from .reference import REFERENCES, reference_ids

        name = REFERENCES[ctx.variant.family][0] if ctx.variant else "reference"
        ours = token_view(ctx.tokenizer, text, title=f"template, probe {probe.id}", control_tokens=ctx.control_tokens)
        other = ids_view(ctx.tokenizer, reference_ids(ctx, probe), title=f"{name}, probe {probe.id}",
                         control_tokens=ctx.control_tokens)
    elif check.id == "engine-parity":
        rendered = render_minijinja(ctx.template, probe.message_list(), probe.tool_list(),
                                    add_generation_prompt=probe.add_generation_prompt,
                                    variables={**ctx.renderer.template_variables(), **ctx.kwargs}, clock=CLOCKS[0])
        if not rendered.ok:
            return None
        ours = token_view(ctx.tokenizer, text, title=f"transformers, probe {probe.id}",
                          control_tokens=ctx.control_tokens)
        other = token_view(ctx.tokenizer, rendered.text or "", title=f"minijinja, probe {probe.id}",
                           control_tokens=ctx.control_tokens)
    else:  # completion-matches-content: the rendering vs generation prompt + content + stop token
        messages = probe.message_list()
        prompt = ctx.renderer.render(messages[:-1], probe.tool_list(), add_generation_prompt=True)
        if not prompt.ok or not ctx.stop_tokens:
            return None
        expected = (prompt.text or "") + str(messages[-1]["content"]) + ctx.stop_tokens[0]
        full = ctx.rendered[probe.id].text or ""
        other = token_view(ctx.tokenizer, expected, title=f"prompt + content + {ctx.stop_tokens[0]}",
                           control_tokens=ctx.control_tokens)
        ours = token_view(ctx.tokenizer, full[:len(expected) + 40], title=f"template, probe {probe.id}",
                          control_tokens=ctx.control_tokens)
    return diff_views(ours, other)


def failure_html(ctx: "VerifyContext", report: "VerificationReport", check: "CheckResult") -> str:
    anchor = anchor_for(report, check.id)
    parts = [f'<h3>{html.escape(check.id)}</h3><div class="msg">{html.escape(check.message)}</div>']
    if check.hint:
        parts.append(f'<div class="note">fix: {html.escape(check.hint)}</div>')
    aligned = None
    if check.id in ALIGNED_CHECKS:
        try:
            aligned = _failure_sides(ctx, check)
        except Exception as err:  # the report still shows the message when a side cannot be drawn
            parts.append(f'<div class="note">could not draw both sides: {html.escape(str(err))}</div>')
    if aligned is not None:
        parts.append(aligned_html(aligned, anchor=anchor))
    elif check.probe is not None and check.probe in ctx.rendered and ctx.rendered[check.probe].ok:
        view = context_view(ctx, check.probe)
        here = check.detail.get("token_position")
        if here is None and check.detail.get("char_position") is not None:
            here = view.token_at_char(int(check.detail["char_position"]))
        if here is None and check.detail.get("message_index") is not None:
            here = next((t.index for t in view.tokens if t.message == check.detail["message_index"]), None)
        here = 0 if here is None and view.tokens else here
        window = (max(0, here - 60), min(len(view.tokens), here + 60)) if here is not None else None
        parts.append(to_html(view, here=here, window=window, anchor=anchor))
    else:
        parts.append(f'<span id="{html.escape(anchor)}"></span>')
    return f'<section class="failure">{"".join(parts)}</section>'


def verification_html(results: Sequence[tuple["VerificationReport", "VerifyContext"]], *,
                      title: str = "hf-chat-templates verify") -> str:
    """The report: a matrix of variants × checks (each failure links to its section), then each variant's
    failures with the tokens around them, and one probe's full view with its assistant mask."""
    from .verify import CHECK_ORDER

    names = [f"{r.family}/{r.variant}" if r.family else r.source for r, _ in results]
    checks = [c for c in CHECK_ORDER if any(c in {x.id for x in r.checks} for r, _ in results)]
    head = "".join(f'<th title="{html.escape(c)}">{i + 1}</th>' for i, c in enumerate(checks))
    rows = []
    for name, (report, _) in zip(names, results):
        cells = []
        for check_id in checks:
            found = next((c for c in report.checks if c.id == check_id), None)
            if found is None:
                cells.append("<td></td>")
                continue
            mark = {"pass": "ok", "fail": "FAIL", "warn": "warn", "skip": "–"}[found.status]
            inner = (f'<a href="#{anchor_for(report, check_id)}">{mark}</a>' if found.status == "fail" else mark)
            cells.append(f'<td class="{found.status}" title="{html.escape(found.message)}">{inner}</td>')
        rows.append(f'<tr><td class="name">{html.escape(name)}</td>{"".join(cells)}</tr>')
    key = " ".join(f"{i + 1} {html.escape(c)}" + ("," if i + 1 < len(checks) else "") for i, c in enumerate(checks))
    body = [f'<table class="matrix"><tr><th class="name">variant</th>{head}</tr>{"".join(rows)}</table>',
            f'<div class="note">{key}</div>']
    for name, (report, ctx) in zip(names, results):
        s = report.summary
        body.append(f'<h2 id="{html.escape(name)}">{html.escape(name)} — {s["passed"]} passed, {s["failed"]} failed, '
                    f'{s["warned"]} warned</h2>')
        failures = [c for c in report.checks if c.status == "fail"]
        for check in failures:
            body.append(failure_html(ctx, report, check))
        sample = next((p for p in ("multi-turn", "tool-call", "plain") if p in ctx.rendered and ctx.rendered[p].ok),
                      None)
        if sample:
            body.append(f"<h3>probe {sample}: the tokens, with the assistant mask</h3>" + to_html(context_view(ctx,
                                                                                                           sample)))
    return html_page(title, "".join(body))


# ---- `view` ---------------------------------------------------------------------------------------------------

def read_messages_file(path: "os.PathLike[str] | str") -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """A JSON file holding a list of messages, or {"messages": [...], "tools": [...]}; errors name the file and
    the message."""
    import json
    from pathlib import Path

    from .dataset import validate_record
    from .errors import UsageError

    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"{file}: cannot read ({err.strerror or err})", hint="pass --messages FILE.json") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"{file}: not UTF-8 (byte {err.start})", hint="save the file as UTF-8") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"{file}: not JSON: {err.msg} at line {err.lineno} column {err.colno}",
                         hint="a JSON list of messages, or {\"messages\": [...]}") from None
    record = {"messages": data} if isinstance(data, list) else data
    problem = validate_record(record)
    if problem:
        raise UsageError(f"{file}: {problem}", hint="each message is {\"role\": ..., \"content\": ...}")
    return list(record["messages"]), record.get("tools")


def view_conversation(source: str, messages_file: "os.PathLike[str] | str", *, family: str | None = None,
                      variant: str | None = None, template: "os.PathLike[str] | str | None" = None,
                      add_generation_prompt: bool = False, diff_with: str | None = None, ids: bool = False,
                      width: int | None = None, html: bool = False, color: bool | None = None
                      ) -> tuple[str, str | None]:
    """(terminal text, HTML page or None) for one conversation rendered on the tokenizer at `source`."""
    from .errors import UsageError
    from .probes import Probe
    from .rendering import Renderer
    from .verify import load_context

    messages, tools = read_messages_file(messages_file)
    probe = Probe("messages", tuple(messages), tuple(tools) if tools is not None else None,
                  add_generation_prompt=add_generation_prompt, description="the conversation given")
    ctx, fam, var, _ = load_context(source, family=family, variant=variant, template=template, probes=(probe,))
    rendered = ctx.rendered[probe.id]
    if not rendered.ok:
        raise UsageError(f"{messages_file}: the template does not render this conversation: {rendered.error}",
                         hint="hf-chat-templates verify SOURCE shows which inputs the template accepts")
    view = context_view(ctx, probe.id)
    name = f"{fam.name}/{var.name}" if fam and var else "template"
    view.title = f"{name} on {source}"
    aligned = None
    if diff_with:
        if diff_with == "reference":
            from .reference import REFERENCES, Unsupported, reference_ids

            if ctx.variant is None or ctx.variant.family not in REFERENCES:
                raise UsageError(f"--diff-with reference: no official renderer for {name}",
                                 hint=f"official renderers: {', '.join(REFERENCES)}")
            try:
                other = ids_view(ctx.tokenizer, reference_ids(ctx, probe),
                                 title=REFERENCES[ctx.variant.family][0], control_tokens=ctx.control_tokens)
            except Unsupported as why:
                raise UsageError(f"--diff-with reference: the official renderer cannot express this conversation "
                                 f"({why})", hint="compare with another variant instead") from None
        else:
            if fam is None:
                raise UsageError("--diff-with VARIANT needs a bundled family: pass --family",
                                 hint="hf-chat-templates list")
            other_var = fam.variant(diff_with)
            out = Renderer(ctx.tokenizer, other_var.template, other_var.kwarg_defaults).render(
                messages, tools, add_generation_prompt=add_generation_prompt)
            if not out.ok:
                raise UsageError(f"--diff-with {diff_with}: {fam.name}/{diff_with} does not render this "
                                 f"conversation: {out.error}", hint="compare with another variant")
            other = token_view(ctx.tokenizer, out.text or "", title=f"{fam.name}/{diff_with}",
                               control_tokens=ctx.control_tokens)
        aligned = diff_views(view, other)
    text = (aligned_terminal(aligned, width=width, color=color) if aligned else
            to_terminal(view, width=width, color=color, ids=ids))
    page = None
    if html:
        body = aligned_html(aligned, anchor="first-difference") if aligned else to_html(view)
        page = html_page(f"hf-chat-templates view: {view.title}", body)
    return text, page
