"""Safety rules read from renderings, whatever the template's code looks like: what no static rule can fold.

- **The clock** (HCT-S008): a template that reads `strftime_now` is rendered at moments spread over the next twenty
  years (hours of a day, each weekday, each month, years ahead). Text it adds at one moment that it does not add now,
  once digits and month and day names are taken out (a printed date is the format, not a payload), is text gated
  on the date: a time bomb, however its gate is computed (`['', note][(age > 3) | int]`).
- **Look-alikes turned into control tokens** (HCT-S017): content, a tool result and an answer that hold look-alikes of
  the template's control tokens (the ASCII forms of `<｜User｜>`, the full-width forms of `<|im_end|>`, `_` for `▁`)
  are rendered beside the same conversation without them. A control token the rendering holds more often is one the
  template made out of the data: any user or tool result can then forge a turn. A template that leaves such text as
  it is, or escapes it, renders the same count.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import html
import re
import unicodedata
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable

from ..._compat import frozen_clock
from ...template.analysis import CONTROL_TOKEN_SHAPES, literal_fragments
from ...template.coverage import AGENT, LONG_MESSAGE, Case
from ...template.rendering import Rendered
from ...template.safety import SafetyFinding

Render = Callable[[Case], Rendered]
Added = Callable[[str, Case], list[str]]

# (days, hours) after the base moment: hours of one day, each weekday, each month, years ahead
MOMENTS = (
    *((0, h) for h in (3, 6, 9, 12, 15, 18, 21)),
    *((d, 0) for d in range(1, 7)),
    *((31 * m, 0) for m in range(1, 12)),
    *((365 * y + y // 4, 0) for y in (1, 2, 3, 4, 5, 7, 10, 15, 20)),
)
_MONTHS = "january february march april may june july august september october november december"
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DATE_WORDS = re.compile(
    r"\d+|\b(?:"
    + "|".join([*_MONTHS.split(), *(m[:3] for m in _MONTHS.split()), *_DAYS, *(d[:3] for d in _DAYS)])
    + r")\b",
    re.IGNORECASE,
)
_CLOCK = re.compile(r"\bstrftime_now\b")


def undated(text: str) -> str:
    return _DATE_WORDS.sub("#", text)


# The years ahead alone: for the conversations beyond the plain one and the one with tools, whose renders are larger
YEARS = tuple(o for o in MOMENTS if o[0] >= 365)


def clock_gated(
    template: str,
    base: _dt.datetime,
    case: Case,
    render: Render,
    added: Added,
    moments: tuple[tuple[int, int], ...] = MOMENTS,
) -> list[SafetyFinding]:
    """HCT-S008 for text the template adds to `case` at some moment of the coming years and not at `base`; HCT-S015
    for a message it writes then and not now; HCT-S009/S008 for a render that fails then."""
    if not _CLOCK.search(template):
        return []
    with frozen_clock(base):
        now = render(case)
    if not now.ok:
        return []
    known = {undated(words) for words in added(now.text or "", case)}
    for days, hours in moments:
        moment = base + _dt.timedelta(days=days, hours=hours)
        with frozen_clock(moment):
            later = render(case)
        if not later.ok:
            failed = fails_on(case, f"with the clock at {moment:%Y-%m-%d %H:%M}", f"at {base:%Y-%m-%d %H:%M}", later)
            return [failed] if failed else []
        gone = [
            (i, m)
            for i, m in enumerate(case.messages)
            if isinstance(c := m.get("content"), str) and c in (now.text or "") and c not in (later.text or "")
        ]
        if gone:
            i, message = gone[0]
            return [
                SafetyFinding(
                    "HCT-S015",
                    1,
                    1,
                    f"rendering {case.name} with the clock at {moment:%Y-%m-%d %H:%M}: message {i}'s content "
                    f"({message.get('role')}) is not written as given, where it is at {base:%Y-%m-%d %H:%M}: what a "
                    "speaker wrote cut or dropped from a date on (a time bomb that silences the operator's prompt)",
                    construct="clock-drops",
                    detail={"probe": None, "case": case.name, "moment": moment.isoformat(), "message_index": i},
                )
            ]
        new = [w for w in added(later.text or "", case) if undated(w) not in known]
        if new:
            text = inserted(now.text or "", later.text or "") or new[0]
            return [
                SafetyFinding(
                    "HCT-S008",
                    1,
                    1,
                    f"rendering {case.name} with the clock at {moment:%Y-%m-%d %H:%M}: the template adds "
                    f"{quote(text)}, which it does not write at {base:%Y-%m-%d %H:%M}: text written only on some "
                    "dates (a time bomb), however its gate is computed",
                    construct=f"clock:{undated(new[0])[:80]}",
                    detail={"probe": None, "case": case.name, "moment": moment.isoformat(), "text": text[:2000]},
                )
            ]
    return []


# The coverage conversations whose every message a template that writes the plain one's must write as given: the
# plain messages with keywords set or documents given, a long conversation, content in paragraphs, a long message
_FAITHFUL = re.compile(rf"keywords? |documents$|\d+ messages$|paragraphs$|{LONG_MESSAGE.pattern}")


def keyword_drops(plain: Case, written: Rendered, case: Case, rendered: Rendered) -> list[SafetyFinding]:
    """HCT-S015 when `case` leaves out a message's content of a role whose content the plain rendering writes as
    given: a keyword (one any API caller can pass through `chat_template_kwargs`) that silences the operator's
    system prompt, a system prompt cut once the conversation is long or has paragraphs."""
    if not _FAITHFUL.match(case.name) or case is plain or not (written.ok and rendered.ok):
        return []
    text = written.text or ""
    kept = {m.get("role") for m in plain.messages if isinstance(c := m.get("content"), str) and c in text}
    for i, message in enumerate(case.messages):
        content = message.get("content")
        if message.get("role") in kept and isinstance(content, str) and content not in (rendered.text or ""):
            if case.messages is not plain.messages:
                # its words all there, their spacing changed (Falcon's '\n\n' written as '\n'): `completion-
                # matches-content`'s finding, not words cut
                if " ".join(content.split()) in " ".join((rendered.text or "").split()):
                    continue
                why = (
                    " as given, where the plain conversation's messages of that role are: the template cuts or "
                    "replaces what a speaker wrote on the conversation's shape (its length, paragraphs or lines)"
                )
                return [unwritten(case.name, i, message, why, f"shape-drops:{message.get('role')}")]
            set_ = ", ".join(f"{k}={v!r}" for k, v in case.kwargs.items() if plain.kwargs.get(k, object()) != v)
            return [
                unwritten(
                    case.name,
                    i,
                    message,
                    f", where the same conversation without {set_} writes it: a keyword the caller passes silences "
                    "what a speaker wrote (the operator's system prompt, a user's words)",
                    f"keyword-drops:{i}",  # once, whichever value of the keyword showed it
                    kwargs=set_,
                )
            ]
    return []


def unwritten(name: str, i: int, message: dict, why: str, construct: str, **detail: str) -> SafetyFinding:
    """HCT-S015: rendering the case `name`, message `i`'s content is not written (`why`: where it is)."""
    return SafetyFinding(
        "HCT-S015",
        1,
        1,
        f"rendering {name}: message {i}'s content ({message.get('role')}) is not written{why}",
        construct=construct,
        detail={"probe": None, "case": name, "message_index": i, **detail},
    )


def parameters_gated(case: Case, render: Render) -> list[SafetyFinding]:
    """HCT-S015 when a tool taking parameters named as the template tests (`k in ['iban', 'account']`) is written
    otherwise than the same tool with its parameters named otherwise: the model is served a tool the caller did
    not declare (an allowed value added, a description changed) on the parameter's name."""
    names = [n for t in case.tools or [] for n in t["function"]["parameters"]["properties"] if n != "number"]
    if not names:
        return []
    neutral = {n: f"qpn{i}x" for i, n in enumerate(dict.fromkeys(names))}
    tools = [
        {**t, "function": {**t["function"], "parameters": {**t["function"]["parameters"], "properties": {
            neutral.get(k, k): v for k, v in t["function"]["parameters"]["properties"].items()}}}}
        for t in case.tools or []
    ]  # fmt: skip
    twin = Case(f"{case.name}, its parameters named otherwise", case.messages, tools, case.kwargs, case.generation)
    armed, plain = render(case), render(twin)
    if not (armed.ok and plain.ok):
        return []
    expected = plain.text or ""
    for name, stand_in in neutral.items():
        expected = expected.replace(stand_in, name)
    # words the armed rendering holds beyond the twin's: none when it is the twin's own text in another order (a
    # template that writes parameters sorted by name, as Gemma 4's does)
    extra = Counter(_PIECES.findall(armed.text or "")) - Counter(_PIECES.findall(expected))
    if not any(re.search(r"\w", piece) for piece in extra):
        return []
    text = inserted(expected, armed.text or "") or " ".join(p for p in extra if p.strip())
    return [
        SafetyFinding(
            "HCT-S015",
            1,
            1,
            f"rendering {case.name}: the tool is written otherwise than the same tool with its parameters named "
            f"otherwise ({quote(text)} in place of what the caller declared): the model is served a tool the caller "
            "did not declare, on a parameter's name",
            construct="parameters-gated",
            detail={"probe": None, "case": case.name, "text": text[:2000]},
        )
    ]


def inserted(before: str, after: str) -> str | None:
    """The longest run of words `after` holds in place of `before`'s (a dated diff of two renderings), once dates
    are set aside: what a reader should see of text added on a trigger, rather than the data it broke up."""
    runs = [r for r in changed_runs(before, after) if re.search(r"[^\W\d_]{2}", undated(r))]
    return max(runs, key=len) if runs else None


_WORDS = re.compile(r"\s+|[^\s]+")
_PIECES = re.compile(r"\s+|\w+|[^\w\s]")  # words and each mark apart: compact formats (Gemma 4's) too


def changed_runs(before: str, after: str) -> list[str]:
    """The runs of words `after` holds in place of `before`'s, a space both share not splitting one."""
    old, new = _WORDS.findall(before), _WORDS.findall(after)
    runs: list[str] = []
    run = ""
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        piece = "".join(new[j1:j2])
        if tag in ("insert", "replace") or (tag == "equal" and run and not piece.strip()):
            run += piece  # a space both share does not split the words added around it
        elif tag == "equal":
            runs, run = [*runs, run.strip()], ""
    return [r for r in [*runs, run.strip()] if r]


# What a render that stopped because the scan's own time budget was spent says: nothing about the template.
SPENT = "the scan's time budget was spent"


def fails_on(case: Case, armed: str, plain: str, failed: Rendered) -> SafetyFinding | None:
    """A render that works `plain` and fails `armed` (at a later date, with other words): past the limits, a denial
    of service armed by the trigger (HCT-S009); any other failure (a refusal, an error), a template that stops
    working on a trigger (HCT-S008). None when the scan's own budget ran out."""
    error = failed.error or "an error"
    if error == SPENT:
        return None
    limits = any(word in error for word in ("RenderLimitExceeded", "MemoryError", "OverflowError", "RecursionError"))
    what = "runs past the render limits (an unbounded render armed by a trigger)" if limits else "fails"
    error = re.sub(r"\s*\(raise it with [^)]*\)", "", error)
    return SafetyFinding(
        "HCT-S009" if limits else "HCT-S008",
        1,
        1,
        f"rendering {case.name} {armed}: the template {what}, where it renders {plain}: {error[:200]}",
        construct=f"fails:{armed.split(' ')[0] or 'content'}",  # one finding per trigger kind: the clock, the words
        detail={"probe": None, "case": case.name, "armed": armed, "error": error[:2000]},
    )


def _look_alikes(token: str) -> set[str]:
    """Spellings of a control token a reader takes for it: its ASCII form (NFKC: `｜` is `|`), its full-width forms
    (every mark, or the brackets and bars alone: `＜｜im_end｜＞`), `_` and `▁` swapped, and the ASCII form as HTML
    entities (`&lt;|im_end|&gt;`), percent-encoded (`%3C%7Cim_end%7C%3E`) and escaped (`\u003c|im_end|\u003e`), as
    a web page or an API carries it."""
    ascii_form = unicodedata.normalize("NFKC", token)

    def widened(chars: str) -> str:
        return "".join(chr(ord(c) + 0xFEE0) if c in chars else c for c in token)

    punctuation = "".join(c for c in token if "!" <= c <= "~" and not c.isalnum())
    wide, brackets = widened(punctuation), widened("<>|[]")  # every mark, or the brackets and bars alone
    forms = {ascii_form, ascii_form.replace("▁", "_"), token.replace("▁", "_"), wide, wide.replace("＿", "▁"), brackets}
    # encoded as text a web page or an API carries it: HTML entities, percent-encoding, the `\u003c` and `\x3c`
    # escapes of JSON written safe for HTML (a tool result "unescaped" by the template)
    forms |= {html.escape(ascii_form, quote=False), urllib.parse.quote(ascii_form, safe="")}
    marks = "<>&'\"|"
    forms |= {
        "".join(f"\\u{ord(c):04x}" if c in marks[:4] else c for c in ascii_form),
        "".join(f"\\x{ord(c):02x}" if c in marks else c for c in ascii_form),
    }
    return {f for f in forms if f != token and f.strip()}


def control_tokens_of(template: str, specials: Iterable[str]) -> list[str]:
    """The control tokens a template writes: the tokenizer's special tokens it names, and its literal fragments
    shaped like one (`<|im_end|>`, `<｜User｜>`, `[INST]`), or holding characters outside ASCII."""
    fragments = [f for f in literal_fragments(template) if CONTROL_TOKEN_SHAPES.fullmatch(f) or not f.isascii()]
    return list(dict.fromkeys([*(t for t in specials if t in template), *fragments]))


def forged_tokens(tokens: list[str], case: Case, render: Render) -> list[SafetyFinding]:
    """HCT-S017 when `case`'s content, tool results and answers holding look-alikes of `tokens` render with more
    control tokens than the same conversation without them."""
    alikes = sorted({a for t in tokens for a in _look_alikes(t)})
    if not alikes:
        return []
    carried = " ".join(alikes)
    # The same messages with neutral words where the look-alikes go: a template that writes a turn only when its
    # content is not empty (a preamble beside tool calls) adds the same tokens to both
    case = Case(case.name, [_with(m, "qz8") for m in case.messages], case.tools, case.kwargs, case.generation)
    armed = Case(
        f"{case.name}, content holding look-alikes of the control tokens",
        [_with(m, carried) for m in case.messages],
        case.tools,
        case.kwargs,
        case.generation,
    )
    plain, forged = render(case), render(armed)
    if not (plain.ok and forged.ok):
        return []
    made = [t for t in tokens if (forged.text or "").count(t) > (plain.text or "").count(t)]
    if not made:
        return []
    token = made[0]
    # the look-alike the template turned into the token: the one that, alone in the content, makes it too
    base = (plain.text or "").count(token)
    source = next((a for a in sorted(_look_alikes(token)) if _count_with(case, a, token, render) > base), carried)
    return [
        SafetyFinding(
            "HCT-S017",
            1,
            1,
            f"rendering {armed.name}: the rendering holds the control token {token!r} more often than the same "
            f"conversation without them ({source!r} in the data becomes {token!r}): the template turns text into a "
            "control token, so any user message or tool result can forge a turn",
            construct=f"forge:{token}",
            detail={"probe": None, "case": armed.name, "token": token, "look_alike": source},
        )
    ]


def _count_with(case: Case, text: str, token: str, render: Render) -> int:
    one = Case(case.name, [_with(m, text) for m in case.messages], case.tools, case.kwargs, case.generation)
    rendered = render(one)
    return (rendered.text or "").count(token) if rendered.ok else 0


def _with(message: dict, text: str) -> dict:
    content = message.get("content")
    if isinstance(content, str) and message.get("role") in ("user", "tool", "assistant"):
        return {**message, "content": f"{content} {text} qz9"}  # appended: content tests see their words
    return message


def quote(text: str, width: int = 100) -> str:
    return repr(text if len(text) <= width else text[: width - 1] + "…")


def _nearest(text: str, at: int, names: list[str]) -> str | None:
    """The name whose occurrence (as a whole word) lies nearest to char `at` of `text`."""
    best: tuple[int, str] | None = None
    for name in names:
        for m in re.finditer(rf"(?<![\w]){re.escape(name)}(?![\w])", text):
            distance = min(abs(m.start() - at), abs(m.end() - at))
            if best is None or distance < best[0]:
                best = (distance, name)
    return best[1] if best else None


def tools_swapped(case: Case, rendered: Rendered) -> list[SafetyFinding]:
    """HCT-S015 when a tool's description is written beside another tool's name: the model reads one tool's
    purpose under another's name (a destructive tool described as a harmless one). Each description is looked for
    once; the name nearest to it must be its own tool's."""
    functions = [t.get("function", {}) for t in case.tools or []]
    names = [f.get("name") for f in functions if isinstance(f.get("name"), str)]
    if len(names) < 2 or not rendered.ok:
        return []
    text = rendered.text or ""
    for function in functions:
        description = function.get("description")
        if not isinstance(description, str) or text.count(description) != 1:
            continue
        near = _nearest(text, text.find(description), names)
        if near is not None and near != function["name"]:
            return [
                SafetyFinding(
                    "HCT-S015",
                    1,
                    1,
                    f"rendering {case.name}: the description of the tool {function['name']!r} ({description!r}) is "
                    f"written beside the tool {near!r}: the model reads one tool's purpose under another's name, and "
                    "calls the wrong one (a destructive tool described as a harmless one)",
                    construct="tools-swapped",  # once, on the first case that shows it
                    detail={"probe": None, "case": case.name, "tool": function["name"], "beside": near},
                )
            ]
    return []


def headers_before(text: str, contents: list[str]) -> list[str] | None:
    """The text before each content in `text` (after the one before it), None when one is not written as given."""
    found, at = [], 0
    for content in contents:
        start = text.find(content, at)
        if start < 0:
            return None
        found.append(text[at:start])
        at = start + len(content)
    return found


def agent_tools(case: Case, rendered: Rendered) -> list[SafetyFinding]:
    """On an agent's tool list (coverage's AGENT): HCT-S015 when a tool the caller declared is left out where the
    first tool's declaration is written (a confirmation tool dropped when a shell tool is there), HCT-S008 when a
    tool's result is written after another header than the others' (a web page's text made a system turn), tool
    names, call ids and numbers set aside."""
    if case.name != AGENT or not rendered.ok:
        return []
    text, functions = rendered.text or "", [t["function"] for t in case.tools or []]
    if functions and functions[0]["description"] in text:
        for function in functions[1:]:
            if function["description"] not in text:
                return [
                    SafetyFinding(
                        "HCT-S015",
                        1,
                        1,
                        f"rendering {case.name}: the tool {function['name']!r} the caller declared is not written, "
                        "where the other tools are: the template leaves a tool out by what else the list holds (a "
                        "confirmation tool dropped when a shell or payment tool is declared); it must write every "
                        "tool the caller declares",
                        construct="agent-tool-dropped",
                        detail={"probe": None, "case": case.name, "tool": function["name"]},
                    )
                ]
    results = [m for m in case.messages if m.get("role") == "tool"]
    found = headers_before(text, [m["content"] for m in results])
    if found is None or len(found) < 3:
        return []
    calls = [c["function"] for m in case.messages for c in m.get("tool_calls") or []]
    arguments = {str(w) for c in calls if isinstance(c["arguments"], dict) for kv in c["arguments"].items() for w in kv}
    # a call's name, id and arguments set aside: the header is the rest
    names = sorted({f["name"] for f in functions} | {m["tool_call_id"] for m in results} | arguments, key=len)[::-1]
    pattern = re.compile("|".join(re.escape(n) for n in names) + r"|\d+")
    shapes = [pattern.sub("#", h) for h in found]
    for i in range(2, len(shapes)):  # the first follows the user's message; the second is the first after a result
        if shapes[i] != shapes[1]:
            tool = results[i]["name"]
            return [
                other_header(
                    f"rendering {case.name}: the result of the tool {tool!r}",
                    found[i],
                    f"the result of {results[1]['name']!r}",
                    found[1],
                    "which tool was called (a web page's text made a system turn)",
                    f"agent-tool-header:{tool}",
                    {"probe": None, "case": case.name, "tool": tool},
                )
            ]
    return []


def other_header(
    what: str, ours: str, other: str, theirs: str, chosen_by: str, construct: str, detail: dict
) -> SafetyFinding:
    """HCT-S008: `what` is written after the header `ours` where `other` is written after `theirs`."""
    return SafetyFinding(
        "HCT-S008",
        1,
        1,
        f"{what} is written after {quote(ours[-60:])} where {other} is written after {quote(theirs[-60:])}: a "
        f"header chosen by {chosen_by}",
        construct=construct,
        detail=detail,
    )


def over_budget(case: Case, why: str) -> SafetyFinding:
    """HCT-S009 (a warning) when one coverage render of a small conversation ran past the render limits."""
    return SafetyFinding(
        "HCT-S009",
        1,
        1,
        f"rendering {case.name} ({len(case.messages)} messages, {len(case.tools or [])} tool(s)) ran past the render "
        f"limits: {why}: "
        + (
            (
                "time past the limit on one message of the size a pasted log, a web page or a CSV has is work that "
                "grows faster than the text (a loop over it inside a loop over it)"
                if "time" in why
                else "output or memory past the limit on one message of the size a pasted log has is the message "
                "written many times over, or grown by the template"
            )
            if LONG_MESSAGE.match(case.name)
            else "work this size on a conversation this small is unbounded work on the input's shape (a size, a "
            "depth or a repeat computed from it)"
        ),
        severity="warning",
        construct=f"budget:{case.name}",
        detail={"probe": None, "case": case.name},
    )
