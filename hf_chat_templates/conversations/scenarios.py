"""Agent scenarios: conversations shaped like what agents and serving stacks send, each with its generation points.

The core probes test one shape each; these test the shapes an agent's history takes: tool loops, `tool_calls: []`
next to content, content next to a call, reasoning between calls, results in sequence or in plain text, content
parts in every role, long histories. Each probe is the conversation trained on; the requests an agent sends before
each assistant turn are its snapshots (`Probe.generation_points`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .probes import Probe, _Builder, _done, tool_call, weather_tool

# Why reasoning of a turn before the last user message may be missing from a rendering.
HISTORY_REASONING = "reasoning of a turn before the last user message: thinking models drop it by design"


def _tool(name: str, description: str, properties: dict[str, str] | None) -> dict[str, Any]:
    """A function tool with string `properties` (None: no parameters at all)."""
    function: dict[str, Any] = {"name": name, "description": description}
    if properties is not None:
        function["parameters"] = {
            "type": "object",
            "properties": {k: {"type": "string", "description": v} for k, v in properties.items()},
            "required": list(properties),
        }
    return {"type": "function", "function": function}


def _call(
    b: _Builder,
    tool_name: str,
    count: int = 1,
    *,
    content: str | None = None,
    reasoning: str | None = None,
    as_string: bool = False,
    arguments: bool = True,
    noted: bool = True,
) -> list[str]:
    """An assistant turn calling `tool_name` `count` times; its content and reasoning (with `{}` for a sentinel)
    when given. `noted`: the calls' name and arguments are sentinels. Returns the call ids."""
    index = len(b.messages)
    message: dict[str, Any] = {"role": "assistant"}
    if reasoning is not None:
        thought = b.word("reasoning")
        message["reasoning_content"] = reasoning.replace("{}", thought)
        b.note(thought, "reasoning", index, "reasoning")
    if content is not None and "{}" in content:
        word = b.word("content")
        message["content"] = content.replace("{}", word)
        b.note(word, "content", index, None)
    else:
        message["content"] = content
    ids, calls = [], []
    for i in range(count):
        ids.append(b.call_id())
        args: dict[str, Any] = {}
        if arguments:
            city = b.word("argument")
            args = {"city": city}
            if noted:
                b.note(city, "argument", index, "tool_calls" if i == 0 else "parallel_calls")
        calls.append(tool_call(tool_name, args, as_string=as_string, call_id=ids[-1]))
    message["tool_calls"] = calls
    b.messages.append(message)
    if noted:
        b.note(tool_name, "tool_name", index, "tool_calls")
    return ids


def _result(b: _Builder, id_: str | None, tool_name: str, text: str = '{"temperature": 21, "note": "{}"}') -> None:
    extra: dict[str, Any] = {"name": tool_name}
    if id_ is not None:
        extra["tool_call_id"] = id_
    b.add("tool", text, kind="tool_result", capability="tool_results", **extra)


def _answer(b: _Builder, text: str = "Done {}.", *, reasoning: str | None = None) -> None:
    index = len(b.messages)
    if reasoning is None:
        b.add("assistant", text)
        return
    thought, word = b.word("reasoning"), b.word("content")
    b.messages.append(
        {
            "role": "assistant",
            "reasoning_content": reasoning.replace("{}", thought),
            "content": text.replace("{}", word),
        }
    )
    b.note(thought, "reasoning", index, "reasoning")
    b.note(word, "content", index, None)


def _reasoning_history(probe: Probe) -> Probe:
    """The probe with the reasoning of turns before its last user message marked as droppable by design."""
    users = [i for i, m in enumerate(probe.messages) if m["role"] == "user"]
    last_user = users[-1] if users else -1
    sentinels = tuple(
        dataclasses.replace(s, may_drop=HISTORY_REASONING)
        if s.kind == "reasoning" and s.message is not None and s.message < last_user
        else s
        for s in probe.sentinels
    )
    return dataclasses.replace(probe, sentinels=sentinels)


def _turn_probes(probes: list[Probe], fmt: str) -> None:
    """Plain turns in the shapes agents send: no system, a system before a request, long histories."""
    b = _Builder("multi-turn-no-system", fmt)
    for _ in range(3):
        b.add("user", "Question {}?")
        b.add("assistant", "Answer {}.")
    _done(probes, b, "three exchanges without a system message")

    b = _Builder("system-generation-prompt", fmt)
    b.add("system", "You answer in one word {}.", kind="system", capability="system")
    b.add("user", "Name a fruit {}.")
    _done(probes, b, "a system message and a request", requires=("system",), add_generation_prompt=True)

    b = _Builder("system-two-exchanges", fmt)
    b.add("system", "You are helpful {}.", kind="system", capability="system")
    b.add("user", "First question {}?")
    b.add("assistant", "First answer {}.")
    b.add("user", "Second question {}?")
    b.add("assistant", "Second answer {}.")
    _done(probes, b, "a system message and two exchanges", requires=("system",))

    b = _Builder("long-multi-turn", fmt)
    b.add("system", "Keep a running tally {}.", kind="system", capability="system")
    for _ in range(7):
        b.add("user", "Add one {}.")
        b.add("assistant", "Tally noted {}.")
    _done(probes, b, "seven exchanges after a system message")


def _call_shape_probes(probes: list[Probe], fmt: str) -> None:
    """Assistant turns next to tool calls: `tool_calls: []`, empty or real content beside a call."""
    b = _Builder("agent-empty-tool-calls", fmt)
    b.add("user", "Hello {}.")
    b.add("assistant", "Hi there {}.", tool_calls=[])
    b.add("user", "How are you {}?")
    b.add("assistant", "Well {}.", tool_calls=[])
    _done(probes, b, "answers with content and tool_calls: [], as serving stacks send them", must_render=True)

    b = _Builder("agent-empty-tool-calls-tools", fmt)
    tool_name = b.word("toolschema")
    b.note(tool_name, "tool_schema", None, "tools")
    b.add("system", "Use tools when needed {}.", kind="system", capability="system")
    b.add("user", "Just say hello {}.")
    b.add("assistant", "Hello {}.", tool_calls=[])
    _done(
        probes,
        b,
        "tools declared, an answer with tool_calls: []",
        tools=[weather_tool(tool_name)],
        requires=("tools",),
        must_render=True,
    )

    b = _Builder("agent-call-empty-content", fmt)
    tool_name = b.word("toolname")
    b.add("user", "Weather in Rome {}?")
    (id_,) = _call(b, tool_name, content="")
    _result(b, id_, tool_name)
    _answer(b, "Warm {}.")
    _done(probes, b, "a tool call with empty-string content", tools=[weather_tool(tool_name)], requires=("tool_calls",))

    b = _Builder("agent-call-with-content", fmt)
    tool_name = b.word("toolname")
    b.add("user", "Weather in Oslo {}?")
    (id_,) = _call(b, tool_name, content="Let me check that for you {}.")
    _result(b, id_, tool_name)
    _answer(b, "Cold {}.")
    _done(
        probes, b, "a tool call with text content beside it", tools=[weather_tool(tool_name)], requires=("tool_calls",)
    )

    # trailing whitespace only: leading whitespace would meet the role header, which other checks judge
    b = _Builder("agent-call-content-whitespace", fmt)
    tool_name = b.word("toolname")
    b.add("user", "Weather in Lyon {}?")
    (id_,) = _call(b, tool_name, content="Let me look that up {}.  \n")
    _result(b, id_, tool_name)
    _answer(b, "Mild {}.")
    _done(
        probes,
        b,
        "a tool call with content ending in whitespace beside it",
        tools=[weather_tool(tool_name)],
        requires=("tool_calls",),
    )


def _call_history_probes(probes: list[Probe], fmt: str) -> None:
    """A call turn as the last message and as history, and a user turn right after a tool result."""
    b = _Builder("agent-call-last", fmt)
    tool_name = b.word("toolname")
    b.add("system", "You call tools {}.", kind="system", capability="system")
    b.add("user", "Weather in Lima {}?")
    _call(b, tool_name)
    _done(
        probes, b, "a conversation ending with a tool call", tools=[weather_tool(tool_name)], requires=("tool_calls",)
    )

    b = _Builder("agent-call-history", fmt)
    tool_name = b.word("toolname")
    b.add("system", "You call tools {}.", kind="system", capability="system")
    b.add("user", "Weather in Lima {}?")
    (id_,) = _call(b, tool_name)
    _result(b, id_, tool_name)
    _answer(b, "Mild {}.")
    b.add("user", "Thanks {}.")
    _answer(b, "Welcome {}.")
    _done(
        probes,
        b,
        "the same tool call as history, the conversation going on",
        tools=[weather_tool(tool_name)],
        requires=("tool_calls",),
    )

    b = _Builder("agent-user-after-tool", fmt)
    tool_name = b.word("toolname")
    b.add("user", "Weather in Cairo {}?")
    (id_,) = _call(b, tool_name)
    _result(b, id_, tool_name)
    b.add("user", "Never mind, and in Tunis {}?")
    _answer(b, "Both hot {}.")
    _done(
        probes,
        b,
        "a user turn right after a tool result",
        tools=[weather_tool(tool_name)],
        requires=("tool_calls", "tool_results"),
    )


def _loop_probes(probes: list[Probe], fmt: str) -> None:
    """Agent loops: calls and results in turn, arguments as JSON strings, results in sequence, in plain text,
    answered by name only."""
    for probe_id, as_string, description in (
        ("agent-loop", False, "an agent loop: two tool rounds, an answer, a follow-up"),
        ("agent-loop-json-arguments", True, "an agent loop with arguments as JSON strings"),
    ):
        b = _Builder(probe_id, fmt)
        tool_name = b.word("toolname")
        b.add("system", "You are an agent {}.", kind="system", capability="system")
        b.add("user", "Compare the weather in Paris and Berlin {}.")
        for _ in range(2):
            (id_,) = _call(b, tool_name, as_string=as_string)
            _result(b, id_, tool_name)
        _answer(b, "Paris is warmer {}.")
        b.add("user", "And tomorrow {}?")
        _answer(b, "Much the same {}.")
        _done(probes, b, description, tools=[weather_tool(tool_name)], requires=("system", "tools", "tool_calls"))

    b = _Builder("agent-results-in-sequence", fmt)
    tool_name = b.word("toolname")
    b.add("user", "Weather in three cities {}?")
    ids = _call(b, tool_name, 3)
    for id_ in ids:
        _result(b, id_, tool_name)
    _answer(b, "All sunny {}.")
    _done(
        probes,
        b,
        "three parallel calls, their results in sequence",
        tools=[weather_tool(tool_name)],
        requires=("tool_calls", "parallel_calls", "tool_results"),
    )

    b = _Builder("agent-text-tool-result", fmt)
    tool_name = b.word("toolname")
    b.add("user", "Weather in Madrid {}?")
    (id_,) = _call(b, tool_name)
    _result(b, id_, tool_name, "Sunny and 30 degrees {}")
    _answer(b, "It is hot {}.")
    _done(
        probes,
        b,
        "a tool result in plain text",
        tools=[weather_tool(tool_name)],
        requires=("tool_calls", "tool_results"),
    )

    b = _Builder("agent-result-name-only", fmt)
    tool_name = b.word("toolname")
    b.add("user", "Weather in Vienna {}?")
    _call(b, tool_name)
    _result(b, None, tool_name)
    _answer(b, "Cloudy {}.")
    _done(
        probes,
        b,
        "a tool result with a name and no tool_call_id",
        tools=[weather_tool(tool_name)],
        requires=("tool_calls", "tool_results"),
    )


def _definition_probes(probes: list[Probe], fmt: str) -> None:
    """Tool definitions: beside a system message, several functions, a function without parameters."""
    b = _Builder("agent-tools-with-system", fmt)
    tool_name = b.word("toolname")
    b.add("system", "You are a weather agent {}.", kind="system", capability="system")
    b.add("user", "Weather in Seoul {}?")
    (id_,) = _call(b, tool_name)
    _result(b, id_, tool_name)
    _answer(b, "Rainy {}.")
    _done(
        probes,
        b,
        "tools declared with a system message",
        tools=[weather_tool(tool_name)],
        requires=("system", "tools", "tool_calls"),
    )

    b = _Builder("agent-several-tools", fmt)
    names = [b.word("toolschema") for _ in range(3)]
    called = b.word("toolname")
    for name in names:
        b.note(name, "tool_schema", None, "tools")
    tools = [
        _tool(names[0], "Search the web.", {"query": "What to search for."}),
        weather_tool(called),
        _tool(names[1], "Convert a currency amount.", {"amount": "The amount.", "currency": "The target currency."}),
        _tool(names[2], "Send an email.", {"to": "The recipient.", "body": "The text."}),
    ]
    b.add("user", "Weather in Quito {}?")
    (id_,) = _call(b, called)
    _result(b, id_, called)
    _answer(b, "Spring-like {}.")
    _done(probes, b, "four tools declared, one called", tools=tools, requires=("tools", "tool_calls"))

    b = _Builder("agent-tool-without-parameters", fmt)
    tool_name = b.word("toolname")
    b.add("user", "What time is it {}?")
    (id_,) = _call(b, tool_name, arguments=False)
    _result(b, id_, tool_name, '{"time": "12:00", "note": "{}"}')
    _answer(b, "Noon {}.")
    _done(
        probes,
        b,
        "a tool without parameters, called with no arguments",
        tools=[_tool(tool_name, "Get the current time.", None)],
        requires=("tools", "tool_calls"),
    )

    # OpenAI's tool schema makes the description optional: a template must not need one
    b = _Builder("agent-tool-without-description", fmt)
    tool_name = b.word("toolname")
    b.add("user", "Weather in Quito {}?")
    (id_,) = _call(b, tool_name)
    _result(b, id_, tool_name)
    _answer(b, "Mild {}.")
    tool = _tool(tool_name, "", {"city": "The city name."})
    del tool["function"]["description"]
    _done(probes, b, "a tool declared without a description", tools=[tool], requires=("tools", "tool_calls"))


def _reasoning_probes(probes: list[Probe], fmt: str) -> None:
    """Reasoning beside tool calls and in history: the last turn's reasoning is the data, earlier turns' reasoning
    may be dropped by design. Call turns carry empty-string content, as reasoning models' data does."""
    b = _Builder("agent-reasoning-tool-loop", fmt)
    tool_name = b.word("toolname")
    b.add("user", "Should I take an umbrella in London {}?")
    (id_,) = _call(b, tool_name, content="", reasoning="I need the weather first {}.")
    _result(b, id_, tool_name)
    _answer(b, "Yes, take one {}.", reasoning="The result says rain {}.")
    _done(
        probes,
        b,
        "reasoning beside a tool call, then a final answer with reasoning",
        tools=[weather_tool(tool_name)],
        requires=("reasoning", "tool_calls"),
    )

    b = _Builder("reasoning-history", fmt)
    b.add("user", "What is 3+3 {}?")
    _answer(b, "Six {}.", reasoning="Three and three {}.")
    b.add("user", "And 4+4 {}?")
    _answer(b, "Eight {}.", reasoning="Four and four {}.")
    _done(probes, b, "reasoning in history and in the last turn", requires=("reasoning",))

    b = _Builder("agent-reasoning-history-tools", fmt)
    tool_name = b.word("toolname")
    b.add("system", "Think, then act {}.", kind="system", capability="system")
    b.add("user", "Weather in Delhi {}?")
    (id_,) = _call(b, tool_name, content="", reasoning="Look it up {}.")
    _result(b, id_, tool_name)
    _answer(b, "Hot {}.", reasoning="The tool says hot {}.")
    b.add("user", "Should I go {}?")
    _answer(b, "Go early {}.", reasoning="Mornings are cooler {}.")
    _done(
        probes,
        b,
        "a reasoning tool loop in history, a follow-up with reasoning",
        tools=[weather_tool(tool_name)],
        requires=("reasoning", "tool_calls"),
    )


def _part_probes(probes: list[Probe], fmt: str) -> None:
    """Content as a list of parts in every role, with image parts beside text."""

    def parts(
        b: _Builder, role: str, capability: str | None, *extra: dict[str, Any], texts: int = 1, **fields: Any
    ) -> None:
        index, content = len(b.messages), list(extra)
        for n in range(texts):
            word = b.word("part")
            content.append({"type": "text", "text": f"{' ' if n else ''}Part text {word}."})
            b.note(word, "part", index, capability)
        b.messages.append({"role": role, "content": content, **fields})

    # two text parts each: a template that keeps only the first part's text (`content[0]['text']`) drops the other
    b = _Builder("parts-system", fmt)
    parts(b, "system", "system", texts=2)
    b.add("user", "Hello {}.")
    b.add("assistant", "Hi {}.")
    _done(probes, b, "system content as two text parts", requires=("system", "content_parts"))

    b = _Builder("parts-assistant", fmt)
    b.add("user", "Hello {}.")
    parts(b, "assistant", None, texts=2)
    b.add("user", "Again {}.")
    parts(b, "assistant", None, texts=2)
    _done(probes, b, "assistant content as two text parts", requires=("content_parts",))

    b = _Builder("parts-tool-result", fmt)
    tool_name = b.word("toolname")
    b.add("user", "Weather in Bern {}?")
    (id_,) = _call(b, tool_name, noted=False)
    parts(b, "tool", "tool_results", tool_call_id=id_, name=tool_name)
    _answer(b, "Fresh {}.")
    _done(
        probes,
        b,
        "a tool result as text parts",
        tools=[weather_tool(tool_name)],
        requires=("tool_calls", "tool_results", "content_parts"),
    )

    b = _Builder("image-url-part", fmt)
    parts(b, "user", None, {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}})
    b.add("assistant", "A cat {}.")
    _done(probes, b, "a user message with an image_url part and a text part", requires=("content_parts",))

    b = _Builder("image-part", fmt)
    parts(b, "user", None, {"type": "image"})
    b.add("assistant", "A picture {}.")
    _done(probes, b, "a user message with an image part and a text part", requires=("content_parts",))


def scenario_probes(id_format: str = "openai") -> list[Probe]:
    """The agent scenarios, with tool-call ids in `id_format` ("openai" or "mistral", see probes.id_format_for)."""
    probes: list[Probe] = []
    for section in (
        _turn_probes,
        _call_shape_probes,
        _call_history_probes,
        _loop_probes,
        _definition_probes,
        _reasoning_probes,
        _part_probes,
    ):
        section(probes, id_format)
    return [_reasoning_history(p) for p in probes]
