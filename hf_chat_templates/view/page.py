"""Token views as HTML: one self-contained page (inline CSS, no scripts, no fonts, no network); hover a token for
its id, message and mask."""

from __future__ import annotations

import html
from collections.abc import Iterable

from .tokens import Aligned, TokenView

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
.warn{color:#f1fa8c}.info{color:#8be9fd}.skip{color:#6b7385}.matrix a{color:inherit}
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


def to_html(
    view: TokenView,
    *,
    highlight: Iterable[int] = (),
    here: int | None = None,
    window: tuple[int, int] | None = None,
    anchor: str | None = None,
    side: str = "",
) -> str:
    """The view as an HTML fragment. Every token is a span with data-i (position), data-id (id), data-msg, and the
    classes t (token), c (control token), m (trained by the mask), x (differs from the other side), here (the
    failure's token); its title shows the id on hover."""
    marked = set(highlight)
    start, stop = window or (0, len(view.tokens))
    parts = []
    if start > 0:
        parts.append(f'<span class="gap">… {start} tokens before …</span>\n')
    for tok in view.tokens[start:stop]:
        classes = (
            ["t"]
            + (["c"] if tok.control else [])
            + (["m"] if tok.trained else [])
            + (["x"] if tok.index in marked else [])
            + (["here"] if tok.index == here else [])
        )
        title = (
            f"token {tok.index} · id {tok.id}"
            + (f" · message {tok.message}" if tok.message is not None else "")
            + (" · trained" if tok.trained else "")
            + (" · control" if tok.control else "")
        )
        attrs = (
            f' data-i="{tok.index}" data-id="{tok.id}"'
            + (f' data-msg="{tok.message}"' if tok.message is not None else "")
            + (f' data-side="{side}"' if side else "")
        )
        if tok.index == here and anchor:
            attrs += f' id="{html.escape(anchor)}"'
        parts.append(
            f'<span class="{" ".join(classes)}"{attrs} title="{html.escape(title)}">{_html_piece(tok.text)}</span>'
        )
    if stop < len(view.tokens):
        parts.append(f'\n<span class="gap">… {len(view.tokens) - stop} tokens after …</span>')
    trained = sum(t.trained for t in view.tokens)
    notes = "".join(
        f'<div class="note">message {i} is not trained: {html.escape(why)}</div>' for i, why in view.untrained
    ) + "".join(f'<div class="note">{html.escape(n)}</div>' for n in view.notes)
    return (
        f'<div class="note">{html.escape(view.title)}: {len(view.tokens)} tokens, {trained} trained</div>'
        f'<div class="view" data-title="{html.escape(view.title)}">{"".join(parts)}</div>{notes}'
    )


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

    head = (
        "token for token equal"
        if first is None
        else f"they part ways at token {first}: {len(left_marked)} token(s) differ on the left, "
        f"{len(right_marked)} on the right"
    )
    return (
        f'<div class="msg">{html.escape(head)}</div><div class="side"><div>'
        + to_html(
            aligned.left,
            highlight=left_marked,
            here=here_left,
            window=window(aligned.left, here_left),
            anchor=anchor,
            side="left",
        )
        + "</div><div>"
        + to_html(
            aligned.right,
            highlight=right_marked,
            here=right_first,
            window=window(aligned.right, right_first),
            side="right",
        )
        + "</div></div>"
    )


def html_page(title: str, body: str) -> str:
    legend = (
        '<div class="legend note"><span><span class="t">tok</span><span class="t">ens</span> token boundaries'
        '</span><span class="c">&lt;|control|&gt;</span> control token <span class="m">trained</span> '
        'assistant mask <span class="x">differs</span> <span class="ws">· ↵ →</span> space, newline, tab; '
        "hover a token for its id</div>"
    )
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>{legend}{body}</body></html>\n"
    )
