"""What a template's text hides from a reviewer: invisible characters (HCT-S006) and control tokens written with
look-alike letters (HCT-S007). Both read the text as transformers reads it, comments included, since a reviewer
reads those too. Each finding is (rule, character offset, message, construct, detail)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator
from functools import lru_cache
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


def char_names(chars: Iterable[str]) -> str:
    """`U+2063 INVISIBLE SEPARATOR, …`: each distinct character once, as a finding names it."""
    return ", ".join(dict.fromkeys(f"U+{ord(c):04X} {unicodedata.name(c, '?')}" for c in chars))


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
        names = char_names(run[:6])
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


FRAGMENT = re.compile(r"<[^<>\s]{1,62}>|\[[^\[\]\s]{1,62}\]")


@lru_cache(maxsize=1)
def _lookalikes() -> tuple[dict[int, str], dict[int, str]]:
    """From Unicode's confusables (UTS #39, as `confusable_homoglyphs` ships them): every character to one member
    of its class of look-alikes (an ASCII one where the class has one), for comparing; and each non-ASCII letter
    that looks like an ASCII letter to that letter, for saying what a token reads as."""
    from confusable_homoglyphs.confusables import confusables_data

    canonical: dict[int, str] = {}
    latin: dict[int, str] = {}
    for char, glyphs in confusables_data.items():
        if len(char) != 1:
            continue
        group = [char, *(g["c"] for g in glyphs if len(g["c"]) == 1)]
        ascii_members = sorted(c for c in group if c.isascii() and c.isprintable())
        if ascii_members:
            canonical[ord(char)] = ascii_members[0]
        letters = [c for c in ascii_members if c.isalpha()]
        if not char.isascii() and unicodedata.category(char).startswith("L") and letters:
            latin[ord(char)] = next((c for c in letters if c.islower() == char.islower()), letters[0])
    return canonical, latin


def skeleton(token: str) -> str:
    """What a token looks like, for comparing two tokens: compatibility forms folded (fullwidth `｜` → `|`), then
    each character mapped to its class of look-alikes in Unicode's confusables (UTS #39)."""
    return unicodedata.normalize("NFKC", token).translate(_lookalikes()[0])


def reads_as(token: str) -> str:
    """The token with each letter that imitates an ASCII letter written as that letter."""
    return unicodedata.normalize("NFKC", token).translate(_lookalikes()[1])


def _imitations(token: str) -> list[str]:
    """The non-ASCII letters of a token whose other letters are ASCII, that imitate an ASCII letter (the `е` of
    `<|im_еnd|>`). A token written in one other script (`<|пользователь|>`) has no ASCII letters and none."""
    text = unicodedata.normalize("NFKC", token)
    if not any(c.isascii() and c.isalpha() for c in text):
        return []
    return [c for c in text if not c.isascii() and ord(c) in _lookalikes()[1]]


def homoglyph_tokens(text: str) -> Iterator[Hit]:
    """Token-shaped runs (`<|im_end|>`, `[INST]`) that mix look-alike scripts, or look like another token of the
    template while being different characters."""
    seen: dict[str, str] = {}
    for match in FRAGMENT.finditer(text):
        token = match.group()
        imitations = _imitations(token)
        if imitations:
            names = char_names(imitations)
            yield (
                "HCT-S007",
                match.start(),
                f"the token {token!r} writes {names} among ASCII letters: it reads as {reads_as(token)!r} but "
                "tokenizes as other text",
                f"mixed:{token}",
                {"token": token, "looks_like": reads_as(token)},
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


_SCRIPTS = ("CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC")
_WORD = re.compile(r"[^\W\d]+")


def mixed_words(text: str) -> Iterator[Hit]:
    """Words that write a Cyrillic, Greek or Armenian letter that looks like a Latin one among Latin letters
    (`/nо_think` with a Cyrillic о): a switch or a name a reviewer reads as another, which only the attacker can
    type. Words in one script (a Russian system prompt) are not mixed."""
    for match in _WORD.finditer(text):
        word = match.group()
        if not any(c.isascii() and c.isalpha() for c in word):
            continue
        odd = [c for c in word if ord(c) in _lookalikes()[1] and unicodedata.name(c, "").startswith(_SCRIPTS)]
        if not odd:
            continue
        names = char_names(odd)
        yield (
            "HCT-S007",
            match.start(),
            f"the word {word!r} writes {names} among Latin letters: it reads as {reads_as(word)!r}, but a test of "
            "it matches only text typed with the same look-alike, and a reader sees the word it imitates",
            f"mixed-word:{word}",
            {"token": word, "looks_like": reads_as(word)},
        )
