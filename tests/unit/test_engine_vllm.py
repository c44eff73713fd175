"""vLLM's profile: its preprocessing of messages (content format, parts, tool-call arguments, tools) reproduced from
vLLM's source, then transformers' rendering; a template that renders differently under vLLM is found by
`engine-parity`, and one that reads what vLLM hands it renders the same."""

from __future__ import annotations

import copy
import datetime as _dt
from pathlib import Path
from typing import Any

import pytest

from hf_chat_templates.conversations.probes import Probe
from hf_chat_templates.template.engines.base import RenderJob
from hf_chat_templates.template.engines.vllm import (
    VllmEngine,
    detect_content_format,
    vllm_conversation,
    vllm_tools,
)
from hf_chat_templates.template.rendering import Renderer

from ..helpers import GOOD, check, context

CLOCK = _dt.datetime(2024, 7, 26, 10, 30)
STRING_TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
# Loops over the user's parts but writes the system content as a string: vLLM's "openai" format breaks it.
MIXED_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message.role == 'user' %}{% for part in message['content'] %}{{ part.text }}{% endfor %}"
    "{% else %}{{ message.content }}{% endif %}|"
    "{% endfor %}"
)
PARTS = [{"type": "text", "text": "First."}, {"type": "text", "text": "Second."}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def render(
    template: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **variables: Any
) -> Any:
    (out,) = VllmEngine().render_all(template, [RenderJob(messages, tools, False, variables)], clock=CLOCK)
    return out


# ---- content format ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (STRING_TEMPLATE, "string"),
        ("{% for m in messages %}{% if m.content is string %}{{ m.content }}{% endif %}{% endfor %}", "string"),
        (MIXED_TEMPLATE, "openai"),
        # through a {% set %} of messages, and a filter on the content
        (
            "{% set msgs = messages[1:] %}{% for m in msgs %}{% for p in m.content | list %}{% endfor %}{% endfor %}",
            "openai",
        ),
        ("{% for m in messages %}{% for p in other.content %}{% endfor %}{% endfor %}", "string"),
        ("{% for m in messages %}", "string"),  # does not compile: vLLM's default
    ],
)
def test_the_content_format_comes_from_the_syntax_tree(template: str, expected: str) -> None:
    assert detect_content_format(template) == expected


# ---- messages --------------------------------------------------------------------------------------------------


def test_a_template_reading_content_as_a_string_gets_the_parts_joined_with_a_newline() -> None:
    (user,) = vllm_conversation([{"role": "user", "content": PARTS}], "string")
    assert user == {"role": "user", "content": "First.\nSecond."}
    assert render(STRING_TEMPLATE, [{"role": "user", "content": PARTS}]).text == "<user>First.\nSecond."


def test_a_template_iterating_parts_keeps_them_and_gets_strings_as_one_part() -> None:
    user, system = vllm_conversation(
        [{"role": "user", "content": PARTS}, {"role": "system", "content": "Hi"}], "openai"
    )
    assert user["content"] == PARTS
    assert system["content"] == [{"type": "text", "text": "Hi"}]


def test_json_string_arguments_become_dicts_and_the_input_is_not_changed() -> None:
    bad = {**CALL, "function": {"name": "f", "arguments": "not json"}}
    listed = {**CALL, "function": {"name": "f", "arguments": "[1, 2]"}}
    given = {"role": "assistant", "content": None, "tool_calls": [CALL, bad, listed]}
    kept = copy.deepcopy(given)
    (assistant,) = vllm_conversation([given], "string")
    assert [c["function"]["arguments"] for c in assistant["tool_calls"]] == [{"city": "Paris"}, {}, {}]
    assert assistant["content"] == ""
    assert given == kept


def test_an_empty_tool_call_list_is_removed_and_unknown_keys_are_dropped() -> None:
    given = {"role": "assistant", "content": "Done.", "tool_calls": [], "reasoning_content": "hmm", "weight": 0}
    assert vllm_conversation([given], "string") == [{"role": "assistant", "content": "Done."}]


def test_reasoning_is_written_under_both_names_and_tool_results_are_joined() -> None:
    assistant, tool = vllm_conversation(
        [
            {"role": "assistant", "content": "Four.", "reasoning": "2+2"},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": PARTS},
        ],
        "openai",
    )
    assert assistant["reasoning"] == assistant["reasoning_content"] == "2+2"
    assert tool == {"role": "tool", "content": "First.\nSecond.", "tool_call_id": "call_1", "name": "get_weather"}


@pytest.mark.parametrize(
    ("part", "named"),
    [
        ({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}, "'image_url' part"),
        ({"type": "image"}, "Unsupported chat content part type"),
        ({"text": "no type"}, "Missing 'type' field"),
    ],
)
def test_a_part_vllm_refuses_is_a_failure_naming_message_and_part(part: dict[str, Any], named: str) -> None:
    out = render(STRING_TEMPLATE, [{"role": "user", "content": "Hi"}, {"role": "user", "content": [part]}])
    assert not out.ok and not out.refused and out.input_refused
    assert out.error.startswith("vLLM refuses the request: message 1, part 0") and named in out.error


def test_tools_get_description_and_parameters_as_none_like_the_server() -> None:
    tools = [{"type": "function", "function": {"name": "now"}, "x-extra": 1}]
    assert vllm_tools(tools) == [
        {"type": "function", "function": {"name": "now", "description": None, "parameters": None}, "x-extra": 1}
    ]
    assert vllm_tools([]) is None
    template = "{% for t in tools %}{{ t.function | tojson }}{% endfor %}"
    out = render(template, [{"role": "user", "content": "Hi"}], tools)
    assert out.text == '{"name": "now", "description": null, "parameters": null}'
    assert "tool 0: description and parameters arrive as None" in out.note


# ---- rendering -----------------------------------------------------------------------------------------------


def test_a_template_that_renders_differently_under_vllm_says_how(good: Path) -> None:
    from transformers import AutoTokenizer

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PARTS}]
    ours = Renderer(AutoTokenizer.from_pretrained(str(good)), MIXED_TEMPLATE).render(messages)
    assert ours.text == "Be brief.|First.Second.|"
    out = render(MIXED_TEMPLATE, messages)
    assert out.text == "[{'type': 'text', 'text': 'Be brief.'}]|First.Second.|"
    assert "content format 'openai'" in out.note and "message 0: the string content arrives as a list" in out.note


@pytest.mark.parametrize(("variant", "kept"), [("upstream", False), ("corrected", True)])
def test_the_gemma3_seed_writes_every_message_empty_under_vllm(variant: str, kept: bool) -> None:
    """The seed loops over content parts (so vLLM sends every content as parts) and collects their text with a
    `{% set %}` inside the loop, which Jinja forgets when the loop ends."""
    from hf_chat_templates import _compat
    from hf_chat_templates.families.registry import get_family

    template = get_family("gemma3-tools").variants[variant].template
    messages = [{"role": "user", "content": "Hello there."}]
    (ours,) = _compat.render_conversations(template, [messages], None, bos_token="<bos>")
    out = render(template, messages, bos_token="<bos>")
    assert "Hello there." in ours
    assert ("Hello there." in out.text) is kept
    assert (out.text == ours) is kept


def test_engine_parity_finds_it_naming_vllm_the_probe_and_the_position(good: Path) -> None:
    probe = Probe("system", ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}))
    result = check(context(good, MIXED_TEMPLATE, probes=(probe,), engines="vllm"), "engine-parity")
    assert result.status != "pass", result.message  # the check decides the severity of an input difference
    assert "probe system: vllm (main@b1fd9757f95e) renders differently at char 0" in result.message
    assert "the string content arrives as a list of one text part" in result.message


def test_engine_parity_passes_for_a_template_that_reads_what_vllm_hands_it(good: Path) -> None:
    probes = (
        Probe("plain", ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."})),
        Probe("call", ({"role": "user", "content": "Weather?"}, {"role": "assistant", "tool_calls": [CALL]})),
        Probe("parts", ({"role": "user", "content": PARTS[:1]},)),
    )
    result = check(context(good, GOOD, probes=probes, engines="vllm"), "engine-parity")
    assert result.status == "pass", result.message
    # which vLLM source the profile reproduces, in the message and the detail
    assert "vllm/renderers/chat_utils.py at main@b1fd9757f95e" in result.message
    follows = result.detail["engines"]["vllm"]["follows"]
    assert follows["file"] == "vllm/renderers/chat_utils.py" and follows["commit"].startswith("b1fd9757f95e")


def test_refusals_and_the_clock_are_transformers_own() -> None:
    out = render("{{ raise_exception('no system') }}", [{"role": "user", "content": "Hi"}])
    assert out.refused and out.error == "TemplateError: no system"
    assert render("{{ strftime_now('%d %B %Y') }}", []).text == "26 July 2024"


def test_a_render_that_never_ends_stops_and_the_jobs_after_it_fail_at_once() -> None:
    import time

    from hf_chat_templates.template.limits import RenderLimits

    endless = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    jobs = [RenderJob([{"role": "user", "content": "Hi"}], None, False, {})] * 3
    start = time.process_time()
    outs = VllmEngine(RenderLimits(seconds=0.3)).render_all(endless, jobs, clock=CLOCK)
    assert time.process_time() - start < 3
    assert [o.ok for o in outs] == [False] * 3
    assert "time limit of 0.3 s" in (outs[0].error or "") and outs[1].error == outs[2].error


# ---- what vLLM's preprocessing alone explains -------------------------------------------------------------------

NO_PARAMETERS = [{"type": "function", "function": {"name": "now", "description": "Get the time."}}]
TOOLS_TEMPLATE = "{{ tools | tojson }}" + STRING_TEMPLATE
ARGUMENTS_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}"
)


def _vllm_parity(good: Path, template: str, probe: Probe) -> Any:
    return check(context(good, template, probes=(probe,), engines="vllm"), "engine-parity")


def test_a_tool_without_parameters_written_as_null_is_vllms_request_handling_info(good: Path) -> None:
    probe = Probe("no-parameters", ({"role": "user", "content": "Time?"},), tuple(NO_PARAMETERS))
    result = _vllm_parity(good, TOOLS_TEMPLATE, probe)
    assert result.status == "info" and result.cause == "input normalization", result.message
    assert '"Get·the·time."⟨here⟩}}]<user>Time? vs vllm' in result.message
    assert '"Get·the·time."⟨here⟩,·"parameters":·null' in result.message
    assert (
        "vllm (main@b1fd9757f95e) passes `parameters: null` (and `description: null`) for a tool given without them"
        in (result.message)
    )
    assert "the template writes what it is given" in result.message
    assert result.detail["preprocessing"] and "give every tool a parameters schema" in result.hint


def test_json_string_arguments_vllm_parses_are_its_request_handling_info(good: Path) -> None:
    call = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    result = _vllm_parity(good, ARGUMENTS_TEMPLATE, Probe("json-arguments", ({"role": "user", "content": "Hi"}, call)))
    assert result.status == "info" and result.cause == "input normalization", result.message
    assert "parses JSON-string tool-call arguments into objects before rendering" in result.message
    assert "pass tool-call arguments as objects in training" in result.hint


def test_arguments_vllm_replaces_with_an_empty_object_still_warn(good: Path) -> None:
    # not JSON: vLLM sends {} in their place, which loses them; no rewrite of the request explains that
    broken = {**CALL, "function": {"name": "get_weather", "arguments": "city=Paris"}}
    call = {"role": "assistant", "content": None, "tool_calls": [broken]}
    result = _vllm_parity(good, ARGUMENTS_TEMPLATE, Probe("bad-arguments", ({"role": "user", "content": "Hi"}, call)))
    assert result.status == "warn" and "preprocessing" not in result.detail, result.message
    assert "vLLM's preprocessing (content format 'string'" in result.message


def test_a_tool_without_parameters_beside_another_difference_still_warns(good: Path) -> None:
    # the template loops over the user's parts, so vLLM sends the system content as parts too: null parameters alone
    # do not explain what vLLM renders
    messages = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Time?"})
    result = _vllm_parity(good, "{{ tools | tojson }}" + MIXED_TEMPLATE, Probe("mixed", messages, tuple(NO_PARAMETERS)))
    assert result.status == "warn" and "preprocessing" not in result.detail, result.message
    assert "the string content arrives as a list of one text part" in result.message
