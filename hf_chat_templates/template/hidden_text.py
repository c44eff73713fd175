"""What a template's text hides from a reviewer: invisible characters (HCT-S006) and control tokens written with
look-alike letters (HCT-S007). Both read the text as transformers reads it, comments included, since a reviewer
reads those too. Each finding is (rule, character offset, message, construct, detail)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Any

Hit = tuple[str, int, str, str, dict[str, Any]]

BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u180e\u00ad")
_TAGS = range(0xE0000, 0xE0080)
_SUPPLEMENTARY_SELECTORS = range(0xE0100, 0xE01F0)
_BLACK_FLAG = "\U0001f3f4"  # the base of emoji tag sequences (England's flag: 🏴 + tag letters + U+E007F)


def _kind(text: str, i: int) -> str | None:
    """What the character at `i` is, when it is hidden: None for a visible one, or one a script needs there."""
    char, code = text[i], ord(text[i])
    if char in BIDI:
        return "bidirectional control"
    if code in _TAGS:
        j = i
        while j > 0 and ord(text[j - 1]) in _TAGS:
            j -= 1
        return None if j > 0 and text[j - 1] == _BLACK_FLAG else "tag character"
    if code in _SUPPLEMENTARY_SELECTORS:
        return "variation selector"
    if char in ZERO_WIDTH:
        if char in "\u200c\u200d" and 0 < i < len(text) - 1 and _joinable(text[i - 1]) and _joinable(text[i + 1]):
            return None  # ZWJ in emoji sequences, ZWNJ in Persian and Indic words
        return "zero-width character"
    if unicodedata.category(char) == "Cf" and char not in "\u0600\u0601\u0602\u0603\u06dd":
        return "invisible format character"
    return None


def _joinable(char: str) -> bool:
    return not char.isascii() and unicodedata.category(char)[0] in "LMS"


def hidden_unicode(text: str) -> Iterator[Hit]:
    """One hit per run of hidden characters: which, where, and what tag characters spell."""
    i = 0
    while i < len(text):
        kind = _kind(text, i)
        if kind is None:
            i += 1
            continue
        j = i
        while j < len(text) and _kind(text, j) is not None:
            j += 1
        run = text[i:j]
        names = ", ".join(dict.fromkeys(f"U+{ord(c):04X} {unicodedata.name(c, '?')}" for c in run[:6]))
        spelled = "".join(chr(ord(c) - 0xE0000) for c in run if ord(c) in _TAGS and 0x20 <= ord(c) - 0xE0000 < 0x7F)
        says = f", spelling {spelled!r} to a model that reads them" if spelled else ""
        yield (
            "HCT-S006",
            i,
            f"{len(run)} hidden {kind}{'s' if len(run) > 1 else ''} ({names}){says}: invisible when the "
            "template is reviewed, yet part of its text",
            f"{kind}:{run}",
            {"characters": [f"U+{ord(c):04X}" for c in run[:32]], "hidden_text": spelled or None},
        )
        i = j


# Letters of other scripts that look like Latin ones (Unicode's confusables, the common subset).
CONFUSABLE = str.maketrans(
    "АВЕЗІЈКМНОРСТУХаеіјорсуххԁɡѕһԛԝΑΒΕΖΗΙΚΜΝΟΡΤΥΧαεικνορτυχ",
    "ABE3IJKMHOPCTYXaeijopcyxxdgshqwABEZHIKMNOPTYXaeikvoptux",
)
FRAGMENT = re.compile(r"<[^<>\s]{1,62}>|\[[^\[\]\s]{1,62}\]")


def skeleton(token: str) -> str:
    """What a token looks like: compatibility forms folded (fullwidth `｜` → `|`), look-alike letters mapped."""
    return unicodedata.normalize("NFKC", token).translate(CONFUSABLE)


def _scripts(token: str) -> set[str]:
    found = set()
    for char in token:
        if unicodedata.category(char).startswith("L"):
            found.add(unicodedata.name(char, "UNKNOWN").split(" ")[0])
    return found & {"LATIN", "CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE"}


def homoglyph_tokens(text: str) -> Iterator[Hit]:
    """Token-shaped runs (`<|im_end|>`, `[INST]`) that mix look-alike scripts, or look like another token of the
    template while being different characters."""
    seen: dict[str, str] = {}
    for match in FRAGMENT.finditer(text):
        token = match.group()
        scripts = _scripts(token)
        if len(scripts) > 1 and skeleton(token) != token:
            yield (
                "HCT-S007",
                match.start(),
                f"the token {token!r} mixes {' and '.join(sorted(scripts)).lower()} letters: it reads as "
                f"{skeleton(token)!r} but tokenizes as other text",
                f"mixed:{token}",
                {"token": token, "looks_like": skeleton(token)},
            )
            continue
        other = seen.setdefault(skeleton(token), token)
        if other != token:
            yield (
                "HCT-S007",
                match.start(),
                f"the token {token!r} looks like {other!r}, written elsewhere in the template, but is other "
                "characters: one of them is not the control token it seems",
                f"twin:{token}",
                {"token": token, "looks_like": other},
            )
