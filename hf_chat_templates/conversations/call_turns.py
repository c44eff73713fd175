"""Call turns that carry text: content as a list of text parts beside a tool call, as multimodal and agent data
sends it. A template that writes content only when it `is string` (or only for turns without calls) drops it, and
the model is trained on a call turn without its text; `nothing-dropped` finds the parts' sentinels missing."""

from __future__ import annotations

from .probes import Probe, _Builder, _done, tool_call, weather_tool


def call_turn_probes(id_format: str = "openai") -> list[Probe]:
    """An assistant turn with text parts beside its tool call, then the call's result and an answer."""
    probes: list[Probe] = []
    b = _Builder("agent-call-with-content-parts", id_format)
    tool_name = b.word("toolname")
    b.add("user", "Weather in Lisbon {}?")
    index = len(b.messages)
    text, city, id_ = b.word("part"), b.word("argument"), b.call_id()
    b.messages.append(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": f"Let me look that up {text}."}],
            "tool_calls": [tool_call(tool_name, {"city": city}, call_id=id_)],
        }
    )
    # The parts are the turn's text: required of every template that reads text parts at all.
    b.note(text, "part", index, "content_parts")
    b.note(tool_name, "tool_name", index, "tool_calls")
    b.note(city, "argument", index, "tool_calls")
    b.add("tool", "Sunny {}.", kind="tool_result", capability="tool_results", tool_call_id=id_, name=tool_name)
    b.add("assistant", "Sunny in Lisbon {}.")
    _done(
        probes,
        b,
        "a tool call with its text as content parts beside it",
        tools=[weather_tool(tool_name)],
        requires=("tool_calls", "content_parts"),
    )
    return probes
