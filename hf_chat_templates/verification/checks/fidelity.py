"""What the model sees is what the data said: strings as their text, not escaped or encoded again; structured values
as the format requires; tool results linked to their calls.

Every published way of getting this wrong renders without an error and keeps each sentinel, so `renders` and
`nothing-dropped` pass: a string tool result written with `| tojson` (Llama 3.1), JSON-string arguments encoded
again, text parts printed as a list, Python's `True`/`None` in JSON, a literal backslash-n, call ids rewritten at
the call but not at its result (Kimi-K2). The `values-` probes carry each case; the literal backslash-n is looked
for in every probe whose data has no backslash and no newline.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ...conversations.probes import Probe
from ...families.tokens import with_empty_content
from ..call_differences import differences
from ..call_syntax import Reading, Unreadable
from ..content_none import content_none_effect
from ..context import VerifyContext
from ..results import CheckResult, Finding, around, verdict
from .call_values import CALL_HINT, CallRead, official_writes_the_same, read_calls, unescaped_quotes
from .nulls import null_literals
from .refusals import PARTS_AS_DATA

_PREFIX = "values-"
_FIELDS = {"system": "system content", "user": "content", "assistant": "content", "tool": "tool result"}

HINT = (
    "write strings as they are: `{{ message.content }}`, not `| tojson`; dict arguments with `| tojson`, string "
    "arguments as given; text parts by their `text`; tool-call ids as given, at the call and at its result"
)
_HINT_STRING = (
    "write strings as they are: `{{ message.content }}`, not `| tojson` (test `is string` before `is iterable`)"
)
_HINT_ARGUMENTS = (
    "write dict arguments with `| tojson` and string arguments as given: "
    "`arguments if arguments is string else arguments | tojson`"
)
_HINT_PARTS = "write each text part's `text`: `{% for p in message.content %}{{ p.text }}{% endfor %}`"
_HINT_TYPED = "write arguments with `| tojson` (true, false, null), not by concatenating Python values"
_HINT_NEWLINE = "write a newline: `'\\n'` in a template string literal, not `'\\\\n'`"
_HINT_IDS = "write the call's `id` as given where the call is written, and the result's `tool_call_id` as given"


def _short(value: str, width: int = 60) -> str:
    return repr(value if len(value) <= width else value[: width - 1] + "…")


def _encodings(value: str) -> list[tuple[str, str]]:
    """(what the template did, the text it writes) for the ways a string is commonly written other than as text."""
    ascii_json, raw_json = json.dumps(value), json.dumps(value, ensure_ascii=False)
    return [
        ("JSON-encoded again, as `| tojson` writes it", ascii_json),
        ("JSON-encoded again, as `| tojson` writes it", raw_json),
        ("escaped as inside a JSON string", ascii_json[1:-1]),
        ("escaped as inside a JSON string", raw_json[1:-1]),
        ("written as a Python repr", repr(value)),
    ]


def _strings(probe: Probe) -> Iterator[tuple[int, str, str]]:
    """(message index, field, string) for every string content of a probe (text parts included)."""
    for i, m in enumerate(probe.messages):
        content = m.get("content")
        field = _FIELDS.get(m["role"], "content")
        if isinstance(content, str):
            yield i, field, content
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield i, "text part", part["text"]


def _calls(probe: Probe) -> Iterator[tuple[int, dict[str, Any]]]:
    for i, m in enumerate(probe.messages):
        for call in m.get("tool_calls") or []:
            yield i, call


def _data(value: Any, width: int = 60) -> str:
    written = json.dumps(value, ensure_ascii=False)
    return written if len(written) <= width else written[: width - 1] + "…"


def _sentinel_in(value: str, probe: Probe) -> str | None:
    return next((s.text for s in probe.sentinels if s.text in value), None)


class _Probe:
    """One probe's rendering, and how its findings are worded."""

    def __init__(self, ctx: VerifyContext, probe: Probe, text: str | None = None, note: str = "") -> None:
        """`text`: the rendering to read when it is not transformers' (`note` says which it is)."""
        self.ctx = ctx
        self.probe = probe
        self.text = text if text is not None else ctx.rendered[probe.id].text or ""
        self.note = note

    def at(self, pos: int) -> str:
        return around(self.text, pos, self.ctx.control_tokens)

    def finding(self, index: int | None, what: str, pos: int, hint: str, **detail: Any) -> Finding:
        where = f"message {index}" if index is not None else "the rendering"
        return Finding(
            self.probe.id,
            f"probe {self.probe.id}{self.note}: {where}: {what}; the rendering has {self.at(pos)}",
            {"message_index": index, "char_position": pos, **detail},
            severity="error",
            cause="template",
            hint=hint,
        )

    def strings(self, tool_results: bool, parts_dumped: bool) -> list[Finding]:
        """Each string content written as its text (text parts too, unless the list itself is written)."""
        findings = []
        for index, field, value in _strings(self.probe):
            if (field == "tool result" and not tool_results) or (field == "text part" and parts_dumped):
                continue
            sentinel = _sentinel_in(value, self.probe)
            if sentinel is None or sentinel not in self.text or value.strip() in self.text:
                continue
            how = next((how for how, written in _encodings(value.strip()) if written in self.text), "changed")
            findings.append(
                self.finding(
                    index,
                    f"the {field} is a string, {how}: the data says {_short(value)}",
                    self.text.find(sentinel),
                    _HINT_PARTS if field == "text part" else _HINT_STRING,
                    field=field,
                    value=value,
                )
            )
        return findings

    def parts(self) -> list[Finding]:
        """Text parts written as their text, never as the list they came in."""
        if not any(isinstance(m.get("content"), list) for m in self.probe.messages):
            return []
        match = PARTS_AS_DATA.search(self.text)
        if match is None:
            return []
        lists = [i for i, m in enumerate(self.probe.messages) if isinstance(m.get("content"), list)]
        at = self.ctx.message_at(self.probe, match.start())
        index = at if at in lists else lists[0]
        field = _FIELDS.get(self.probe.messages[index]["role"], "content")
        return [
            self.finding(
                index,
                f"the {field} is a list of text parts, written as data (the list itself, or each part, "
                "as JSON or a Python repr), not as the parts' text",
                match.start(),
                _HINT_PARTS,
                field="content",
            )
        ]

    def arguments(self) -> list[Finding]:
        """Each call read back in the syntax the template writes (JSON, a Python call, XML parameters, Gemma's
        `call:name{...}`): every argument once, with its type, quoting and escaping. What the text alone shows is
        said first, as it always was: values encoded twice, Python literals or a Python dict in JSON."""
        findings, read_back = [], []
        for read in read_calls(self.ctx, self.probe, self.text):
            heuristics = [
                f
                for key, value in read.arguments.items()
                if (f := self._argument(read.index, key, value, read.arguments, read.given)) is not None
            ]
            if heuristics:
                findings += heuristics
            elif isinstance(read.outcome, Reading):
                read_back += self._read_back(read, read.outcome)
            else:
                unread = self._unread(read)
                findings += [f for f in unread if f.severity == "info"]
                read_back += [f for f in unread if f.severity != "info"]
        if read_back and (official := official_writes_the_same(self.ctx, self.probe)) is not None:
            for finding in read_back:
                finding.severity = "warning"
                finding.text += f"; {official}, the official renderer, writes the same: a limit of the format"
        return findings + read_back

    def _read_back(self, read: CallRead, reading: Reading) -> list[Finding]:
        if reading.encoded_twice:
            return [
                self.finding(
                    read.index,
                    f"the tool-call arguments of {read.name} are encoded twice: written as a JSON string that holds "
                    "their JSON object",
                    reading.pos,
                    _HINT_ARGUMENTS,
                    syntax=reading.syntax,
                )
            ]
        findings = []
        for key, why in differences(reading, read.arguments):
            at = self.text.find(key, reading.pos)
            findings.append(
                self.finding(
                    read.index,
                    f"the tool-call argument {key!r} of {read.name} ({reading.syntax}) is {why}"
                    + (f" (the data says {_data(read.arguments[key])})" if why[:7] in ("missing", "written") else ""),
                    at if at >= 0 else reading.pos,
                    CALL_HINT,
                    field=f"argument {key!r}",
                    value=read.arguments[key],
                    syntax=reading.syntax,
                )
            )
        return findings

    def _unread(self, read: CallRead) -> list[Finding]:
        """A call whose syntax does not parse (an error, naming a quote left unescaped where one is), or that no
        syntax reads (info: its values are not checked)."""
        outcome = read.outcome
        if isinstance(outcome, Unreadable):
            quoted = unescaped_quotes(self.text, read.arguments)
            why = f" (the argument {quoted[0]!r} holds a quote written unescaped inside its quotes)" if quoted else ""
            if not why and read.given is not None and read.given in self.text:
                why = " (the arguments' JSON string written as given, inside a syntax of its own)"
            return [
                self.finding(
                    read.index,
                    f"the tool call of {read.name} is written as a {outcome.syntax} that does not give its arguments "
                    f"back: {outcome.reason}{why}",
                    quoted[1] if quoted else outcome.pos,
                    CALL_HINT,
                    syntax=outcome.syntax,
                )
            ]
        if read.sentinel is None or read.sentinel not in self.text:
            return []
        finding = self.finding(
            read.index,
            f"the tool call of {read.name} is written in a syntax none of JSON, a Python call or XML parameters "
            "reads: its values are not checked",
            self.text.find(read.sentinel),
            CALL_HINT,
        )
        finding.severity = "info"
        return [finding]

    def _argument(
        self, index: int, key: str, value: Any, arguments: dict[str, Any], given: str | None
    ) -> Finding | None:
        field = f"argument {key!r}"
        if isinstance(value, str):
            twice = json.dumps(json.dumps(value))[1:-1]
            pos = self.text.find(twice)
            if pos < 0 and given is not None and (pos := self.text.find(json.dumps(given))) >= 0:
                twice = json.dumps(given)
            if pos >= 0:
                said = f"arguments given as the JSON string {_short(given)}" if given is not None else "the data says"
                return self.finding(
                    index,
                    f"the tool-call {field} is encoded twice ({said}, value {value!r}): written as {_short(twice)}",
                    pos,
                    _HINT_ARGUMENTS,
                    field=field,
                    value=value,
                )
            return None
        if value is None or isinstance(value, bool):
            match = self._python_literal(key, value, arguments)
            if match is not None:
                return self.finding(
                    index,
                    f"the tool-call {field} is {json.dumps(value)}, written as the Python literal "
                    f"{match.group(0)!r} where the format writes JSON",
                    match.start(),
                    _HINT_TYPED,
                    field=field,
                    value=value,
                )
        repr_key = re.compile(rf"""'{re.escape(key)}'\s*:""").search(self.text)
        if repr_key is not None:
            return self.finding(
                index,
                f"the tool-call arguments are written as a Python dict repr ({repr_key.group(0)!r}), not as JSON "
                "nor call syntax",
                repr_key.start(),
                _HINT_TYPED,
                field=field,
                value=value,
            )
        return None

    def _python_literal(self, key: str, value: Any, arguments: dict[str, Any]) -> re.Match[str] | None:
        """`"key": True` (or `"True"`) in JSON; `key:None` unquoted where another typed argument is written the JSON
        way (`exact:true`), so the format is known to want JSON literals. Call syntax `key=None` is legitimate."""
        literal = re.escape(str(value))
        quoted = re.compile(rf"""["']{re.escape(key)}["']\s*:\s*(?:{literal}|["']{literal}["'])(?!\w)""")
        if (match := quoted.search(self.text)) is not None:
            return match
        bare = re.compile(rf"""(?<![\w"'])({re.escape(key)})\s*:\s*{literal}(?!\w)""")
        if (match := bare.search(self.text)) is None:
            return None
        others = [(k, v) for k, v in arguments.items() if k != key and (v is None or isinstance(v, bool))]
        if any(re.search(rf"""(?<![\w"']){re.escape(k)}\s*:\s*{json.dumps(v)}(?!\w)""", self.text) for k, v in others):
            return match
        return None

    def call_ids(self) -> list[Finding]:
        """An id shown at a tool result is shown at its call too."""
        findings = []
        calls = {call.get("id"): i for i, call in _calls(self.probe) if isinstance(call.get("id"), str)}
        for index, m in enumerate(self.probe.messages):
            id_ = m.get("tool_call_id")
            if m["role"] != "tool" or not isinstance(id_, str) or id_ not in self.text:
                continue
            call_index = calls.get(id_)
            if call_index is not None:
                upto = self.ctx.renderer.render(self.probe.message_list()[: call_index + 1], self.probe.tool_list())
                if not upto.ok or id_ in (upto.text or ""):
                    continue
            at_call = f"at its call (message {call_index})" if call_index is not None else "at any call"
            findings.append(
                self.finding(
                    index,
                    f"the tool result refers to id {id_!r}, which the rendering never shows {at_call}",
                    self.text.find(id_),
                    _HINT_IDS,
                    field="tool_call_id",
                    value=id_,
                )
            )
        return findings


def _all_strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _all_strings(k)
            yield from _all_strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _all_strings(v)


def _plain_data(probe: Probe) -> bool:
    """No backslash and no newline anywhere in the data: any backslash-n in its rendering is the template's."""
    return not any("\\" in s or "\n" in s for s in _all_strings([probe.messages, probe.tools]))


def _literal_newlines(ctx: VerifyContext, probes: list[Probe]) -> list[Finding]:
    """A backslash and an n written where a newline is meant; each place once, in the first probe."""
    findings, seen = [], set()
    for probe in probes:
        view = _Probe(ctx, probe)
        pos = view.text.find("\\n")
        if pos < 0:
            continue
        excerpt = around(view.text, pos, ctx.control_tokens)
        key = re.sub(r"qz\d+\w*", "", excerpt)
        if key in seen:
            continue
        seen.add(key)
        findings.append(
            view.finding(
                ctx.message_at(probe, pos),
                "a backslash and an n (two characters) where the data has no backslash: a newline written as "
                "'\\\\n' in the template",
                pos,
                _HINT_NEWLINE,
            )
        )
    return findings


def _unrefused(finding: Finding) -> Finding:
    finding.severity = "warning"
    finding.text += (
        "; the template refuses content parts elsewhere (string content is its limit) but writes these as the list's "
        "repr instead of refusing them: a training set with this role's content as parts trains the repr"
    )
    return finding


def _with_none_kept(ctx: VerifyContext, probe: Probe) -> _Probe | None:
    """A `values-` probe that raises only on its None content (`renders` reports it), read as the template renders it
    with the None kept (`content_none`: it tests `content is none`, as engines that pass messages as given send it),
    else with the None content given as "" (DeepSeek's templates concatenate it): a crash on the content must not
    hide how the same turn writes its values."""
    effect = content_none_effect(ctx, probe)
    if effect is not None and effect.kept.ok:
        return _Probe(ctx, probe, effect.kept.text or "", f" ({_KEPT}; {_RAISES})")
    empty = with_empty_content(probe.message_list())
    if empty == probe.message_list():
        return None
    again = ctx.renderer.render(
        empty,
        probe.tool_list(),
        add_generation_prompt=probe.add_generation_prompt,
        continue_final_message=probe.continue_final_message,
    )
    if not again.ok:
        return None
    return _Probe(ctx, probe, again.text or "", f' (rendered with the None content given as ""; {_RAISES})')


_KEPT = "rendered with the None content kept, as engines that pass messages as given send it"
_RAISES = "transformers' rendering raises on it, see renders"


def values_faithful(ctx: VerifyContext) -> CheckResult:
    caps = ctx.capabilities
    calls, results = caps.get("tool_calls") == "yes", caps.get("tool_results") == "yes"
    rendered = [p for p in ctx.probes if ctx.rendered[p.id].ok and ctx.applicable(p)]
    ours = [p for p in rendered if p.id.startswith(_PREFIX)]
    raised = [p for p in ctx.probes if p.id.startswith(_PREFIX) and p not in ours and ctx.applicable(p)]
    views = [_Probe(ctx, p) for p in ours] + [v for p in raised if (v := _with_none_kept(ctx, p)) is not None]
    if not views:
        return CheckResult("values-faithful", "skip", "no values- probe renders with what the template reads")
    findings: list[Finding] = []
    for view in views:
        parts = view.parts()
        findings += parts + view.strings(tool_results=results, parts_dumped=bool(parts))
        if calls:
            findings += view.arguments()
        if calls and results:
            findings += view.call_ids()
    # every other probe with content as parts: a list (or one part) printed as data, in any role (a tool result's
    # parts written as each part's dict repr: GLM-4.7); in a probe of what the template does not read (its user
    # parts raise: string content is its stated limit), another role's parts written as data instead of refused are
    # a warning: a training set with that role's content as parts trains the repr
    findings += [f for p in rendered if p not in ours for f in _Probe(ctx, p).parts()]
    unread = [p for p in ctx.probes if ctx.rendered[p.id].ok and not ctx.applicable(p) and p not in ours]
    findings += [_unrefused(f) for p in unread for f in _Probe(ctx, p).parts()]
    plain = [p for p in rendered if _plain_data(p) and (calls or not any(_calls(p)))]
    findings += _literal_newlines(ctx, plain)
    findings += null_literals(ctx)
    return verdict(
        "values-faithful",
        findings,
        f"strings are written as their text, arguments as JSON or call syntax, tool results by their call's id "
        f"({len(views)} probes, {len(plain)} checked for literal backslash-n)",
        HINT,
        cause="template",
    )
