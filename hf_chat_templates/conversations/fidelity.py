"""Probes whose strings and values a template could escape, encode again or rewrite, for `values-faithful`.

Each string carries a sentinel, so `nothing-dropped` still finds it and `values-faithful` can locate what the
template made of it: text with quotes, backslashes, newlines and non-ASCII; a tool result that is a JSON string;
tool-call arguments as a JSON string and as a dict of typed values; content as text parts; tool-call ids.
"""

from __future__ import annotations

from typing import Any

from .probes import Probe, _Builder, _done, tool_call, weather_tool

# Values a template must write as the format requires: JSON `true`/`null`, or call syntax `exact=True`.
TYPED_ARGUMENTS: dict[str, Any] = {"exact": True, "metric": False, "limit": None, "days": 3}


def _forecast_tool(name: str) -> dict[str, Any]:
    tool = weather_tool(name, "Get the forecast for a city.")
    tool["function"]["parameters"]["properties"].update(
        {
            "exact": {"type": "boolean", "description": "Exact figures."},
            "metric": {"type": "boolean", "description": "Metric units."},
            "limit": {"type": "integer", "description": "At most this many entries, null for all."},
            "days": {"type": "integer", "description": "How many days."},
        }
    )
    return tool


def _call(
    b: _Builder, tool_name: str, arguments: dict[str, Any], *, as_string: bool, noted: tuple[str, ...] = ()
) -> str:
    """An assistant turn with one call of `tool_name` (its name and string arguments noted, or the `noted` words
    when given): the call's id."""
    id_ = b.call_id()
    index = len(b.messages)
    call = tool_call(tool_name, arguments, as_string=as_string, call_id=id_)
    b.messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    b.note(tool_name, "tool_name", index, "tool_calls")
    for value in noted or [v for v in arguments.values() if isinstance(v, str)]:
        b.note(value, "argument", index, "tool_calls")
    return id_


def _search_tool(name: str) -> dict[str, Any]:
    """A tool whose declared parameters are a string, an object and a number."""
    tool = weather_tool(name, "Search the forecasts.")
    tool["function"]["parameters"] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to search for."},
            "filters": {"type": "object", "description": "Unit and most results."},
            "ratio": {"type": "number", "description": "How much of each result to keep."},
        },
        "required": ["query"],
    }
    # `tags` (a list) is called but not declared: a parameter without a type, or of type array, makes Hermes 3's
    # tool_use template raise in transformers.js (`basic_type_map[json_spec.type]`, `json_spec|items`), a defect of
    # how it lists tools that engine-parity would report on every template of that shape, not one of its calls
    return tool


def _result(b: _Builder, text: str, id_: str, tool_name: str) -> None:
    b.add("tool", text, kind="tool_result", capability="tool_results", tool_call_id=id_, name=tool_name)


def _text_probes(probes: list[Probe], id_format: str) -> None:
    """Text with characters a template could escape, and text as a list of parts."""
    b = _Builder("values-escaped-text", id_format)
    b.add("system", 'Answer "exactly" {}: a\\b, tab\tthen naïve café.', kind="system", capability="system")
    b.add("user", "She said \"it's {} o'clock\" \\ then left.\nNext line: 東京 ✓")
    b.add("assistant", 'Reply "{}": C:\\temp\\new\nDone — “ok”.')
    _done(probes, b, "quotes, backslashes, newlines and non-ASCII in text")

    b = _Builder("values-content-parts", id_format)
    index = len(b.messages)
    first, second = b.word("part"), b.word("part")
    b.messages.append(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": f'First part "{first}".'},
                {"type": "text", "text": f" Second part {second}."},
            ],
        }
    )
    b.note(first, "part", index, None)
    b.note(second, "part", index, None)
    b.add("assistant", "Both parts read {}.")
    _done(probes, b, "text parts with quotes", requires=("content_parts",))


def _nested_probe(probes: list[Probe], id_format: str) -> None:
    """Arguments a call syntax must quote, escape and nest."""
    b = _Builder("values-nested-arguments", id_format)
    tool_name = b.word("toolname")
    b.add("user", "Search the forecasts {}.")
    word = b.word("argument")
    # No non-ASCII here: openai-harmony writes arguments with `\u` escapes, transformers' tojson as given; the same
    # value, which values-faithful accepts, but other tokens, which reference-parity compares.
    arguments = {
        "query": f'Say "hi" {word} C:\\temp',
        "filters": {"unit": "metric", "max": 5},
        "tags": ["rain", "wind"],
        "ratio": 0.5,
    }
    id_ = _call(b, tool_name, arguments, as_string=False, noted=(word,))
    _result(b, "Found two {}.", id_, tool_name)
    b.add("assistant", "Two forecasts {}.")
    _done(
        probes,
        b,
        "tool-call arguments with quotes and a backslash in a string, an object, a list, a number",
        tools=[_search_tool(tool_name)],
        requires=("tool_calls",),
    )


def _tool_probes(probes: list[Probe], id_format: str) -> None:
    """A JSON-string tool result, arguments as a JSON string and as typed values, ids linking results to calls."""
    b = _Builder("values-tool-result-json-string", id_format)
    tool_name = b.word("toolname")
    b.add("user", "What is the weather in Paris {}?")
    id_ = _call(b, tool_name, {"city": b.word("argument")}, as_string=False)
    _result(b, '{"temperature": 21, "unit": "°C",\n "note": "{}"}', id_, tool_name)
    b.add("assistant", 'It is 21 °C, "mild" {}.')
    _done(
        probes,
        b,
        "a tool result that is a JSON string",
        tools=[weather_tool(tool_name)],
        requires=("tool_results",),
    )

    b = _Builder("values-string-arguments", id_format)
    tool_name = b.word("toolname")
    b.add("user", "What is the weather in Paris {}?")
    id_ = _call(b, tool_name, {"city": b.word("argument"), "days": 3}, as_string=True)
    _result(b, "Sunny {}.", id_, tool_name)
    b.add("assistant", "It is sunny {}.")
    _done(
        probes,
        b,
        "tool-call arguments as a JSON string",
        tools=[_forecast_tool(tool_name)],
        requires=("tool_calls",),
    )

    b = _Builder("values-typed-arguments", id_format)
    tool_name = b.word("toolname")
    b.add("user", "The exact forecast for Paris {}?")
    id_ = _call(b, tool_name, {"city": b.word("argument"), **TYPED_ARGUMENTS}, as_string=False)
    _result(b, "Sunny for three days {}.", id_, tool_name)
    b.add("assistant", "Sunny {}.")
    _done(
        probes,
        b,
        "tool-call arguments true, false, null and a number",
        tools=[_forecast_tool(tool_name)],
        requires=("tool_calls",),
    )

    b = _Builder("values-call-ids", id_format)
    tool_name = b.word("toolname")
    b.add("user", "Weather in Paris, then in Rome {}?")
    for _ in range(2):
        id_ = _call(b, tool_name, {"city": b.word("argument")}, as_string=False)
        _result(b, "Sunny {}.", id_, tool_name)
    b.add("assistant", "Sunny in both {}.")
    _done(
        probes,
        b,
        "two calls in turn, each result linked by id",
        tools=[weather_tool(tool_name)],
        requires=("tool_calls", "tool_results"),
    )


def fidelity_probes(id_format: str = "openai") -> list[Probe]:
    """The `values-` probes, with tool-call ids in `id_format` ("openai" or "mistral", see probes.id_format_for)."""
    probes: list[Probe] = []
    _text_probes(probes, id_format)
    _tool_probes(probes, id_format)
    _nested_probe(probes, id_format)
    return probes
