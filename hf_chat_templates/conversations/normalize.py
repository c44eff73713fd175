"""What a record needs before a template can render it, decided once per template, and the tally of what was done
and what was left out.

`Normalizer.for_template(render)` renders a tiny probe conversation a few ways and keeps three decisions,
all plain data (it pickles into worker processes as it is):

- `parse_arguments`: JSON-string tool-call arguments (OpenAI's format) are parsed into mappings when the template
  refuses or fails on strings, or writes them JSON-encoded again, but renders mappings (as vLLM does);
- `null_content`: `content: null` on an assistant turn with tool calls becomes `""` when the template fails on
  null but renders `""`;
- `reasoning_field`: `reasoning_content`, `reasoning`, `thinking` and a leading `<think>…</think>` in assistant
  content are moved to the field the template renders in a last assistant turn after a user turn (none: left as
  they are, and reasoning in a field is counted as dropped). A field counts only when a distinctive value put in
  it is in the rendering: a template's text can name a field it never writes (a system prompt that speaks of
  "thinking"). transformers copies each reasoning field into `reasoning_content` and `thinking` before rendering
  (`_compat.alias_reasoning_fields`), so the probe fills all three fields with different values at once, which
  that copying leaves in place, and the value found names the field read;
- `earlier_reasoning`, `think_last`, `think_earlier`: whether that field is rendered in an assistant turn a later
  user turn follows (Qwen3, GLM and gpt-oss render reasoning only after the last user message), and whether the
  reasoning of a leading `<think>…</think>` in content is rendered in the last and in such an earlier turn
  (DeepSeek-R1-Distill strips it from every turn, Qwen3 from earlier ones). Reasoning a template drops where it
  stands is left as it is and counted as a loss, by step.

`RecordTally` counts the steps applied and the records left out by kind, with the first examples; `SkipLimit` is
`max_skipped` (N records, or "P%" of them).
"""

from __future__ import annotations

import copy
import json
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError, option
from .formats import SHAREGPT_STEP, TOOLS_STEP

ARGUMENTS_STEP = "arguments"
NULL_CONTENT_STEP = "null-content"
REASONING_STEP = "reasoning"
# Reasoning lost: each counts toward max_skipped like a record left out.
REASONING_DROPPED = "reasoning-dropped"  # in a field, and the template renders no field
EARLIER_REASONING_DROPPED = "earlier-reasoning-dropped"  # in a turn before the last user turn, not rendered there
THINK_DROPPED = "think-dropped"  # a leading <think>…</think> in content that the template strips
LOSSES = (REASONING_DROPPED, EARLIER_REASONING_DROPPED, THINK_DROPPED)
REASONING_FIELDS = ("reasoning_content", "thinking")
_ALIASES = ("reasoning_content", "reasoning", "thinking")
_CANDIDATES = ("reasoning_content", "thinking", "reasoning")  # probed at once; the first rendered is the target
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


def _try(render: Render, messages: list[dict[str, Any]], tools: bool = True) -> str | None:
    try:
        return render(messages, copy.deepcopy(_PROBE_TOOLS) if tools else None)
    except Exception:  # a template may raise anything; a probe that fails is the answer
        return None


def _reasoned(answer: dict[str, Any], earlier: bool) -> list[dict[str, Any]]:
    """An assistant turn after a user turn, last or followed by a user turn and its answer."""
    turns = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", **answer}]
    if earlier:
        turns += [{"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": "6"}]
    return turns


@dataclass(frozen=True)
class _Reasoning:
    """Where a template renders reasoning (`Normalizer`'s reasoning decisions)."""

    field: str | None
    earlier: bool
    think_last: bool
    think_earlier: bool


def _rendered_reasoning(render: Render) -> _Reasoning:
    """Where the template renders reasoning, by rendering turns that carry distinctive values in each place."""
    mark = f"r{secrets.token_hex(6)}"  # in no template and no probe text
    values = {name: f"{mark}{i}x" for i, name in enumerate(_CANDIDATES)}
    thought = f"{mark}tx"
    # A template that needs tools (a tool_use template given alone) is probed with them
    alone = _try(render, _reasoned({"content": "4"}, False), tools=False)
    tools = alone is None
    plain = {False: _try(render, _reasoned({"content": "4"}, False), tools) if tools else alone}
    plain[True] = _try(render, _reasoned({"content": "4"}, True), tools)

    def rendered(answer: dict[str, Any], earlier: bool) -> str:
        """The rendering, or "" when it fails or equals the turn's rendering without reasoning."""
        out = _try(render, _reasoned(answer, earlier), tools)
        return "" if out is None or out == plain[earlier] else out

    fields = {**values, "content": "4"}
    last = rendered(fields, False)
    field = next((name for name in _CANDIDATES if values[name] in last), None)
    think = {"content": f"<think>{thought}</think>4"}
    # Where even the turn without reasoning fails, content is not said to lose its reasoning: such records fail to
    # render and are counted there.
    return _Reasoning(
        field=field,
        earlier=field is not None and values[field] in rendered(fields, True),
        think_last=plain[False] is None or thought in rendered(think, False),
        think_earlier=plain[True] is None or thought in rendered(think, True),
    )


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
    earlier_reasoning: bool = False
    think_last: bool = True
    think_earlier: bool = True

    @classmethod
    def for_template(cls, render: Render) -> Normalizer:
        """Decide each step by rendering probes with `render(messages, tools)` (it raises when the template
        does): what a template renders is decided by rendering, never by its text.

        >>> Normalizer.for_template(render).reasoning_field  # Qwen3's template
        'reasoning_content'
        """
        text = json.dumps(_PROBE_ARGUMENTS)
        as_string = _try(render, _probe(text, ""))
        as_mapping = _try(render, _probe(dict(_PROBE_ARGUMENTS), ""))
        encoded_again = json.dumps(text)[1:-1]
        parse = as_mapping is not None and (
            as_string is None or (encoded_again in as_string and encoded_again not in as_mapping)
        )
        arguments: Any = dict(_PROBE_ARGUMENTS) if parse or as_string is None else text
        null = _try(render, _probe(arguments, None)) is None and _try(render, _probe(arguments, "")) is not None
        reasoning = _rendered_reasoning(render)
        return cls(
            parse_arguments=parse,
            null_content=null,
            reasoning_field=reasoning.field,
            earlier_reasoning=reasoning.earlier,
            think_last=reasoning.think_last,
            think_earlier=reasoning.think_earlier,
        )

    def apply(self, record: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
        """`record` with the steps applied (a copy of what changed; the input is not modified) and their names."""
        steps: set[str] = set()
        for index, message in enumerate(record["messages"]):
            for call in message.get("tool_calls") or () if message.get("role") == "assistant" else ():
                _check_arguments(index, call)
        last_user = max((i for i, m in enumerate(record["messages"]) if m.get("role") == "user"), default=-1)
        messages = [self._message(m, i < last_user, steps) for i, m in enumerate(record["messages"])]
        if not steps:
            return record, ()
        return {**record, "messages": messages}, tuple(sorted(steps))

    def _message(self, message: dict[str, Any], earlier: bool, steps: set[str]) -> dict[str, Any]:
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
        return self._reasoning(out, earlier, steps)

    def _reasoning(self, message: dict[str, Any], earlier: bool, steps: set[str]) -> dict[str, Any]:
        """The message with its reasoning where the template renders it; what it drops is counted in `steps`."""
        found = {k: message[k] for k in _ALIASES if isinstance(message.get(k), str)}
        if found:
            carried = any(v.strip() for v in found.values())
            if self.reasoning_field is None:
                if carried:
                    steps.add(REASONING_DROPPED)  # rendered as the data is; the report counts the loss
                return message
            moved = _moved_fields(message, found, self.reasoning_field)
            if moved is not message:
                steps.add(REASONING_STEP)
            if carried and earlier and not self.earlier_reasoning:
                steps.add(EARLIER_REASONING_DROPPED)
            return moved
        content = message.get("content")
        match = _THINK.match(content) if isinstance(content, str) else None
        if match is None:
            return message
        thought = match.group(1).strip()
        if self.reasoning_field is not None and (self.earlier_reasoning or not earlier):
            steps.add(REASONING_STEP)
            return {**message, "content": content[match.end() :], self.reasoning_field: thought}  # type: ignore[index]
        if thought and not (self.think_earlier if earlier else self.think_last):
            # Left in the content, where the template strips it: moved to a field, it would be dropped the same way
            rendered_later = self.reasoning_field is not None or self.think_last
            steps.add(EARLIER_REASONING_DROPPED if earlier and rendered_later else THINK_DROPPED)
        return message


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


def _moved_fields(message: dict[str, Any], found: dict[str, str], target: str) -> dict[str, Any]:
    """The message with the reasoning of its fields `found` under `target` only (itself when it is already)."""
    if set(found) == {target}:
        return message
    reasoning = found.get(target) or next(iter(found.values()))
    out = {k: v for k, v in message.items() if k not in found}
    out[target] = reasoning
    return out


def step_description(step: str, reasoning_field: str | None = None) -> str:
    field = reasoning_field or "the reasoning field"
    return {
        SHAREGPT_STEP: "mapped ShareGPT turns (from/value) onto messages",
        TOOLS_STEP: "parsed a JSON-string tools column into a list",
        ARGUMENTS_STEP: "parsed JSON-string tool-call arguments into mappings (the template needs them)",
        NULL_CONTENT_STEP: 'replaced null content of assistant tool-call turns with "" (the template fails on null)',
        REASONING_DROPPED: "reasoning (reasoning_content, reasoning, thinking) dropped: the template renders no "
        "reasoning (counts toward --max-skipped)",
        EARLIER_REASONING_DROPPED: "reasoning of assistant turns before the last user turn dropped: the template "
        "renders reasoning only after it (counts toward --max-skipped; --per-turn keeps it: one example per turn)",
        THINK_DROPPED: "reasoning in a leading <think>…</think> of assistant content dropped: the template strips "
        "it from the content and renders no reasoning field (counts toward --max-skipped)",
        REASONING_STEP: f"moved reasoning ({', '.join(a for a in (*_ALIASES, '<think>…</think>') if a != field)}) "
        f"into '{field}' (the field the template renders)",
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
    lossy: int = 0  # records kept though a step lost a field of theirs (each once, however many steps)

    def skip(self, kind: str, where: int, why: str) -> None:
        self.skipped[kind] += 1
        if len(self.examples[kind]) < MAX_EXAMPLES:
            self.examples[kind].append((where, why))

    def applied(self, steps: Iterable[str]) -> None:
        """The steps taken on one record kept."""
        steps = set(steps)
        for step in steps:
            self.steps[step] = self.steps.get(step, 0) + 1
        self.lossy += bool(steps & set(LOSSES))

    def add(self, other: RecordTally) -> None:
        for kind, n in other.skipped.items():
            self.skipped[kind] += n
            self.examples[kind] = sorted(self.examples[kind] + other.examples[kind])[:MAX_EXAMPLES]
        for step, n in other.steps.items():
            self.steps[step] = self.steps.get(step, 0) + n
        self.lossy += other.lossy

    @property
    def counted(self) -> int:
        """Records left out, or kept with a field lost, that count toward `max_skipped` (a record once)."""
        return sum(self.skipped[k] for k in SKIP_KINDS) + self.lossy

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
