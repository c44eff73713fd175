"""Token views in a terminal: ANSI colours on a terminal, plain text with markers otherwise."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable

from .tokens import Aligned, TokenView

_ANSI = {
    "a": "\x1b[48;5;236m",
    "b": "\x1b[48;5;239m",
    "control": "\x1b[1;38;5;215m",
    "trained": "\x1b[4;38;5;120m",
    "diff": "\x1b[48;5;52m",
    "reset": "\x1b[0m",
    "dim": "\x1b[2m",
}


def _visible(piece: str) -> str:
    return piece.replace(" ", "·").replace("\t", "→").replace("\n", "↵\n")


def to_terminal(
    view: TokenView,
    *,
    width: int | None = None,
    color: bool | None = None,
    ids: bool = False,
    highlight: Iterable[int] = (),
) -> str:
    """The view for a terminal: ANSI colours when `color` (default: stdout is a terminal), plain text otherwise.

    Colour: token boundaries as alternating backgrounds, control tokens bold orange, trained tokens underlined
    green. Plain: tokens separated by "|", control tokens in ⟦ ⟧, and under each line a row with ^ beneath the
    characters the mask trains. Whitespace is visible (· space, → tab, ↵ newline); `ids` adds each token's id."""
    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR") if color is None else color
    width = width or shutil.get_terminal_size((100, 24)).columns
    marked = set(highlight)
    out_lines: list[str] = []
    line: list[str] = []
    mask_line: list[str] = []
    used = 0

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
    legend = f"{view.title}: {len(view.tokens)} tokens, {trained} trained" + (
        "" if color else "  (| token boundary, ⟦ ⟧ control token, ^ trained, · space, ↵ newline)"
    )
    notes = [f"message {i} is not trained: {why}" for i, why in view.untrained] + view.notes
    return "\n".join([legend, *out_lines, *notes])


def aligned_terminal(aligned: Aligned, *, width: int | None = None, color: bool | None = None) -> str:
    """Both sides, each with the tokens that differ highlighted, and where they part ways."""
    first = aligned.first_difference
    left_marked = {t.index for tag, a, _ in aligned.rows if tag != "equal" for t in a}
    right_marked = {t.index for tag, _, b in aligned.rows if tag != "equal" for t in b}
    head = (
        "the two renderings are token for token equal"
        if first is None
        else f"they part ways at token {first} of {aligned.left.title}"
    )
    return "\n".join(
        [
            head,
            to_terminal(aligned.left, width=width, color=color, highlight=left_marked),
            "",
            to_terminal(aligned.right, width=width, color=color, highlight=right_marked),
        ]
    )
