"""What a record needs before a template can render it, decided once per template, and the tally of what was done
and what was left out.

`Normalizer.for_template(render, sources)` renders a tiny probe conversation a few ways and keeps three decisions,
all plain data (it pickles into worker processes as it is):

- `parse_arguments`: JSON-string tool-call arguments (OpenAI's format) are parsed into mappings when the template
  refuses or fails on strings, or writes them JSON-encoded again, but renders mappings (as vLLM does);
- `null_content`: `content: null` on an assistant turn with tool calls becomes `""` when the template fails on
  null but renders `""`;
- `reasoning_field`: `reasoning_content`, `reasoning`, `thinking` and a leading `<think>…</think>` in assistant
  content are moved to the field the template's source reads (none: left as they are).

`RecordTally` counts the steps applied and the records left out by kind, with the first examples; `SkipLimit` is
`max_skipped` (N records, or "P%" of them).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError, option
from .formats import SHAREGPT_STEP, TOOLS_STEP

ARGUMENTS_STEP = "arguments"
NULL_CONTENT_STEP = "null-content"
REASONING_STEP = "reasoning"
REASONING_DROPPED = "reasoning-dropped"  # a field lost: counts toward max_skipped like a record left out
LOSSES = (REASONING_DROPPED,)
REASONING_FIELDS = ("reasoning_content", "thinking")
_ALIASES = ("reasoning_content", "reasoning", "thinking")
_THINK = re.compile(r"\s*<think>(.*?)</think>\s*", re.DOTALL)
LEFT_OUT = "every turn left out"  # a record with assistant turns, none of which has a span: it trains nothing
SKIP_KINDS = ("read", "normalize", "render", LEFT_OUT)  # count toward max_skipped
UNTRAINED = "nothing to train"  # does not
MAX_EXAMPLES = 10

Render = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], str]

# Written by json.dumps with its defaults, as most datasets are: "ü" becomes \u00fc, which a template that reads the
# JSON string itself (Llama 3.2 pythonic) cannot decode, so such a template gets mappings.
_PROBE_ARGUMENTS = {"city": "Zürich", "days": 2}
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
        },
    }
]


def _probe(arguments: Any, content: str | None) -> list[dict[str, Any]]:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": content, "tool_calls": [call]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1", "name": "get_weather"},
        {"role": "assistant", "content": "It is sunny."},
    ]


def _try(render: Render, messages: list[dict[str, Any]]) -> str | None:
    try:
        return render(messages, copy.deepcopy(_PROBE_TOOLS))
    except Exception:  # a template may raise anything; a probe that fails is the answer
        return None


def reads_reasoning(sources: Iterable[str | None]) -> str | None:
    """The reasoning field the template source reads: `reasoning_content`, else `thinking`, else None."""
    text = "\n".join(s for s in sources if s)
    return next((name for name in REASONING_FIELDS if re.search(rf"\b{name}\b", text)), None)


class RecordProblem(ValueError):
    """Why a record cannot be normalized, in words that name the message and the value."""


def _non_finite(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_arguments(index: int, call: dict[str, Any]) -> None:
    """A call's string arguments must be a JSON object (the OpenAI format): anything else would be trained as
    written, or fail in the template with a misleading message."""
    function = call.get("function", call) if isinstance(call, dict) else {}
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        return
    shown = arguments if len(arguments) <= 60 else arguments[:59] + "…"
    try:
        parsed = json.loads(arguments, parse_constant=_non_finite)
    except (ValueError, RecursionError):
        raise RecordProblem(
            f"message {index}: tool call {function.get('name')!r}: arguments {shown!r} are not JSON"
        ) from None
    if not isinstance(parsed, dict):
        raise RecordProblem(
            f"message {index}: tool call {function.get('name')!r}: arguments {shown!r} are not a JSON object"
        )


@dataclass(frozen=True)
class Normalizer:
    """The steps a template needs; `apply(record)` gives the record to render and the names of the steps taken."""

    parse_arguments: bool = False
    null_content: bool = False
    reasoning_field: str | None = None

    @classmethod
    def for_template(cls, render: Render, sources: Iterable[str | None] = ()) -> Normalizer:
        """Decide each step by rendering probes with `render(messages, tools)` (it raises when the template
        does); `sources` are the template texts, read for the reasoning field."""
        text = json.dumps(_PROBE_ARGUMENTS)
        as_string = _try(render, _probe(text, ""))
        as_mapping = _try(render, _probe(dict(_PROBE_ARGUMENTS), ""))
        encoded_again = json.dumps(text)[1:-1]
        parse = as_mapping is not None and (
            as_string is None or (encoded_again in as_string and encoded_again not in as_mapping)
        )
        arguments: Any = dict(_PROBE_ARGUMENTS) if parse or as_string is None else text
        null = _try(render, _probe(arguments, None)) is None and _try(render, _probe(arguments, "")) is not None
        return cls(parse_arguments=parse, null_content=null, reasoning_field=reads_reasoning(sources))

    def apply(self, record: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
        """`record` with the steps applied (a copy of what changed; the input is not modified) and their names."""
        steps: set[str] = set()
        for index, message in enumerate(record["messages"]):
            for call in message.get("tool_calls") or () if message.get("role") == "assistant" else ():
                _check_arguments(index, call)
        messages = [self._message(m, steps) for m in record["messages"]]
        if not steps:
            return record, ()
        return {**record, "messages": messages}, tuple(sorted(steps))

    def _message(self, message: dict[str, Any], steps: set[str]) -> dict[str, Any]:
        if message.get("role") != "assistant":
            return message
        out = message
        calls = message.get("tool_calls")
        if self.parse_arguments and calls:
            parsed = [_parsed_call(c) for c in calls]
            if any(p is not c for p, c in zip(parsed, calls)):
                out = {**out, "tool_calls": parsed}
                steps.add(ARGUMENTS_STEP)
        if self.null_content and calls and message.get("content") is None:
            out = {**out, "content": ""}
            steps.add(NULL_CONTENT_STEP)
        if self.reasoning_field:
            moved = _moved_reasoning(out, self.reasoning_field)
            if moved is not None:
                out = moved
                steps.add(REASONING_STEP)
        elif any(isinstance(message.get(k), str) and message[k].strip() for k in _ALIASES):
            steps.add(REASONING_DROPPED)  # rendered as the data is; the report counts the loss
        return out

    def describe_step(self, step: str) -> str:
        return step_description(step, self.reasoning_field)


def _parsed_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function", call)
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        return call
    try:
        parsed = json.loads(arguments)
    except (json.JSONDecodeError, RecursionError):
        return call  # not JSON: kept, and the template says why it does not render
    if not isinstance(parsed, dict):
        return call
    new_function = {**function, "arguments": parsed}
    return {**call, "function": new_function} if "function" in call else new_function


def _moved_reasoning(message: dict[str, Any], target: str) -> dict[str, Any] | None:
    """The message with its reasoning under `target` only, or None when there is nothing to move."""
    found = {k: message[k] for k in _ALIASES if isinstance(message.get(k), str)}
    if found:
        if set(found) == {target}:
            return None
        reasoning = found.get(target) or next(iter(found.values()))
        out = {k: v for k, v in message.items() if k not in found}
        out[target] = reasoning
        return out
    content = message.get("content")
    match = _THINK.match(content) if isinstance(content, str) else None
    if match is None:
        return None
    return {**message, "content": content[match.end() :], target: match.group(1).strip()}  # type: ignore[index]


def step_description(step: str, reasoning_field: str | None = None) -> str:
    return {
        SHAREGPT_STEP: "mapped ShareGPT turns (from/value) onto messages",
        TOOLS_STEP: "parsed a JSON-string tools column into a list",
        ARGUMENTS_STEP: "parsed JSON-string tool-call arguments into mappings (the template needs them)",
        NULL_CONTENT_STEP: 'replaced null content of assistant tool-call turns with "" (the template fails on null)',
        REASONING_DROPPED: "reasoning (reasoning_content, reasoning, thinking) dropped: the template renders no "
        "reasoning (counts toward --max-skipped)",
        REASONING_STEP: f"moved reasoning (reasoning, thinking, <think>…</think>) into '{reasoning_field}' "
        "(the field the template reads)",
    }.get(step, step)


@dataclass(frozen=True)
class SkipLimit:
    """`max_skipped`: at most `count` records, or at most `percent` % of the records read."""

    text: str
    count: int | None = None
    percent: float | None = None

    @classmethod
    def parse(cls, value: int | str | None) -> SkipLimit:
        raw = "0" if value is None else str(value).strip()
        try:
            if raw.endswith("%"):
                percent = float(raw[:-1])
                if 0 <= percent <= 100:
                    return cls(raw, percent=percent)
            elif int(raw) >= 0:
                return cls(raw, count=int(raw))
        except ValueError:
            pass
        raise UsageError(
            f"{option('max_skipped')} {value!r} is neither a number of records (0 or more) nor a percentage "
            "(0% to 100%)",
            hint=f"{option('max_skipped')} 10 or {option('max_skipped')} 0.5%",
            parameter="max_skipped",
        )

    def crossed(self, skipped: int, records: int) -> bool:
        if self.count is not None:
            return skipped > self.count
        return skipped > (self.percent or 0) / 100 * records


@dataclass
class RecordTally:
    """Records left out by kind (read, normalize, render, nothing to train) with the first examples of each, and
    the normalization steps applied, by step."""

    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys((*SKIP_KINDS, UNTRAINED), 0))
    examples: dict[str, list[tuple[int, str]]] = field(
        default_factory=lambda: {k: [] for k in (*SKIP_KINDS, UNTRAINED)}
    )
    steps: dict[str, int] = field(default_factory=dict)

    def skip(self, kind: str, where: int, why: str) -> None:
        self.skipped[kind] += 1
        if len(self.examples[kind]) < MAX_EXAMPLES:
            self.examples[kind].append((where, why))

    def applied(self, steps: Iterable[str]) -> None:
        for step in steps:
            self.steps[step] = self.steps.get(step, 0) + 1

    def add(self, other: RecordTally) -> None:
        for kind, n in other.skipped.items():
            self.skipped[kind] += n
            self.examples[kind] = sorted(self.examples[kind] + other.examples[kind])[:MAX_EXAMPLES]
        for step, n in other.steps.items():
            self.steps[step] = self.steps.get(step, 0) + n

    @property
    def counted(self) -> int:
        """Records left out, or written with a field lost, that count toward `max_skipped`."""
        return sum(self.skipped[k] for k in SKIP_KINDS) + sum(self.steps.get(s, 0) for s in LOSSES)

    def to_dict(self, reasoning_field: str | None = None) -> dict[str, Any]:
        return {
            "skipped": dict(self.skipped),
            "examples": {k: [{"where": w, "reason": r} for w, r in v] for k, v in self.examples.items()},
            "steps": {step_description(s, reasoning_field): n for s, n in sorted(self.steps.items())},
        }

    def step_lines(self, reasoning_field: str | None = None) -> list[str]:
        return [f"{step_description(s, reasoning_field)}: {n} records" for s, n in sorted(self.steps.items())]


def over_limit(tally: RecordTally, records: int, limit: SkipLimit) -> str:
    """Why the run is refused (which limit was crossed and how to raise it), or ""."""
    if not limit.crossed(tally.counted, records):
        return ""
    kinds = ", ".join(
        [f"{tally.skipped[k]} {k}" for k in SKIP_KINDS if tally.skipped[k]]
        + [f"{tally.steps[s]} {step_description(s).split(':')[0]}" for s in LOSSES if tally.steps.get(s)]
    )
    return (
        f"{tally.counted} of {records} records could not be used ({kinds}), more than --max-skipped {limit.text} "
        "allows; fix them, or raise the limit (--max-skipped N records, or P% of them) to accept the loss"
    )
