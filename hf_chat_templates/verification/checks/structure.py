"""`structure`: the shape of each rendering. Nothing before the BOS the template writes, and BOS written where the
tokenizer starts plain text with it; every turn the template opens is closed (only the generation prompt's final turn
may stay open), and no turn end is written where no turn is open; the last assistant turn of a training rendering
with a stop token; no placeholder (`{system_message}`, `{{ tools }}`, `$SYSTEM`) written as text.

Which tokens open and close a turn is read from the template's own renderings, never from a list: a pair (O, C) is
two control tokens that, in a plain conversation (and one with a system message), alternate O … C, each O closed
before the next, with at most one message's content between them, O written at least twice in one of them. A stop
token closes a turn too (Harmony's last answer ends with `<|return|>`, the others with `<|end|>`). When no pair
holds, the turns are not judged: the result says so (info), and never guesses."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ...conversations.probes import Probe
from ...families.tokens import render_surviving
from ...template.analysis import reads_variable
from ...template.placeholders import placeholders_written, syntax_description
from ...template.syntax import template_literals
from ..context import VerifyContext
from ..results import CheckResult, Finding, around, verdict, visible

HINT = "close every turn the template opens with its end token, write BOS first, and fill or remove placeholders"
_PLAIN = [
    {"role": "user", "content": "Question qzs1u?"},
    {"role": "assistant", "content": "Answer qzs2a."},
    {"role": "user", "content": "Question qzs3u?"},
    {"role": "assistant", "content": "Answer qzs4a."},
]
_SYSTEM = {"role": "system", "content": "System qzs0s."}
_CONTENTS = ("qzs0s", "qzs1u", "qzs2a", "qzs3u", "qzs4a")


@dataclass(frozen=True)
class Pair:
    """A token that opens a turn and the one that closes it (a stop closes it too)."""

    opener: str
    closer: str


def _occurrences(text: str, tokens: Iterable[str]) -> list[tuple[int, str]]:
    """(position, token) of each token in `text`, the longest at a position, none inside another."""
    found = sorted(
        ((at, token) for token in set(tokens) if token for at in _positions(text, token)),
        key=lambda x: (x[0], -len(x[1])),
    )
    kept: list[tuple[int, str]] = []
    end = 0
    for at, token in found:
        if at >= end:
            kept.append((at, token))
            end = at + len(token)
    return kept


def _positions(text: str, token: str) -> Iterator[int]:
    at = text.find(token)
    while at >= 0:
        yield at
        at = text.find(token, at + len(token))


def spans(occurrences: list[tuple[int, str]], opener: str, closers: set[str]) -> list[tuple[int, int | None]]:
    """(where a turn opens, where it closes or None) for each `opener`, walking the tokens in order: a closer with
    no open turn closes nothing; a second opener before a closer leaves the first turn open."""
    found: list[tuple[int, int | None]] = []
    open_at: int | None = None
    for at, token in occurrences:
        if token == opener:
            if open_at is not None:
                found.append((open_at, None))
            open_at = at
        elif token in closers and open_at is not None:
            found.append((open_at, at))
            open_at = None
    if open_at is not None:
        found.append((open_at, None))
    return found


def _holds(text: str, pair: Pair, stops: set[str], *, tight: bool) -> bool | None:
    """Whether the pair opens and closes every turn of a reference rendering (None: the opener is not in it).
    `tight`: at most one message's content inside each turn."""
    occurrences = _occurrences(text, {pair.opener, pair.closer, *stops})
    turns = spans(occurrences, pair.opener, {pair.closer, *stops} - {pair.opener})
    if not turns:
        return None
    if any(end is None for _, end in turns):
        return False
    if not any(text.startswith(pair.closer, end) for _, end in turns if end is not None):
        return False
    if tight:
        return all(sum(c in text[start:end] for c in _CONTENTS) <= 1 for start, end in turns)
    return True


def infer_pairs(references: list[str], tokens: Iterable[str], stops: Iterable[str]) -> tuple[Pair, ...]:
    """The pairs that hold in every reference rendering that writes their opener, tight in the first (the plain
    conversation), with the opener written at least twice in one."""
    stop_set = set(stops)
    candidates = [t for t in dict.fromkeys(tokens) if t]
    pairs = []
    for opener in candidates:
        if max(text.count(opener) for text in references) < 2:  # a turn's opener: once per turn, not once
            continue
        for closer in candidates:
            if closer == opener:
                continue
            pair = Pair(opener, closer)
            verdicts = [_holds(text, pair, stop_set, tight=i == 0) for i, text in enumerate(references)]
            if verdicts[0] and all(v is not False for v in verdicts):
                pairs.append(pair)
    return tuple(pairs)


class _Structure:
    """What the rules read: the tokens, the inferred pairs, and each probe's rendering."""

    def __init__(self, ctx: VerifyContext) -> None:
        self.ctx = ctx
        bos = ctx.tokenizer.bos_token
        self.bos = bos if isinstance(bos, str) and bos else None
        self.stops = set(ctx.stop_tokens)
        # BOS opens the sequence, never a turn
        self.tokens = [t for t in ctx.control_tokens if t != self.bos]

    @cached_property
    def references(self) -> list[str] | None:
        plain, _ = render_surviving(self.ctx.renderer, [dict(m) for m in _PLAIN])
        system, _ = render_surviving(self.ctx.renderer, [dict(_SYSTEM), *(dict(m) for m in _PLAIN)])
        if not plain.ok:
            return None
        return [plain.text or "", *([system.text or ""] if system.ok else [])]

    @cached_property
    def pairs(self) -> tuple[Pair, ...]:
        if self.references is None:
            return ()
        return infer_pairs(self.references, self.tokens, self.stops)

    def rendered(self) -> Iterator[tuple[Probe, str]]:
        for probe in self.ctx.probes:
            r = self.ctx.rendered[probe.id]
            if r.ok and r.text:
                yield probe, r.text


def _own_text(probe: Probe) -> str:
    """What the conversation itself brings, as text: its messages and tools."""
    return json.dumps([probe.messages, probe.tools], ensure_ascii=False, default=str) + "".join(
        str(m.get("content")) for m in probe.messages
    )


def _where(ctx: VerifyContext, probe: Probe, pos: int, text: str = "") -> str:
    """`char N`, and the message there: the one whose rendering holds it (when renderings of shorter prefixes are
    prefixes), else the one whose content comes last before it."""
    message = ctx.message_at(probe, pos)
    if message is not None:
        return f"char {pos} (in message {message}'s part of the rendering, a {probe.messages[message]['role']} message)"
    seen = [(at, x.message) for x in probe.sentinels if x.message is not None and 0 <= (at := text.find(x.text)) < pos]
    if not seen:
        return f"char {pos}"
    _, before = max(seen)
    return f"char {pos} (after the content of message {before}, a {probe.messages[before]['role']} message)"


def text_before_bos(ctx: VerifyContext, s: _Structure) -> list[Finding]:
    """A template that writes BOS after other text: the model sees a sequence that does not start as trained."""
    bos = s.bos
    if bos is None or bos in s.stops or bos == ctx.tokenizer.eos_token:
        return []  # GPT-2's and Granite's BOS is the turn end too: later copies of it are not a BOS
    if not (reads_variable(ctx.template, "bos_token") or bos in template_literals(ctx.template)):
        return []
    seen: dict[str, Finding] = {}
    for probe, text in s.rendered():
        at = text.find(bos)
        if at > 0 and text[:at] not in seen:
            seen[text[:at]] = Finding(
                probe.id,
                f"probe {probe.id}: the template writes {visible(text[:at][:40])!r} before BOS {bos} at char {at}: "
                f"{around(text, at, ctx.control_tokens)}; the model sees a sequence that does not start with BOS",
                {"char_position": at, "token": bos, "before": text[:at][:200]},
                hint="write {{ bos_token }} first: move what comes before it (whitespace, a header) after it",
            )
    return list(seen.values())


def missing_bos(ctx: VerifyContext, s: _Structure) -> list[Finding]:
    """A warning when the tokenizer starts plain text with BOS (its post-processor) and the template never writes it:
    the ids a chat is trained and served on (apply_chat_template(tokenize=True), vLLM's chat) start without it."""
    bos = s.bos
    if bos is None or bos in s.stops or bos == ctx.tokenizer.eos_token:
        return []
    if reads_variable(ctx.template, "bos_token") or bos in template_literals(ctx.template):
        return []
    plain = list(ctx.tokenizer("qz")["input_ids"])
    first = next(iter(s.rendered()), None)
    if not plain or plain[0] != ctx.tokenizer.bos_token_id or first is None or bos in first[1]:
        return []
    probe, text = first
    return [
        Finding(
            probe.id,
            f"probe {probe.id}: the template never writes BOS {bos}, though the tokenizer starts plain text with it "
            f"(its post-processor adds it to tokenizer(text)): apply_chat_template(tokenize=True) and engines that "
            f"tokenize a chat without special tokens give ids that start {visible(text[:30])!r}, without {bos}; a "
            f"model pre-trained with {bos} first is trained and served chats without it",
            {"token": bos},
            severity="warning",
            hint="write {{ bos_token }} at the template's start (tokenize renderings with add_special_tokens=False)",
        )
    ]


def _completed(ctx: VerifyContext, probe: Probe) -> str | None:
    """A generation-prompt probe's conversation with the answer the model writes, as training renders it."""
    answer = {"role": "assistant", "content": "Answer qzs9a."}
    r = ctx.renderer.render([*probe.message_list(), answer], probe.tool_list())
    return r.text if r.ok else None


def _allowed(pair: Pair, index: int, completed: str | None, stops: set[str]) -> bool:
    """Whether the `index`-th turn `pair` opens, open in a generation prompt's rendering, is closed once the answer
    is written: the user's turn that the answer closes (GLM's `<|user|>` … `</think>`), or the answer's own."""
    if completed is None:
        return True  # not judged: the completed conversation does not render
    turns = spans(_occurrences(completed, {pair.opener, pair.closer, *stops}), pair.opener, {pair.closer, *stops})
    return index >= len(turns) or turns[index][1] is not None or index == len(turns) - 1


def unclosed_turns(ctx: VerifyContext, s: _Structure) -> list[Finding]:
    findings: list[Finding] = []
    for probe, text in s.rendered():
        if probe.continue_final_message:
            continue  # the prefill leaves the last turn open by design
        # The conversation completed with its answer, rendered only when a turn is found open (rarely)
        completed = functools.cache(lambda probe=probe: _completed(ctx, probe))
        own, reported = _own_text(probe), set()
        for pair in s.pairs:
            if pair.opener in own or pair.closer in own:
                continue
            closers = {pair.closer, *s.stops} - {pair.opener}
            turns = spans(_occurrences(text, {pair.opener, pair.closer, *s.stops}), pair.opener, closers)
            for index, (start, end) in enumerate(turns):
                if end is not None or start in reported:
                    continue
                if probe.add_generation_prompt and _allowed(pair, index, completed(), s.stops - {pair.opener}):
                    continue
                reported.add(start)
                nxt = text.find(pair.opener, start + len(pair.opener))
                until = f"before the next {pair.opener} at char {nxt}" if nxt >= 0 else "before the rendering ends"
                findings.append(
                    Finding(
                        probe.id,
                        f"probe {probe.id}: the turn opened with {pair.opener} at {_where(ctx, probe, start, text)} is "
                        f"never closed with {pair.closer} {until}: {around(text, start, ctx.control_tokens)}",
                        {"char_position": start, "opener": pair.opener, "closer": pair.closer},
                        hint=f"write {pair.closer} at the end of that turn in every branch (with tools, with a system "
                        "message): the model reads one turn run into the next",
                    )
                )
    return findings


def _turn_ends(s: _Structure) -> dict[str, set[str]]:
    """Each pair's closer that ends turns, with the openers it closes: in every reference rendering each of its
    copies closes a turn one of those openers opened, and only whitespace comes between it and the next opener, a
    stop or the end (ChatML's `<|im_end|>`, Llama 3's `<|eot_id|>`; not DeepSeek's end of sentence, which a
    `<｜User｜>` follows, nor a header's end that content follows)."""
    groups: dict[str, set[str]] = {}
    for pair in s.pairs:
        groups.setdefault(pair.closer, set()).add(pair.opener)
    found = {}
    for closer, openers in groups.items():
        follow = (*openers, *s.stops)
        if all(
            _orphans(text, closer, openers, s.stops) == []
            and all(
                not (after := text[at + len(closer) :].lstrip()) or after.startswith(follow)
                for at in _positions(text, closer)
            )
            for text in s.references or []
        ):
            found[closer] = openers
    return found


def _orphans(text: str, closer: str, openers: set[str], stops: set[str]) -> list[int]:
    """Where `closer` is written with no turn open: no opener since the last closer or stop."""
    found, open_ = [], False
    for at, token in _occurrences(text, {closer, *openers, *stops}):
        if token in openers:
            open_ = True
        elif token == closer:
            if not open_:
                found.append(at)
            open_ = False
        elif token in stops:
            open_ = False
    return found


def _drops_a_message(probe: Probe, text: str) -> bool:
    """Whether the rendering leaves out a whole message: none of its strings is written."""
    written: dict[int, bool] = {}
    for x in probe.sentinels:
        if x.message is not None:
            written[x.message] = written.get(x.message, False) or x.text in text
    return not all(written.values())


def unopened_turns(ctx: VerifyContext, s: _Structure) -> list[Finding]:
    """A turn end written where no turn is open (tool instructions written after BOS and closed with
    `<|im_end|>`, no `<|im_start|>system` before them): the model is shown a turn end where no turn began."""
    findings: list[Finding] = []
    ends = _turn_ends(s)
    for probe, text in s.rendered():
        if _drops_a_message(probe, text):
            continue  # its neighbours are joined (a tool result skipped by a template without tools): nothing-dropped
        own = _own_text(probe)
        for closer, openers in ends.items():
            if closer in own or any(o in own for o in openers):
                continue
            orphans = _orphans(text, closer, openers, s.stops - {closer})
            if not orphans:
                continue
            at, opener = orphans[0], sorted(openers)[0]
            findings.append(
                Finding(
                    probe.id,
                    f"probe {probe.id}: {closer} at {_where(ctx, probe, at, text)} closes a turn that no "
                    f"{' or '.join(sorted(openers))} opened: {around(text, at, ctx.control_tokens)}; the model is "
                    "shown a turn end where no turn began",
                    {"char_position": at, "token": closer, "openers": sorted(openers)},
                    hint=f"open that turn with {opener} and its role before the text {closer} closes (a system "
                    f"turn for tool instructions), or do not write {closer} there",
                )
            )
    return findings


def last_turn_stop(ctx: VerifyContext, s: _Structure) -> list[Finding]:
    """A training rendering's last assistant turn must end with a stop token: the model learns to stop there."""
    if not s.stops or not ctx.tokens.turn_end:
        return []  # stop-token-registered and completion-matches-content report these
    findings = []
    for probe, text in s.rendered():
        if probe.add_generation_prompt or probe.continue_final_message or not probe.ends_with_assistant:
            continue
        last = len(probe.messages) - 1
        ends = [text.rfind(x.text) + len(x.text) for x in probe.sentinels if x.message == last and x.text in text]
        if not ends:
            continue  # the turn's content is not rendered: nothing-dropped reports it
        end = max(ends)
        if not any(stop in text[end:] for stop in s.stops):
            findings.append(
                Finding(
                    probe.id,
                    f"probe {probe.id}: the last assistant turn (message {last}) is not closed with a stop token "
                    f"({' '.join(ctx.stop_tokens)}), which closes the earlier ones: the rendering ends "
                    f"{visible(text[end:][-40:])!r} after it ({around(text, end, ctx.control_tokens)}); the model is "
                    "never trained to stop after its last answer",
                    {"char_position": end, "message_index": last},
                    hint=f"write {ctx.stop_tokens[0]} after every assistant turn, the last one too",
                )
            )
    return findings


def placeholders(ctx: VerifyContext, s: _Structure) -> list[Finding]:
    """A placeholder written as text: a warning, the model reads the placeholder, never the value it names. One of
    several fields laid out by markup alone (`<{start_tag}={function_name}>{parameters}{end_tag}`) describes a
    syntax the model is to read as written: info."""
    seen: dict[str, Finding] = {}
    for probe, text in s.rendered():
        for at, placeholder in placeholders_written(ctx.template, text, _own_text(probe)):
            if placeholder in seen:
                continue
            where = f"{_where(ctx, probe, at, text)}: {around(text, at, ctx.control_tokens)}"
            syntax = syntax_description(text, at)
            if syntax is not None:
                seen[placeholder] = Finding(
                    probe.id,
                    f"probe {probe.id}: the template writes the placeholder {placeholder} as text at {where}; it is "
                    f"one of the fields of `{visible(syntax)}`, laid out by markup alone: a format description, "
                    "which the model reads as written",
                    {"char_position": at, "placeholder": placeholder, "syntax": syntax},
                    severity="info",
                    cause="template",
                    hint="nothing to fix when the fields describe a syntax; write the value where one is meant",
                )
                continue
            seen[placeholder] = Finding(
                probe.id,
                f"probe {probe.id}: the template writes the placeholder {placeholder} as text at {where}; the model "
                "reads the placeholder itself, never the value it names",
                {"char_position": at, "placeholder": placeholder},
                severity="warning",
                hint="write the value ({{ system_message }} outside a string literal) or remove the placeholder",
            )
    return list(seen.values())


def structure(ctx: VerifyContext) -> CheckResult:
    s = _Structure(ctx)
    findings = [
        *text_before_bos(ctx, s),
        *missing_bos(ctx, s),
        *unclosed_turns(ctx, s),
        *unopened_turns(ctx, s),
        *last_turn_stop(ctx, s),
        *placeholders(ctx, s),
    ]
    if s.references is None:
        undecided = "a plain conversation does not render"
    elif not s.pairs:
        undecided = "no pair of tokens opens and closes each turn of a plain conversation"
    else:
        undecided = ""
    # the pairs a turn ends with a stop first: `<|im_start|>…<|im_end|>` says more than `<|im_start|>…<|im_middle|>`
    shown = sorted(s.pairs, key=lambda p: p.closer not in s.stops)
    pairs = " ".join(f"{p.opener}…{p.closer}" for p in shown[:3]) + (f" +{len(shown) - 3}" if len(shown) > 3 else "")
    if not findings and undecided:
        return CheckResult("structure", "info", f"turns not decided ({undecided}); nothing before BOS, no placeholder")
    result = verdict(
        "structure",
        findings,
        f"every turn closed ({pairs}), no turn end without its turn, nothing before BOS, no placeholder",
        HINT,
    )
    detail: dict[str, Any] = {**result.detail, "pairs": [[p.opener, p.closer] for p in s.pairs]}
    if undecided:
        detail["undecided"] = undecided
    return CheckResult(result.id, result.status, result.message, result.probe, detail, result.hint, result.cause)
