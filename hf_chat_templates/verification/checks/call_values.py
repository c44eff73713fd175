"""Each tool call of a probe, read back from its rendering (`values-faithful`): where the call is (its message's
span of the rendering, else wherever its sentinel argument is), and what the syntax the template writes gives back
(see `call_syntax`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ...conversations.probes import Probe
from ..call_syntax import Reading, Unreadable, anchor, read_call
from ..context import VerifyContext
from ..references import REFERENCES, reference_ids

CALL_HINT = (
    "write each argument once, as the call's syntax requires: in JSON with `| tojson` (string arguments as given), "
    "in a Python call with strings quoted and escaped (`| tojson` writes a valid Python string) and True, False, "
    "None as Python writes them, in XML parameters a string as its text and any other value as JSON (`| tojson`, "
    "not `| string`, which writes Python's True, None and {'a': 1})"
)


@dataclass(frozen=True)
class CallRead:
    """One call of a probe and what its rendering gives back: `outcome` is the reading, why the syntax it looks
    like does not parse, or None when no syntax reads it. `key`/`sentinel`: the argument that tells the call apart."""

    index: int
    name: str
    arguments: dict[str, Any]
    given: str | None  # the arguments as the JSON string the data gave, if it did
    key: str | None
    sentinel: str | None
    outcome: Reading | Unreadable | None


def call_arguments(call: dict[str, Any]) -> tuple[Any, str | None]:
    """A call's arguments as data, and the JSON string the data gave them as (None: given as data)."""
    arguments = call.get("function", call).get("arguments")
    if isinstance(arguments, str):
        try:
            return json.loads(arguments), arguments
        except ValueError:
            return None, arguments
    return arguments, None


def _holds(outcome: Reading | Unreadable | None, key: str | None, sentinel: str | None) -> bool:
    if isinstance(outcome, Reading):
        return key is not None and sentinel is not None and sentinel in str(outcome.values.get(key, ""))
    return outcome is not None


def _declared(ctx: VerifyContext, probe: Probe, text: str, outcome: Unreadable, name: str) -> bool:
    """Whether a call that does not parse, read outside its message's span, is the tools' declaration: its text from
    the tool's name on is written before any call, in the rendering of the conversation's first message with the
    tools (Granite's vLLM template declares each tool as `"description": "qz1toolname(city: str, …)"`)."""
    start = text.rfind(name, 0, outcome.pos + 1)
    if start < 0:
        return False
    head = ctx.renderer.render(probe.message_list()[:1], probe.tool_list())
    return head.ok and text[start : outcome.pos + 1] in (head.text or "")


def _anywhere(ctx: VerifyContext, probe: Probe, text: str, name: str, key: str | None, sentinel: str | None) -> Any:
    """The call read wherever it is written, past the tools' declarations."""
    start = 0
    for _ in range(len(probe.tool_list() or []) + 1):
        outcome = read_call(text, start, len(text), name, key, sentinel)
        if not isinstance(outcome, Unreadable) or not _declared(ctx, probe, text, outcome, name):
            return outcome
        start = outcome.pos + 1
    return None


def read_calls(ctx: VerifyContext, probe: Probe, text: str) -> Iterator[CallRead]:
    """Every call of the probe with dict (or JSON-string) arguments, read back from `text`, its rendering: in its
    message's span, else wherever it is written, never in the tools' declarations."""
    bounds = ctx.message_boundaries(probe)
    sentinels = [s.text for s in probe.sentinels]
    for index, message in enumerate(probe.messages):
        for call in message.get("tool_calls") or []:
            arguments, given = call_arguments(call)
            name = call.get("function", call).get("name")
            if not isinstance(arguments, dict) or not isinstance(name, str):
                continue
            key, sentinel = anchor(arguments, sentinels) or (None, None)
            outcome = None
            if bounds is not None:
                start = bounds[index - 1] if index else 0
                outcome = read_call(text, start, bounds[index], name, key, sentinel)
            if outcome is None or (
                isinstance(outcome, Reading) and not outcome.values and sentinel and sentinel in text
            ):
                # not in its message's span (or no span known): wherever its sentinel is, and only there
                anywhere = _anywhere(ctx, probe, text, name, key, sentinel)
                if _holds(anywhere, key, sentinel):
                    outcome = anywhere
            yield CallRead(index, name, arguments, given, key, sentinel, outcome)


def unescaped_quotes(text: str, arguments: dict[str, Any]) -> tuple[str, int] | None:
    """A string argument holding a quote, written between the same quotes with that quote unescaped: (key, where)."""
    for key, value in arguments.items():
        if not isinstance(value, str):
            continue
        for quote in ('"', "'"):
            if quote in value and (pos := text.find(quote + value + quote)) >= 0:
                return key, pos + 1 + value.index(quote)
    return None


def official_writes_the_same(ctx: VerifyContext, probe: Probe) -> str | None:
    """The official renderer's name when the template's family has one and it writes this probe as the template
    does: a call it cannot give back is then the format's limit, not the template's defect."""
    if ctx.variant is None or ctx.variant.family not in REFERENCES:
        return None
    try:
        expected = reference_ids(ctx, probe)
    except Exception:  # not installed, or a probe it cannot express: the template alone is judged
        return None
    rendered = ctx.rendered[probe.id].text or ""
    return REFERENCES[ctx.variant.family][0] if ctx.tokenizer.decode(expected) == rendered else None
